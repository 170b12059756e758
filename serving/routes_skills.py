"""Skill routes: list, read, edit and delete a tenant's skills, their history, export and import them as a bundle,
and distil a session's tasks now.

A skill is ``shared`` (every agent of the tenant) or private to one agent (``agent:<agent>``); a key reads and
writes the scopes it sees (docs/concepts/scopes.md), as for scenes. Skills have no team scope.

Writes of one skill set are serialised in this process (:mod:`serving.skill_passes`).
"""

import asyncio
import io
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from mnemoflow.client.models import LearntOut, SkillSummary
from mnemoflow.errors import NotFound
from mnemoflow.offload.owner import may_use, owner_of
from mnemoflow.scopes import SHARED, Caller, Scope
from mnemoflow.skills.bundle import export_skills, import_scope, read_skills_bundle
from mnemoflow.skills.index import rank_skills
from mnemoflow.skills.model import NAME_PATTERN, Skill, parse_edit, render_skill
from mnemoflow.skills.store import SkillStore, skill_stores
from serving.deps import ApiDeps, PathId
from serving.downloads import tar_download

SkillName = Annotated[str, Path(pattern=f"^{NAME_PATTERN}$", description="a skill name as listed")]
SkillScope = Annotated[Scope, Query(description="shared (the default) or agent:<agent>, one the key may see.")]
MAX_SKILL_BYTES = 64_000


class SkillSearch(BaseModel):
    query: str = Field(min_length=1, max_length=2000)
    limit: int = Field(3, ge=1, le=20)


class DistilRequest(BaseModel):
    scope: Scope | None = Field(
        None,
        description="Where the skills go: shared or agent:<agent>; default: the session owner's agent, else shared.",
    )


def summary(skill: Skill) -> SkillSummary:
    """A skill as the list shows it: its META fields and how many steps and pitfalls it has."""
    counts = {"steps": len(skill.steps), "pitfalls": len(skill.pitfalls)}
    return SkillSummary.model_validate({**skill.model_dump(exclude={"steps", "pitfalls", "created"}), **counts})


def skills_router(deps: ApiDeps, tenant_dep: Any) -> APIRouter:
    router = APIRouter(tags=["skills"])
    Holder = Annotated[Caller, Depends(tenant_dep.caller)]

    def store(caller: Caller, scope: str) -> SkillStore:
        """The skill set of ``scope`` if the key may see it: 404 as for another tenant's otherwise, 422 for a team."""
        try:
            skills = SkillStore.of_scope(deps.files, caller.tenant, scope)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from exc
        if not caller.sees(scope):
            raise HTTPException(404, f"no {scope} skills for this key")
        return skills

    @router.get("/v1/skills", response_model=list[SkillSummary])
    async def list_skills(caller: Holder, scope: SkillScope = SHARED) -> list[SkillSummary]:
        """The skills of one scope, by name."""
        skills = await asyncio.to_thread(store(caller, scope).all)
        return [summary(s) for s in skills]

    @router.post("/v1/skills/search", response_model=list[SkillSummary])
    async def search_skills(body: SkillSearch, caller: Holder) -> list[SkillSummary]:
        """The agent tool: the skills that best fit a request (BM25 over name, when to use and area), among the
        shared ones and the key's own agent's."""
        scopes = [SHARED, *([f"agent:{caller.agent}"] if caller.agent else [])]
        skills = [s for scope in scopes for s in await asyncio.to_thread(store(caller, scope).all)]
        return [summary(s) for s in rank_skills(body.query, skills, body.limit)]

    @router.get("/v1/skills/export", response_class=StreamingResponse)
    async def export_skills_bundle(
        caller: Holder,
        scope: Annotated[Scope | None, Query(description="One scope; default: every one the key sees.")] = None,
        history: Annotated[bool, Query(description="With the versions edits replaced.")] = False,
    ) -> StreamingResponse:
        """The tenant's skills as a bundle (``mnemoflow-skills-bundle`` v1, a tar; see
        :mod:`mnemoflow.skills.bundle`): one scope, or the shared skills and every agent's the key sees."""
        if scope is not None:
            store(caller, scope)  # the key sees it, or 404/422
        stores = await asyncio.to_thread(skill_stores, deps.files, caller.tenant)
        scopes = [scope] if scope is not None else [s.scope for s in stores if caller.sees(s.scope)]
        at = datetime.now(UTC)
        return await tar_download(
            lambda out: export_skills(deps.files, caller.tenant, out, at=at, scopes=scopes, history=history),
            f"{caller.tenant}.skills.tar",
        )

    @router.post("/v1/skills/import", response_model=list[LearntOut])
    async def import_skills_bundle(request: Request, caller: Holder) -> list[LearntOut]:
        """Fold a skills bundle (the request body, at most ``max_import_bytes``) into this tenant's skills, each
        scope's into the same scope, as a distilled task folds (skip, merge or store: importing twice adds
        nothing); ``task`` is the bundle member. 400 with the reason for a broken or tampered bundle, 404 when it
        holds a scope the key does not see (checked before anything is written)."""
        bundle = await asyncio.to_thread(read_skills_bundle, io.BytesIO(await request.body()))
        for scope in bundle.skills:
            store(caller, scope)
        done = []
        for scope in sorted(bundle.skills):
            async with deps.skills.lock(caller.tenant, scope):
                done += await asyncio.to_thread(
                    import_scope, deps.files, caller.tenant, bundle, scope, datetime.now(UTC)
                )
        return [LearntOut.model_validate(item, from_attributes=True) for item in done]

    @router.get("/v1/skills/{name}")
    async def read_skill(name: SkillName, caller: Holder, scope: Annotated[Scope | None, Query()] = None) -> Response:
        """One skill as its Markdown file: when to use it, steps, pitfalls, each with its ``[from session#node]``
        drill-down reference (``GET /v1/sessions/{session}/nodes/{node}``). Without ``scope``, the key's own
        agent's skill of that name, else the shared one: what an agent reading a name from its index means.
        A read counts as a use (the file's ``uses``; the CLI and the dashboard read the files, uncounted)."""
        scopes = [scope] if scope is not None else [*([f"agent:{caller.agent}"] if caller.agent else []), SHARED]
        for candidate in scopes:
            skills = store(caller, candidate)
            try:
                async with deps.skills.lock(caller.tenant, candidate):
                    skill = await asyncio.to_thread(skills.record_use, name)
            except NotFound:
                continue
            deps.metrics.skill_read(candidate)
            return Response(render_skill(skill), media_type="text/markdown; charset=utf-8")
        raise HTTPException(404, f"no skill named {name!r}")

    @router.put("/v1/skills/{name}", response_model=SkillSummary)
    async def edit_skill(name: SkillName, request: Request, caller: Holder, scope: SkillScope = SHARED) -> SkillSummary:
        """Replace a skill with an edited Markdown file (as ``GET`` gives it). The version goes up and the old one
        is kept in its history; ``created``, ``version`` and ``sources`` come from the stored skill, not the body.
        422 with the reason when the body is not a skill file or names another skill."""
        body = await request.body()
        if len(body) > MAX_SKILL_BYTES:
            raise HTTPException(413, f"a skill file is at most {MAX_SKILL_BYTES} bytes")
        try:
            edited = parse_edit(body.decode("utf-8"), name)
        except ValueError as exc:  # UnicodeDecodeError is one
            raise HTTPException(422, str(exc)) from exc
        skills = store(caller, scope)
        async with deps.skills.lock(caller.tenant, scope):
            try:
                new = await asyncio.to_thread(skills.edit, edited, datetime.now(UTC))
            except NotFound as exc:
                raise HTTPException(404, str(exc)) from exc
        return summary(new)

    @router.delete("/v1/skills/{name}", status_code=204)
    async def delete_skill(name: SkillName, caller: Holder, scope: SkillScope = SHARED) -> Response:
        """Delete a skill and its history (404 if there is none)."""
        async with deps.skills.lock(caller.tenant, scope):
            if not await asyncio.to_thread(store(caller, scope).delete, name):
                raise HTTPException(404, f"no skill named {name!r}")
        return Response(status_code=204)

    @router.get("/v1/skills/{name}/history", response_model=list[int])
    async def skill_history(name: SkillName, caller: Holder, scope: SkillScope = SHARED) -> list[int]:
        """The versions kept of a skill (those its edits replaced), oldest first."""
        return store(caller, scope).history(name)

    @router.post("/v1/sessions/{session}/skills", response_model=list[LearntOut])
    async def distil_session(session: PathId, body: DistilRequest, caller: Holder) -> list[LearntOut]:
        """Distil the session's long tasks into skills now (the explicit call; the session shards also run it
        when a task ends). Idempotent: a task already distilled is skipped."""
        if not may_use(caller, owner_of(deps.files, caller.tenant, session)):
            raise HTTPException(404, f"no session {session} for this key")
        scope = body.scope or deps.skills.default_scope(caller.tenant, session)
        store(caller, scope)  # the key may write where the skills go, or 404/422
        done = await deps.skills.run(caller.tenant, session, scope)
        return [LearntOut.model_validate(item, from_attributes=True) for item in done]

    return router
