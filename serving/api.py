"""The HTTP API under ``/v1``: submit events, short-term and long-term memory routes, health and metrics.

``create_api`` builds a plain FastAPI app from settings and injected collaborators, so it runs the same under
Ray Serve (see :mod:`serving.app`) and under a test client with fakes. Authenticated routes resolve the tenant
from the key, then apply the tenant's rate limit. ``/health/live`` says the process serves (Kubernetes liveness);
``/health`` is readiness: every dependency check passes (200) or the report names what fails (503).
"""

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, Field

from mnemoflow.client.models import Accepted, WhoAmI
from mnemoflow.config import Settings
from mnemoflow.errors import Conflict, InvalidInput, MnemoflowError, NotFound, ServiceUnavailable
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.health import Check, run_checks
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ratelimit import RateLimiter
from mnemoflow.scopes import Caller
from mnemoflow.storage import LocalFileStore
from mnemoflow.tracing import TRACE_HEADERS, Tracing, extract_headers, inject_headers
from serving.bus import EventBus, Headers
from serving.deps import ApiDeps, Compactor, StateReader
from serving.metrics import RequestMetrics
from serving.metrics_governance import GovernanceCollector
from serving.publish import publish_tool_results, publish_turns
from serving.routes_governance import governance_router
from serving.routes_memory import memory_router
from serving.routes_offload import offload_router
from serving.routes_proxy import proxy_router
from serving.routes_skills import skills_router
from serving.security import BodyLimit, KeyRing, TenantGate, acting
from serving.ui import install_ui

log = logging.getLogger(__name__)

ERROR_STATUS: tuple[tuple[type[MnemoflowError], int], ...] = (
    (InvalidInput, 400),
    (NotFound, 404),
    (Conflict, 409),
    (ServiceUnavailable, 503),
)
"""The answer to a core error that reaches the app; any other is a 500 (a bug or a storage failure, logged)."""


class TurnBatch(BaseModel):
    turns: list[TurnIn] = Field(min_length=1, max_length=1000)


class ToolResultBatch(BaseModel):
    results: list[ToolResultIn] = Field(min_length=1, max_length=500)


HealthChecks = Callable[[ApiDeps], Mapping[str, Check]]
"""Builds the readiness checks from the API's own collaborators (the atom index check reads through them)."""


def create_api(
    settings: Settings,
    bus: EventBus,
    session_state: StateReader | None = None,
    compact: Compactor | None = None,
    recaller_factory: Callable[[], Recaller] | None = None,
    health_checks: HealthChecks | None = None,
    timer: Callable[[], float] = time.monotonic,
    tracing: Tracing | None = None,
) -> FastAPI:
    """``health_checks`` None: ``/health`` has nothing to check and says ok. ``timer`` drives the rate limits.
    ``tracing`` None: no spans (the default); else a submission's span continues a ``traceparent`` the caller
    sent, and its records carry the span's context to the worker."""
    app = FastAPI(title="mnemoflow", version="0.1.0", description="Memory service for fleets of LLM agents.")
    app.add_middleware(
        BodyLimit, max_bytes=settings.max_body_bytes, suffix_limits={"/import": settings.max_import_bytes}
    )
    gate = TenantGate(KeyRing(settings.api_keys, settings.agent_keys), RateLimiter(settings.rate_limit_for, timer))
    deps = ApiDeps(settings, bus, LocalFileStore(settings.data_dir), session_state, compact, recaller_factory)
    checks = dict(health_checks(deps)) if health_checks is not None else {}
    metrics = deps.metrics
    metrics.registry.register(GovernanceCollector(deps.files))
    Holder = Annotated[Caller, Depends(gate.caller)]
    app.add_middleware(RequestMetrics, metrics=metrics)

    @app.exception_handler(MnemoflowError)
    async def _mnemoflow_error(request: Request, exc: MnemoflowError) -> JSONResponse:
        status = next((code for kind, code in ERROR_STATUS if isinstance(exc, kind)), 500)
        if status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); see the server log"}, 500)

    @contextlib.contextmanager
    def traced(request: Request, tenant: str, events: int) -> Iterator[Headers | None]:
        """The submission's span (tracing on), and the headers that carry it on the records; else None."""
        if tracing is None:
            yield None
            return
        route = request.scope["route"].path
        attributes = {
            "http.request.method": request.method,
            "http.route": route,
            "mnemoflow.tenant": tenant,
            "mnemoflow.events": events,
        }
        parent = extract_headers({k: v.encode() for k, v in request.headers.items() if k in TRACE_HEADERS})
        with tracing.span(f"{request.method} {route}", parent, attributes, SpanKind.SERVER):
            yield inject_headers()

    @app.post("/v1/turns", status_code=202, response_model=Accepted)
    async def submit_turns(batch: TurnBatch, caller: Holder, request: Request) -> Accepted:
        """Append conversation messages; answers once Kafka acknowledged every one. A key bound to an agent or a
        team submits as that agent or team (404 for a turn naming another)."""
        turns = acting(caller, batch.turns)
        with traced(request, caller.tenant, len(turns)) as headers:
            n = await publish_turns(bus, caller.tenant, turns, datetime.now(UTC), headers)
        metrics.events.labels("turn").inc(n)
        return Accepted(accepted=n)

    @app.post("/v1/tool-results", status_code=202, response_model=Accepted)
    async def submit_tool_results(batch: ToolResultBatch, caller: Holder, request: Request) -> Accepted:
        """Offload tool outputs; each session's results go to the partition of its shard. A bound key submits as
        its agent or team, like turns."""
        results = acting(caller, batch.results)
        with traced(request, caller.tenant, len(results)) as headers:
            partitions, now = settings.shard_partitions, datetime.now(UTC)
            n = await publish_tool_results(bus, partitions, caller.tenant, results, now, headers)
        metrics.events.labels("tool_result").inc(n)
        return Accepted(accepted=n)

    @app.get("/v1/whoami", response_model=WhoAmI)
    async def whoami(caller: Holder) -> WhoAmI:
        """The key's tenant, and the agent or team it is bound to: lets a front door (the MCP server, an SDK user)
        check a key without writing."""
        return WhoAmI(tenant=caller.tenant, agent=caller.agent, team=caller.team)

    app.include_router(offload_router(deps, gate))
    app.include_router(memory_router(deps, gate))
    app.include_router(skills_router(deps, gate))
    app.include_router(governance_router(deps, gate))
    app.include_router(proxy_router(deps, gate))
    install_ui(app, deps, gate, checks)

    @app.get("/health/live")
    async def live() -> dict[str, str]:
        """Liveness: this process serves requests. Depends on nothing else, so a broker outage never restarts it."""
        return {"status": "ok"}

    @app.get("/health")
    async def health() -> JSONResponse:
        """Readiness: every dependency, checked at once under one deadline; 503 names the failing ones."""
        report = await run_checks(checks, timeout=settings.health_timeout_seconds)
        return JSONResponse(report.payload(), status_code=200 if report.ok else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    return app
