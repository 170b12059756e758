"""The dashboard's pages. Each one reads through the same core functions as its JSON route (records and their
filter, the recaller's drill-down, the scene refs, the annotated offload entries, the node drill-down, the skill
store), so what a person sees is what an agent gets. The skill pages also write (edit, delete), under the same
per-skill-set lock as the API's skill routes."""

import asyncio
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError

from mnemoflow.errors import MnemoflowError, NotFound
from mnemoflow.governance.listing import AtomFilter, history, page
from mnemoflow.health import Check, run_checks
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.persona.generate import PersonaStore, written_by
from mnemoflow.memory.scenes.drilldown import drill_down as scene_refs
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.offload.annotations import annotated_entries, drill_down
from mnemoflow.offload.canvas import from_mermaid
from mnemoflow.offload.canvas_update import canvas_names, canvas_path
from mnemoflow.offload.entries import read_ref
from mnemoflow.profiles import DisplayNames
from mnemoflow.scopes import SHARED
from mnemoflow.skills.model import Skill, parse_edit, render_skill
from mnemoflow.skills.store import SkillStore, skill_stores
from mnemoflow.storage import Layout
from serving.deps import ApiDeps, PathId
from serving.routes_skills import MAX_SKILL_BYTES
from serving.security import TenantGate
from serving.ui.auth import COOKIE, LOGIN, UiGate, safe_next
from serving.ui.templating import MERMAID_JS, STATIC
from serving.ui.templating import page as render

ATOMS_PER_PAGE = 50
RANKED = 20
"""Atoms a ranked search shows (``memory_search``'s own bound)."""
LISTED = 1000
"""Users and sessions listed on the home page (the rest are counted)."""
PREVIEW_CHARS = 4000
"""Raw output shown beside each entry of a node; the ref page shows it whole."""
FILTERS = ("text", "type", "scope", "min_priority", "max_priority", "scene", "created_after", "created_before")


def _atom_filter(request: Request) -> tuple[AtomFilter, dict[str, str], str | None]:
    """The filter form's values (blank fields dropped; a date alone means midnight UTC) → filter, echo, error."""
    given = {k: v for k in FILTERS if (v := request.query_params.get(k, "").strip())}
    parsed = {k: f"{v}T00:00:00+00:00" if k.startswith("created_") and len(v) == 10 else v for k, v in given.items()}
    try:
        return AtomFilter.model_validate(parsed), given, None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        return AtomFilter(), given, problems


async def _form(request: Request) -> dict[str, str]:
    """A posted form's fields, first value of each (parsed here: no form library needed)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}


def _text(raw: bytes | None) -> str | None:
    """Raw output for display: undecodable bytes shown as U+FFFD (the byte-exact output is the JSON API's)."""
    return raw.decode("utf-8", errors="replace") if raw is not None else None


def ui_router(deps: ApiDeps, gate: UiGate, checks: Mapping[str, Check]) -> APIRouter:
    router = APIRouter(prefix="/ui", include_in_schema=False)
    Tenant = Annotated[str, Depends(gate)]
    files = deps.files
    names = DisplayNames(files)  # the speaker's name beside each user id, from L0 (read once, then what was added)

    def missing(tenant: str, what: str) -> HTMLResponse:
        return render("missing.html", 404, tenant=tenant, what=what)

    @router.get("/login")
    async def login_form(next: str | None = None) -> HTMLResponse:
        return render("login.html", next=safe_next(next), error=None)

    @router.post("/login", response_model=None)
    async def login(request: Request) -> HTMLResponse | RedirectResponse:
        """The form posts the key; a known one is set as the cookie."""
        form = await _form(request)
        key, target = form.get("key", "").strip(), safe_next(form.get("next"))
        if gate.tenant_for(key) is None:
            return render("login.html", 401, next=target, error="unknown API key")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            COOKIE, key, httponly=True, samesite="strict", path="/ui", secure=request.url.scheme == "https"
        )
        return response

    @router.post("/logout")
    async def logout() -> RedirectResponse:
        response = RedirectResponse(LOGIN, status_code=303)
        response.delete_cookie(COOKIE, path="/ui")
        return response

    @router.get("")
    async def home(tenant: Tenant) -> HTMLResponse:
        users = await asyncio.to_thread(files.list_dir, f"{tenant}/users")
        sessions = await asyncio.to_thread(files.list_dir, f"{tenant}/sessions")
        return render(
            "home.html",
            tenant=tenant,
            users=users[:LISTED],
            names=await asyncio.to_thread(names.of_many, tenant, users[:LISTED]),
            n_users=len(users),
            sessions=sessions[:LISTED],
            n_sessions=len(sessions),
        )

    @router.get("/users/{user}")
    async def user_page(
        user: PathId, request: Request, tenant: Tenant, cursor: str | None = None, ranked: bool = False
    ) -> HTMLResponse:
        """Persona, scenes, and the live atoms: filtered (every word), or ranked by hybrid search like recall."""
        if not files.exists(Layout.user_dir(tenant, user)):
            return missing(tenant, f"user {user}")
        where, given, problem = _atom_filter(request)
        records = await asyncio.to_thread(RecordLog(files, tenant, user).read, False)
        try:
            atoms = page(records, where, ATOMS_PER_PAGE, cursor)
        except MnemoflowError as exc:
            atoms, problem = page(records, where, ATOMS_PER_PAGE, None), str(exc)
        persona_text, scenes = PersonaStore(files, tenant, user).read(), []
        for ref in await asyncio.to_thread(scene_refs, files, tenant, user):
            body = files.read_bytes(f"{ScenePaths(tenant, user).scenes_dir}/{ref.filename}")
            scenes.append((ref, _text(body) or ""))
        # The scene an atom is in is the L2 scene that absorbed it; the L1 label (a model's scene_name) otherwise.
        scene_of = {atom_id: ref.filename.removesuffix(".md") for ref, _ in scenes for atom_id in ref.atom_ids}
        shown, scores = atoms.atoms, {}
        more = urlencode({**given, "cursor": atoms.next_cursor}) if atoms.next_cursor else None
        if ranked and where.text:  # as an agent's memory_search ranks them, then the other filters
            hits = await asyncio.to_thread(
                (await deps.recaller()).memory_search, tenant, user, where.text, RANKED, where.type
            )
            by_id, rest = {r.id: r for r in records}, where.model_copy(update={"text": None})
            shown = [by_id[h.id] for h in hits if h.id in by_id and by_id[h.id].live and rest.matches(by_id[h.id])]
            scores, more = {h.id: h.score for h in hits}, None
        return render(
            "user.html",
            tenant=tenant,
            user=user,
            name=await asyncio.to_thread(names.of, tenant, user),
            persona=persona_text,
            persona_engine=written_by(persona_text),
            scenes=scenes,
            scene_of=scene_of,
            atoms=shown,
            scores=scores,
            ranked=ranked,
            more=more,
            given=given,
            problem=problem,
            scene_names=sorted({r.scene_name for r in records if r.scene_name}),
        )

    @router.get("/users/{user}/atoms/{atom_id}")
    async def atom_page(user: PathId, atom_id: PathId, tenant: Tenant) -> HTMLResponse:
        """Atom → its record (even superseded) → the L0 messages it came from, and every version of it."""
        found = await asyncio.to_thread((await deps.recaller()).drill_down, tenant, user, atom_id)
        if found.record is None and not found.messages:
            return missing(tenant, f"atom {atom_id} of user {user}")
        versions = history(await asyncio.to_thread(RecordLog(files, tenant, user).read, False), atom_id)
        return render(
            "atom.html",
            tenant=tenant,
            user=user,
            name=await asyncio.to_thread(names.of, tenant, user),
            atom_id=atom_id,
            record=found.record,
            messages=found.messages,
            versions=versions,
        )

    @router.get("/sessions/{session}")
    async def session_page(session: PathId, tenant: Tenant) -> HTMLResponse:
        """Canvases as Mermaid text (drawn in the browser) with their nodes, and the offload entries."""
        if not files.exists(Layout.session_dir(tenant, session)):
            return missing(tenant, f"session {session}")
        canvases = []
        for name in canvas_names(files, tenant, session):
            text = _text(files.read_bytes(canvas_path(tenant, session, name))) or ""
            try:
                drawn = from_mermaid(text)
                nodes, goal, drawn_by = list(drawn.nodes), drawn.task_goal, drawn.drawn_by
            except (ValueError, MnemoflowError):  # drawn anyway; its nodes are still reachable from the entries
                nodes, goal, drawn_by = [], "", ()
            canvases.append((name, text, nodes, goal, drawn_by))
        entries = await asyncio.to_thread(annotated_entries, files, tenant, session)
        return render(
            "session.html",
            tenant=tenant,
            session=session,
            canvases=canvases,
            entries=entries,
            mermaid=MERMAID_JS.exists(),
        )

    @router.get("/sessions/{session}/nodes/{node_id}")
    async def node_page(session: PathId, node_id: PathId, tenant: Tenant) -> HTMLResponse:
        """Canvas node → its offload entries → their raw outputs."""
        found = await asyncio.to_thread(drill_down, files, tenant, session, node_id)
        if not found:
            return missing(tenant, f"entries of node {node_id} in session {session}")
        shown = [(entry, _text(raw)) for entry, raw in found]
        return render("node.html", tenant=tenant, session=session, node_id=node_id, found=shown, preview=PREVIEW_CHARS)

    @router.get("/sessions/{session}/refs/{tool_call_id}")
    async def ref_page(session: PathId, tool_call_id: PathId, tenant: Tenant) -> HTMLResponse:
        raw = await asyncio.to_thread(read_ref, files, tenant, session, tool_call_id)
        if raw is None:
            return missing(tenant, f"raw output of {tool_call_id} in session {session}")
        return render(
            "ref.html", tenant=tenant, session=session, tool_call_id=tool_call_id, raw=_text(raw), size=len(raw)
        )

    def skill_set(tenant: str, scope: str) -> SkillStore | None:
        """The skill set ``scope`` names; None for a scope that is not a skill set's (the page is missing). The
        dashboard's key is a tenant admin key (a key bound to an agent cannot log in: :class:`UiGate`), which sees
        every scope, as :meth:`~mnemoflow.scopes.Caller.sees` says."""
        try:
            return SkillStore.of_scope(files, tenant, scope)
        except ValueError:
            return None

    async def stored_skill(tenant: str, scope: str, name: str) -> tuple[SkillStore, Skill] | None:
        """The skill ``name`` of ``scope`` and its set; None when there is no such skill (or scope)."""
        skills = skill_set(tenant, scope)
        try:
            return (skills, await asyncio.to_thread(skills.get, name)) if skills else None
        except NotFound:
            return None

    def skill_view(
        tenant: str, skills: SkillStore, skill: Skill, text: str | None = None, error: str | None = None
    ) -> HTMLResponse:
        """The skill page; a refused edit shows the text as posted, with the reason (422)."""
        return render(
            "skill.html",
            422 if error else 200,
            tenant=tenant,
            scope=skills.scope,
            skill=skill,
            history=skills.history(skill.name),
            text=render_skill(skill) if text is None else text,
            error=error,
        )

    @router.get("/skills")
    async def skills_page(tenant: Tenant) -> HTMLResponse:
        """The shared skills, then each agent's own (every agent with a skills folder on disk)."""
        stores = await asyncio.to_thread(skill_stores, files, tenant)
        sets = [(s.scope, await asyncio.to_thread(s.all)) for s in stores]
        return render("skills.html", tenant=tenant, sets=sets)

    @router.get("/skills/{name}")
    async def skill_page(name: str, tenant: Tenant, scope: str = SHARED) -> HTMLResponse:
        """A skill: its META fields, when to use it, its steps and pitfalls (each drills down to its canvas node),
        its history, and the forms to edit or delete it."""
        if (found := await stored_skill(tenant, scope, name)) is None:
            return missing(tenant, f"{scope} skill {name}")
        return skill_view(tenant, *found)

    @router.post("/skills/{name}/edit", response_model=None)
    async def edit_skill(
        name: str, request: Request, tenant: Tenant, scope: str = SHARED
    ) -> HTMLResponse | RedirectResponse:
        """Replace the skill with the posted Markdown, as ``PUT /v1/skills/{name}`` does (version up, the old one
        kept in its history); a file that does not parse comes back in the form with the reason."""
        text = (await _form(request)).get("text", "")
        if (found := await stored_skill(tenant, scope, name)) is None:
            return missing(tenant, f"{scope} skill {name}")
        skills, current = found
        try:
            if len(text.encode()) > MAX_SKILL_BYTES:
                raise ValueError(f"a skill file is at most {MAX_SKILL_BYTES} bytes")
            edited = parse_edit(text, name)
        except ValueError as exc:
            return skill_view(tenant, skills, current, text, str(exc))
        async with deps.skills.lock(tenant, skills.scope):
            try:
                await asyncio.to_thread(skills.edit, edited, datetime.now(UTC))
            except NotFound:  # deleted since it was read
                return missing(tenant, f"{scope} skill {name}")
        return RedirectResponse(f"/ui/skills/{quote(name)}?scope={quote(skills.scope)}", status_code=303)

    @router.post("/skills/{name}/delete", response_model=None)
    async def delete_skill(name: str, tenant: Tenant, scope: str = SHARED) -> HTMLResponse | RedirectResponse:
        """Delete the skill and its history, as ``DELETE /v1/skills/{name}`` does, then back to the list."""
        skills = skill_set(tenant, scope)
        if skills is not None:
            async with deps.skills.lock(tenant, skills.scope):
                if await asyncio.to_thread(skills.delete, name):
                    return RedirectResponse("/ui/skills", status_code=303)
        return missing(tenant, f"{scope} skill {name}")

    @router.get("/health")
    async def health_page(tenant: Tenant) -> HTMLResponse:
        """``/health``'s checks, and this tenant's figures: users, sessions, live atoms in the index."""
        report = await run_checks(checks, timeout=deps.settings.health_timeout_seconds)
        users = await asyncio.to_thread(files.list_dir, f"{tenant}/users")
        sessions = await asyncio.to_thread(files.list_dir, f"{tenant}/sessions")
        try:
            store = (await deps.recaller()).store
            atoms: int | None = await asyncio.to_thread(store.count, tenant)
        except MnemoflowError:
            atoms = None
        return render(
            "health.html", tenant=tenant, report=report, users=len(users), sessions=len(sessions), atoms=atoms
        )

    return router


def install_ui(app: FastAPI, deps: ApiDeps, gate: TenantGate, checks: Mapping[str, Check]) -> None:
    """Mount the dashboard's static files (its CSS and script, Mermaid's bundle) and its pages on ``app``."""
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="ui-static")
    app.include_router(ui_router(deps, UiGate(gate), checks))
