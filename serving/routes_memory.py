"""Long-term memory routes: recall before a turn, the agent tools, drill-down, persona and scenes, session end."""

import asyncio
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Response
from pydantic import BaseModel, Field

from mnemoflow.client.models import AtomDrillDown, ConversationHitOut
from mnemoflow.config import TOPIC_JOBS
from mnemoflow.errors import NotFound
from mnemoflow.ids import SafeId
from mnemoflow.memory.l0 import L0Message, read_l0
from mnemoflow.memory.l1.schedule import L1Job
from mnemoflow.memory.persona.generate import PersonaStore
from mnemoflow.memory.recall.recaller import RecallHit, RecallResult
from mnemoflow.memory.scenes.drilldown import drill_down as scene_refs
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.scopes import SHARED, Caller, Scope, Viewer
from serving.deps import ApiDeps, PathId

_AS = "Recall as this agent (and team): its private memory, its team's and the shared. A bound key is itself."


class RecallRequest(BaseModel):
    user: SafeId
    query: str = Field(max_length=20_000, description="The user's new message (or the text to recall for).")
    agent: SafeId | None = Field(None, description=_AS)
    team: SafeId | None = None


class MemorySearch(BaseModel):
    user: SafeId
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(5, ge=1, le=20)
    type: Literal["persona", "episodic", "instruction"] | None = None
    agent: SafeId | None = Field(None, description=_AS)
    team: SafeId | None = None


SceneName = Annotated[str, Path(max_length=100, description="a scene file name as listed, e.g. 'hiking-trips.md'")]
ScopeQuery = Annotated[
    Scope, Query(description="Whose scenes and persona: shared (the default), team:<team> or agent:<agent>.")
]


def viewer_of(caller: Caller, agent: str | None, team: str | None) -> Viewer:
    """What a read may see (docs/concepts/scopes.md); 404 when a bound key names another agent or team."""
    try:
        return caller.viewer(agent, team)
    except NotFound as exc:
        raise HTTPException(404, str(exc)) from exc


class ConversationSearch(BaseModel):
    user: SafeId
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(5, ge=1, le=50)
    session: SafeId | None = None
    agent: SafeId | None = Field(None, description=_AS)
    team: SafeId | None = None


class SessionEnd(BaseModel):
    user: SafeId


def memory_router(deps: ApiDeps, tenant_dep: Any) -> APIRouter:
    router = APIRouter(tags=["long-term memory"])
    Tenant = Annotated[str, Depends(tenant_dep)]
    Holder = Annotated[Caller, Depends(tenant_dep.caller)]

    @router.post("/v1/recall", response_model=RecallResult)
    async def recall(body: RecallRequest, caller: Holder) -> RecallResult:
        """Before a turn: ``prepend_context`` (L1 hits) and ``system_context`` (persona, scene navigation, tool
        guide). On timeout it degrades to no hits with the persona still there. Hits are of the scopes the agent
        may see, each with its scope; an admin key naming no agent recalls as the default agent (shared memory)."""
        viewer = viewer_of(caller, body.agent, body.team)
        result = await (await deps.recaller()).recall(caller.tenant, body.user, body.query, viewer=viewer)
        deps.metrics.recalled(result)
        return result

    @router.post("/v1/memory/search", response_model=list[RecallHit])
    async def memory_search(body: MemorySearch, caller: Holder) -> list[RecallHit]:
        """The agent tool: hybrid search over the user's atoms that the agent may see."""
        viewer = viewer_of(caller, body.agent, body.team)
        recaller = await deps.recaller()
        return await asyncio.to_thread(
            recaller.memory_search, caller.tenant, body.user, body.query, body.limit, body.type, viewer
        )

    @router.post("/v1/conversations/search", response_model=list[ConversationHitOut])
    async def conversation_search(body: ConversationSearch, caller: Holder) -> list[ConversationHitOut]:
        """The agent tool: search the user's raw conversation (L0), the messages the agent may read (its own, its
        team's, and those of the default agent)."""
        viewer = viewer_of(caller, body.agent, body.team)
        recaller = await deps.recaller()
        hits = await asyncio.to_thread(
            recaller.conversation_search, caller.tenant, body.user, body.query, body.limit, body.session, viewer
        )
        return [ConversationHitOut(message=h.message, score=h.score) for h in hits]

    @router.get("/v1/users/{user}/conversations", response_model=list[L0Message])
    async def conversations(
        user: PathId,
        tenant: Tenant,
        day: date | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[L0Message]:
        """A user's L0 messages in stored order (all days, or one)."""
        return read_l0(deps.files, tenant, user, day=day, limit=limit, offset=offset)

    @router.get("/v1/users/{user}/atoms/{atom_id}", response_model=AtomDrillDown)
    async def atom(user: PathId, atom_id: PathId, caller: Holder) -> AtomDrillDown:
        """Drill-down: an atom → its record (even when superseded) → the L0 messages it came from. A bound key
        drills into atoms it may see, and reads only the messages it may (``hidden`` counts the others); an admin
        key reads everything."""
        viewer = None if caller.admin else caller.viewer(None, None)
        recaller = await deps.recaller()  # drill-down reads the user's L0: off the event loop
        found = await asyncio.to_thread(recaller.drill_down, caller.tenant, user, atom_id, viewer)
        if found.record is None and not found.messages and not found.hidden:
            raise HTTPException(404, f"no atom {atom_id} for user {user}")
        return AtomDrillDown(record=found.record, messages=found.messages, hidden=found.hidden)

    def readable(caller: Caller, scope: str) -> str:
        """The scope a read of scenes or persona asks for, if the key may see it; 404 as for another tenant's user
        otherwise."""
        if not caller.sees(scope):
            raise HTTPException(404, f"no {scope} memory for this key")
        return scope

    @router.get("/v1/users/{user}/persona")
    async def persona(user: PathId, caller: Holder, scope: ScopeQuery = SHARED) -> Response:
        """L3: ``persona.md`` of one scope with its scene navigation (empty 404 until the first persona)."""
        text = PersonaStore(deps.files, caller.tenant, user, readable(caller, scope)).read()
        if not text:
            raise HTTPException(404, f"no persona yet for user {user}" + ("" if scope == SHARED else f" in {scope}"))
        return Response(text, media_type="text/markdown; charset=utf-8")

    @router.get("/v1/users/{user}/scenes")
    async def scenes(user: PathId, caller: Holder, scope: ScopeQuery = SHARED) -> list[dict[str, Any]]:
        """L2: the scenes of one scope in navigation order, with the atom ids each one holds (drill-down) and the
        engine that last wrote each (``llm``, ``heuristic``)."""
        return [
            {
                "filename": r.filename,
                "summary": r.summary,
                "heat": r.heat,
                "atom_ids": list(r.atom_ids),
                "engine": r.engine,
            }
            for r in scene_refs(deps.files, caller.tenant, user, readable(caller, scope))
        ]

    @router.get("/v1/users/{user}/scenes/{name}")
    async def scene(user: PathId, name: SceneName, caller: Holder, scope: ScopeQuery = SHARED) -> Response:
        """One scene file. Its name is checked as a scene name (CJK letters are word characters), not as an id:
        scenes about Chinese topics have Chinese names."""
        path = ScenePaths(caller.tenant, user, readable(caller, scope)).scene(name, deps.files)
        data = deps.files.read_bytes(path)
        if data is None:
            raise HTTPException(404, f"no scene {name} for user {user}")
        return Response(data, media_type="text/markdown; charset=utf-8")

    @router.post("/v1/sessions/{session}/end", status_code=202)
    async def end_session(session: PathId, body: SessionEnd, tenant: Tenant) -> dict[str, str]:
        """The host closed a session: extract the user's pending turns now, not after the idle timeout, and
        distil its finished long tasks into skills in the background."""
        job = L1Job(
            kind="session_end",
            tenant=tenant,
            user=body.user,
            reason=f"session {session} ended",
            requested_at=datetime.now(UTC),
        )
        await deps.bus.publish(TOPIC_JOBS, [(job.key, job.model_dump_json().encode(), None)])
        deps.skills.start(tenant, session)
        return {"status": "accepted"}

    return router
