"""The HTTP API under ``/v1``: submit events, short-term and long-term memory routes, health and metrics.

``create_api`` builds a plain FastAPI app from settings and injected collaborators, so it runs the same under
Ray Serve (see :mod:`serving.app`) and under a test client with fakes. Authenticated routes resolve the tenant
from the key, then apply the tenant's rate limit. ``/health/live`` says the process serves (Kubernetes liveness);
``/health`` is readiness: every dependency check passes (200) or the report names what fails (503).
"""

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from mnemoflow.client.models import Accepted, WhoAmI
from mnemoflow.config import Settings
from mnemoflow.errors import InvalidInput, MnemoflowError, ServiceUnavailable
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.health import Check, run_checks
from mnemoflow.memory.recall import Recaller
from mnemoflow.ratelimit import RateLimiter
from mnemoflow.storage import LocalFileStore
from serving.bus import EventBus
from serving.deps import ApiDeps, Compactor, StateReader
from serving.metrics import ApiMetrics
from serving.metrics_governance import GovernanceCollector
from serving.publish import publish_tool_results, publish_turns
from serving.routes_governance import governance_router
from serving.routes_memory import memory_router
from serving.routes_offload import offload_router
from serving.routes_proxy import proxy_router
from serving.security import BodyLimit, KeyRing, TenantGate
from serving.ui import install_ui

log = logging.getLogger(__name__)


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
) -> FastAPI:
    """``health_checks`` None: ``/health`` has nothing to check and says ok. ``timer`` drives the rate limits."""
    app = FastAPI(title="mnemoflow", version="0.1.0", description="Memory service for fleets of LLM agents.")
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       suffix_limits={"/import": settings.max_import_bytes})
    gate = TenantGate(KeyRing(settings.api_keys), RateLimiter(settings.rate_limit_for, timer))
    deps = ApiDeps(settings, bus, LocalFileStore(settings.data_dir), session_state, compact, recaller_factory)
    checks = dict(health_checks(deps)) if health_checks is not None else {}
    metrics = ApiMetrics()
    metrics.registry.register(GovernanceCollector(deps.files))
    Tenant = Annotated[str, Depends(gate)]

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
        n = await publish_turns(bus, tenant, batch.turns, datetime.now(UTC))
        metrics.events.labels("turn").inc(n)
        return Accepted(accepted=n)

    @app.post("/v1/tool-results", status_code=202, response_model=Accepted)
    async def submit_tool_results(batch: ToolResultBatch, tenant: Tenant) -> Accepted:
        """Offload tool outputs; each session's results go to the partition of its shard."""
        n = await publish_tool_results(bus, settings.shard_partitions, tenant, batch.results, datetime.now(UTC))
        metrics.events.labels("tool_result").inc(n)
        return Accepted(accepted=n)

    @app.get("/v1/whoami", response_model=WhoAmI)
    async def whoami(tenant: Tenant) -> WhoAmI:
        """The key's tenant: lets a front door (the MCP server, an SDK user) check a key without writing."""
        return WhoAmI(tenant=tenant)

    app.include_router(offload_router(deps, gate))
    app.include_router(memory_router(deps, gate))
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
