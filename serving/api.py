"""The HTTP API under ``/v1``: submit events, read the layers back, health and metrics.

``create_api`` builds a plain FastAPI app from settings and injected collaborators, so it runs the same under
Ray Serve (see :mod:`serving.app`) and under a test client with fakes.
"""


import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.errors import InvalidInput, MnemoflowError, ServiceUnavailable
from mnemoflow.events import ToolResultEvent, ToolResultIn, TurnEvent, TurnIn
from mnemoflow.ids import SafeId
from mnemoflow.memory.l0 import L0Message, read_l0
from mnemoflow.offload.entries import OffloadEntry, read_entries, read_ref
from mnemoflow.sharding import shard_for
from mnemoflow.storage import LocalFileStore
from serving.bus import EventBus
from serving.metrics import ApiMetrics
from serving.security import BodyLimit, KeyRing

log = logging.getLogger(__name__)

StateReader = Callable[[str, str], Awaitable[dict[str, Any]]]


class TurnBatch(BaseModel):
    turns: list[TurnIn] = Field(min_length=1, max_length=1000)


class ToolResultBatch(BaseModel):
    results: list[ToolResultIn] = Field(min_length=1, max_length=500)


class Accepted(BaseModel):
    accepted: int


PathId = Annotated[SafeId, Path(description="an id: letters, digits, _ - . : @; no path characters")]


def create_api(settings: Settings, bus: EventBus, session_state: StateReader | None = None) -> FastAPI:
    app = FastAPI(title="mnemoflow", version="0.1.0", description="Memory service for fleets of LLM agents.")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    keys = KeyRing(settings.api_keys)
    files = LocalFileStore(settings.data_dir)
    metrics = ApiMetrics()
    Tenant = Annotated[str, Depends(keys)]

    @app.middleware("http")
    async def _observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        metrics.requests.labels(route, str(response.status_code)).inc()
        metrics.latency.labels(route).observe(time.perf_counter() - start)
        return response

    @app.exception_handler(MnemoflowError)
    async def _mnemoflow_error(request: Request, exc: MnemoflowError) -> JSONResponse:
        status = 400 if isinstance(exc, InvalidInput) else 503 if isinstance(exc, ServiceUnavailable) else 500
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); see the server log"}, 500)

    @app.post("/v1/turns", status_code=202, response_model=Accepted)
    async def submit_turns(batch: TurnBatch, tenant: Tenant) -> Accepted:
        """Append conversation messages; answers once Kafka acknowledged every one."""
        now = datetime.now(UTC)
        events = [TurnEvent.from_input(tenant, t, now) for t in batch.turns]
        await bus.publish(TOPIC_TURNS, [(e.key, e.model_dump_json().encode(), None) for e in events])
        metrics.events.labels("turn").inc(len(events))
        return Accepted(accepted=len(events))

    @app.post("/v1/tool-results", status_code=202, response_model=Accepted)
    async def submit_tool_results(batch: ToolResultBatch, tenant: Tenant) -> Accepted:
        """Offload tool outputs; each session's results go to the partition of its shard."""
        now = datetime.now(UTC)
        events = [ToolResultEvent.from_input(tenant, r, now) for r in batch.results]
        n = settings.shard_partitions
        records = [(e.key, e.model_dump_json().encode(), shard_for(e.key, n)) for e in events]
        await bus.publish(TOPIC_TOOL_RESULTS, records)
        metrics.events.labels("tool_result").inc(len(events))
        return Accepted(accepted=len(events))

    @app.get("/v1/users/{user}/conversations", response_model=list[L0Message])
    async def conversations(
        user: PathId,
        tenant: Tenant,
        day: date | None = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> list[L0Message]:
        """A user's L0 messages in stored order (all days, or one)."""
        return read_l0(files, tenant, user, day=day, limit=limit, offset=offset)

    @app.get("/v1/sessions/{session}/offload", response_model=list[OffloadEntry])
    async def offload_entries(
        session: PathId, tenant: Tenant, after_seq: Annotated[int, Query(ge=-1)] = -1
    ) -> list[OffloadEntry]:
        """A session's offload entries with ``seq > after_seq``."""
        return read_entries(files, tenant, session, after_seq=after_seq)

    @app.get("/v1/sessions/{session}/refs/{tool_call_id}")
    async def raw_ref(session: PathId, tool_call_id: PathId, tenant: Tenant) -> Response:
        """The raw tool output, byte-exact."""
        data = read_ref(files, tenant, session, tool_call_id)
        if data is None:
            raise HTTPException(404, f"no ref for tool call {tool_call_id} in session {session}")
        return Response(data, media_type="text/markdown; charset=utf-8")

    @app.get("/v1/sessions/{session}/state")
    async def state(session: PathId, tenant: Tenant) -> dict[str, Any]:
        """The session actor's state (count and last offload entry)."""
        if session_state is None:
            raise HTTPException(503, "session actors are not connected to this API")
        return await session_state(tenant, session)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
    return app
