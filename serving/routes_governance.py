"""The user owns the memory: atom management, direct writes, erase, export/import, operation status.

Reads answer at once from the files. Every change is an operation published on ``mnemoflow.commands`` and
applied by the worker that owns the user (see :mod:`mnemoflow.governance.operations`): the answer is 202 with
the operation's status, or 200 once applied when ``wait`` seconds were allowed for it (read-your-writes). Send
an ``Idempotency-Key`` header to make a retry safe: the same key with the same body is the same operation, with
another body it is refused (409).
"""

import asyncio
import hashlib
import io
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from mnemoflow.config import TOPIC_COMMANDS
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.governance.bundle import export_user, read_bundle, staged_path
from mnemoflow.governance.listing import AtomFilter, AtomPage, AtomVersion, history, page
from mnemoflow.governance.operations import (
    DeleteAtom,
    EraseSession,
    EraseUser,
    ForgetAgent,
    ImportUser,
    OperationEvent,
    OperationStatus,
    PatchAtom,
    Remember,
    fingerprint,
)
from mnemoflow.governance.status import OperationLog
from mnemoflow.ids import SafeId
from mnemoflow.memory.l1.models import MAX_CONTENT, AtomDraft
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.scoping import decide_scope
from mnemoflow.memory.l1.window import Author
from mnemoflow.ports.vectors import AtomType
from mnemoflow.scopes import Caller, ScopeKind
from mnemoflow.storage import Layout
from mnemoflow.storage.layout import users as stored_users
from serving.deps import ApiDeps, PathId
from serving.downloads import tar_download
from serving.security import acting

Wait = Annotated[float, Query(ge=0, le=60, description="Seconds to wait for the operation to be applied.")]
IdempotencyKey = Annotated[SafeId | None, Header(description="Operation id; a retry with the same key is safe.")]


class AtomPatch(BaseModel):
    """At least one field; the others keep their value."""

    model_config = {"extra": "forbid"}

    text: str | None = Field(None, min_length=1, max_length=MAX_CONTENT)
    type: AtomType | None = None
    priority: int | None = Field(None, ge=-1, le=100)


class MemoryIn(BaseModel):
    model_config = {"extra": "forbid"}

    text: str = Field(min_length=1, max_length=MAX_CONTENT)
    type: AtomType = "persona"
    priority: int = Field(50, ge=-1, le=100)
    agent: SafeId | None = Field(None, description="The agent it is remembered for (docs/concepts/scopes.md).")
    team: SafeId | None = None
    visibility: ScopeKind | None = Field(
        None, description="'shared', 'team' or 'agent'; absent: by type (an instruction is the agent's own)."
    )

    def scope(self) -> str:
        """The memory's scope, as extraction decides it for a message of this agent (once the key's agent and team
        are filled in: :func:`serving.security.acting`)."""
        draft = AtomDraft(content=self.text, type=self.type, priority=self.priority, source_message_ids=("api",))
        return decide_scope(draft, [], Author(self.agent, self.team), self.visibility)


class UserOperation(BaseModel):
    user: str
    id: str


class AgentForgotten(BaseModel):
    """``DELETE /v1/agents/{agent}``: the operation submitted for each user of the tenant."""

    agent: str
    operations: list[UserOperation]


_POLL_SECONDS = 0.05


def governance_router(deps: ApiDeps, tenant_dep: Any) -> APIRouter:
    router = APIRouter(tags=["memory governance"])
    Tenant = Annotated[str, Depends(tenant_dep)]
    Holder = Annotated[Caller, Depends(tenant_dep.caller)]
    ops = OperationLog(deps.files)

    async def status_after(tenant: str, oid: str, wait: float) -> OperationStatus:
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            status = await asyncio.to_thread(ops.get, tenant, oid)
            if status is None:
                raise HTTPException(404, f"no operation {oid}")
            if status.status != "pending" or asyncio.get_running_loop().time() >= deadline:
                return status
            await asyncio.sleep(_POLL_SECONDS)

    def answer(status: OperationStatus) -> JSONResponse:
        return JSONResponse(status.model_dump(mode="json"), status_code=202 if status.status == "pending" else 200)

    async def submit(tenant: str, op: Any, key: str | None, wait: float) -> JSONResponse:
        """Record the operation as pending, publish it (again, if a retry finds it still pending or never accepted
        by Kafka), then wait."""
        oid = key or f"op-{uuid.uuid4().hex}"
        known = await asyncio.to_thread(ops.get, tenant, oid)
        if known is not None and known.fingerprint != fingerprint(op):
            raise HTTPException(409, f"operation id {oid} was already used with another body")
        never_accepted = known is not None and known.status == "failed" and known.applied_at is None
        if known is None or known.status == "pending" or never_accepted:
            now = known.submitted_at if known else datetime.now(UTC)
            pending = OperationStatus(
                id=oid, kind=op.kind, status="pending", fingerprint=fingerprint(op), submitted_at=now
            )
            if known is None or never_accepted:
                await asyncio.to_thread(ops.put, tenant, pending)
            event = OperationEvent(tenant=tenant, operation_id=oid, op=op, submitted_at=now)
            try:
                await deps.bus.publish(TOPIC_COMMANDS, [(event.key, event.model_dump_json().encode(), None)])
            except ServiceUnavailable as exc:  # never accepted: say so rather than leave it pending forever
                failed = pending.model_copy(update={"status": "failed", "reason": f"not accepted: {exc}"})
                await asyncio.to_thread(ops.put, tenant, failed)
                raise
        return answer(await status_after(tenant, oid, wait))

    def records(tenant: str, user: str) -> RecordLog:
        if not deps.files.exists(Layout.user_dir(tenant, user)):
            raise HTTPException(404, f"no user {user}")
        return RecordLog(deps.files, tenant, user)

    async def known_atom(tenant: str, user: str, atom_id: str) -> None:
        if not await asyncio.to_thread(records(tenant, user).get, [atom_id]):  # reads the user's whole history
            raise HTTPException(404, f"no atom {atom_id} for user {user}")

    @router.get("/v1/operations/{operation_id}", response_model=OperationStatus)
    async def operation(operation_id: PathId, tenant: Tenant, wait: Wait = 0) -> JSONResponse:
        """pending, applied (with what it did) or failed (with the reason); ``wait`` answers once it is done."""
        return answer(await status_after(tenant, operation_id, wait))

    @router.get("/v1/users/{user}/atoms", response_model=AtomPage)
    async def list_atoms(
        user: PathId,
        tenant: Tenant,
        where: Annotated[AtomFilter, Query()],
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        cursor: str | None = None,
    ) -> AtomPage:
        """The user's live atoms, oldest first, filtered; ``next_cursor`` fetches the next page."""
        log = records(tenant, user)
        return page(await asyncio.to_thread(log.read, False), where, limit, cursor)

    @router.get("/v1/users/{user}/atoms/{atom_id}/history", response_model=list[AtomVersion])
    async def atom_history(user: PathId, atom_id: PathId, tenant: Tenant) -> list[AtomVersion]:
        """Every version of the atom (edits, updates, merges, a deletion), oldest first, with who made each."""
        versions = history(await asyncio.to_thread(records(tenant, user).read, False), atom_id)
        if not versions:
            raise HTTPException(404, f"no atom {atom_id} for user {user}")
        return versions

    @router.patch("/v1/users/{user}/atoms/{atom_id}", status_code=202, response_model=OperationStatus)
    async def patch_atom(
        user: PathId,
        atom_id: PathId,
        body: AtomPatch,
        tenant: Tenant,
        idempotency_key: IdempotencyKey = None,
        wait: Wait = 0,
    ) -> JSONResponse:
        """A new version superseding the atom (re-embedded, provenance kept, marked manual)."""
        if body.text is None and body.type is None and body.priority is None:
            raise HTTPException(422, "a patch needs at least one of text, type, priority")
        await known_atom(tenant, user, atom_id)
        op = PatchAtom(user=user, atom_id=atom_id, **body.model_dump())
        return await submit(tenant, op, idempotency_key, wait)

    @router.delete("/v1/users/{user}/atoms/{atom_id}", status_code=202, response_model=OperationStatus)
    async def delete_atom(
        user: PathId, atom_id: PathId, tenant: Tenant, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Delete the atom: gone from the index and recall when applied, from scenes and persona at their pass."""
        await known_atom(tenant, user, atom_id)
        return await submit(tenant, DeleteAtom(user=user, atom_id=atom_id), idempotency_key, wait)

    @router.delete("/v1/users/{user}/agents/{agent}", status_code=202, response_model=OperationStatus)
    async def forget_agent(
        user: PathId, agent: PathId, tenant: Tenant, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Remove one agent's private memory of the user (its atoms; shared and team memory and the conversation
        stay). The applied status says how many atoms it removed."""
        return await submit(tenant, ForgetAgent(user=user, agent=agent), idempotency_key, wait)

    @router.delete("/v1/agents/{agent}", status_code=202, response_model=AgentForgotten)
    async def forget_agent_everywhere(
        agent: PathId, tenant: Tenant, idempotency_key: IdempotencyKey = None
    ) -> AgentForgotten:
        """Remove one agent's private memory of every user of the tenant: one operation per user (each on its user's
        partition, as ``DELETE /v1/users/{user}/agents/{agent}``), each answered with its id; poll each for its
        result. A retry with the same ``Idempotency-Key`` submits nothing twice."""
        key = idempotency_key or f"forget-{uuid.uuid4().hex}"
        users = [u for _, u in await asyncio.to_thread(list, stored_users(deps.files, tenant))]
        submitted = []
        for user in users:
            oid = f"{key[:100]}-{hashlib.sha256(user.encode()).hexdigest()[:16]}"  # the same for a retry
            await submit(tenant, ForgetAgent(user=user, agent=agent), oid, 0)
            submitted.append(UserOperation(user=user, id=oid))
        return AgentForgotten(agent=agent, operations=submitted)

    @router.post("/v1/users/{user}/memories", status_code=202, response_model=OperationStatus)
    async def remember(
        user: PathId, body: MemoryIn, caller: Holder, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Store a memory without extraction, through the similarity gate and dedup (a near-duplicate is
        skipped: the applied status says which). A key bound to an agent or team remembers as it."""
        (body,) = acting(caller, [body])
        remember = Remember(user=user, text=body.text, type=body.type, priority=body.priority, scope=body.scope())
        return await submit(caller.tenant, remember, idempotency_key, wait)

    @router.delete("/v1/users/{user}", status_code=202, response_model=OperationStatus)
    async def erase_user(
        user: PathId, tenant: Tenant, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Remove everything of the user (L0, records, scenes, persona, state, index rows, their sessions) and
        leave a tombstone: their turns said before the erase, re-delivered or re-sent, are dropped."""
        records(tenant, user)
        return await submit(tenant, EraseUser(user=user), idempotency_key, wait)

    @router.delete("/v1/sessions/{session}", status_code=202, response_model=OperationStatus)
    async def erase_session(
        session: PathId, tenant: Tenant, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Remove the session's refs, offload entries, annotations, canvases and state; tombstone it."""
        if not deps.files.exists(Layout.session_dir(tenant, session)):
            raise HTTPException(404, f"no session {session}")
        return await submit(tenant, EraseSession(session=session), idempotency_key, wait)

    @router.get("/v1/users/{user}/export")
    async def export(user: PathId, tenant: Tenant, sessions: bool = False) -> StreamingResponse:
        """The user's bundle (``mnemoflow-user-bundle`` v1, a tar; see :mod:`mnemoflow.governance.bundle`)."""
        records(tenant, user)
        model = (await deps.recaller()).store.embedding_model
        at = datetime.now(UTC)
        return await tar_download(
            lambda out: export_user(deps.files, tenant, user, out, embedding_model=model, at=at, sessions=sessions),
            f"{user}.mnemoflow.tar",
        )

    @router.post("/v1/users/{user}/import", status_code=202, response_model=OperationStatus)
    async def import_bundle(
        user: PathId, request: Request, tenant: Tenant, idempotency_key: IdempotencyKey = None, wait: Wait = 0
    ) -> JSONResponse:
        """Load a bundle (the request body, at most ``max_import_bytes``) as this user; the worker writes its files
        and indexes its atoms."""
        oid = idempotency_key or f"op-{uuid.uuid4().hex}"
        data = await request.body()
        await asyncio.to_thread(read_bundle, io.BytesIO(data))  # a broken or tampered bundle: 400 now, not later
        digest = hashlib.sha256(data).hexdigest()
        name = f"{oid}.tar"
        op = ImportUser(user=user, bundle=name, sha256=digest)
        known = await asyncio.to_thread(ops.get, tenant, oid)
        if known is None or known.fingerprint == fingerprint(op):
            await asyncio.to_thread(deps.files.write_atomic, staged_path(tenant, name), data)
        return await submit(tenant, op, oid, wait)

    return router
