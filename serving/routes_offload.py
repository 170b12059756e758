"""Short-term memory routes: compaction, drill-down from a canvas node to raw tool output, canvases, entries."""

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Response
from pydantic import BaseModel, Field

from mnemoflow.client.models import DrilledEntry
from mnemoflow.offload.annotations import annotated_entries, drill_down
from mnemoflow.offload.canvas_update import canvas_names, canvas_path
from mnemoflow.offload.compact import check_window
from mnemoflow.offload.entries import OffloadEntry, read_ref
from mnemoflow.offload.messages import validate
from mnemoflow.offload.owner import may_use, owner_of
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.scopes import Caller
from serving.deps import ApiDeps, PathId


class CompactRequest(BaseModel):
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=20_000)
    window: int = Field(gt=0, le=10_000_000, description="The model's context window, in tokens.")


def offload_router(deps: ApiDeps, tenant_dep: Any) -> APIRouter:
    router = APIRouter(prefix="/v1/sessions/{session}", tags=["short-term memory"])

    def holder(session: PathId, caller: Annotated[Caller, Depends(tenant_dep.caller)]) -> str:
        """The key's tenant, when the key may use this session (docs/concepts/scopes.md): 404 for a key bound to
        another agent or team than the session's owner, as for another tenant's session."""
        if not may_use(caller, owner_of(deps.files, caller.tenant, session)):
            raise HTTPException(404, f"no session {session} for this key")
        return caller.tenant

    Tenant = Annotated[str, Depends(holder)]

    @router.post("/compact", response_model=CompactReply)
    async def compact(session: PathId, body: CompactRequest, tenant: Tenant) -> CompactReply:
        """Messages and window in; messages out with the canvas injected and reclaim applied, plus what was
        removed and where its raw output lives. A malformed array is refused (4xx) before anything is written."""
        check_window(validate(body.messages), body.window)
        if deps.compact is None:
            raise HTTPException(503, "session actors are not connected to this API")
        return await deps.compact(tenant, session, body.messages, body.window)

    @router.get("/offload", response_model=list[OffloadEntry])
    async def entries(
        session: PathId, tenant: Tenant, after_seq: Annotated[int, Query(ge=-1)] = -1
    ) -> list[OffloadEntry]:
        """A session's offload entries with ``seq > after_seq``, with summaries and node ids once known."""
        return annotated_entries(deps.files, tenant, session, after_seq)

    @router.get("/refs/{tool_call_id}")
    async def raw_ref(session: PathId, tool_call_id: PathId, tenant: Tenant) -> Response:
        """The raw tool output, byte-exact."""
        data = read_ref(deps.files, tenant, session, tool_call_id)
        if data is None:
            raise HTTPException(404, f"no ref for tool call {tool_call_id} in session {session}")
        return Response(data, media_type="text/markdown; charset=utf-8")

    @router.get("/nodes/{node_id}", response_model=list[DrilledEntry])
    async def node(session: PathId, node_id: PathId, tenant: Tenant) -> list[DrilledEntry]:
        """Drill-down: a canvas node → its offload entries → their raw outputs."""
        found = drill_down(deps.files, tenant, session, node_id)
        if not found:
            raise HTTPException(404, f"no entries for node {node_id} in session {session}")
        out = []
        for entry, raw in found:
            text: str | None
            b64: str | None
            try:
                text, b64 = (raw.decode("utf-8"), None) if raw is not None else (None, None)
            except UnicodeDecodeError:
                text, b64 = None, base64.b64encode(raw or b"").decode()
            url = f"/v1/sessions/{session}/refs/{entry.tool_call_id}"
            out.append(DrilledEntry(entry=entry, raw=text, raw_b64=b64, ref_url=url))
        return out

    @router.get("/canvases")
    async def canvases(session: PathId, tenant: Tenant) -> list[str]:
        """The session's canvases, oldest first (``NNN-<label>.mmd``)."""
        return canvas_names(deps.files, tenant, session)

    @router.get("/canvases/{name}")
    async def canvas(session: PathId, name: PathId, tenant: Tenant) -> Response:
        """One canvas as Mermaid text."""
        data = deps.files.read_bytes(canvas_path(tenant, session, name))
        if data is None:
            raise HTTPException(404, f"no canvas {name} in session {session}")
        return Response(data, media_type="text/plain; charset=utf-8")

    @router.get("/state", response_model=SessionState)
    async def state(session: PathId, tenant: Tenant) -> SessionState:
        """The session actor's state (count, last entry, boundaries, active canvas, reclaim decisions)."""
        if deps.session_state is None:
            raise HTTPException(503, "session actors are not connected to this API")
        return await deps.session_state(tenant, session)

    return router
