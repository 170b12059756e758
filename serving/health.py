"""The checks behind ``/health`` in a running stack: the broker and the Faust workers (:mod:`serving.health_kafka`),
the named Ray actors, the atom index the API reads for recall, the extractor, and the model when one is configured.

Each check is a coroutine function that returns a short detail or raises; :func:`mnemoflow.health.run_checks`
runs them at once under one deadline and cancels what is late. Blocking calls (a Ray name lookup, the index
query) run on small executors of their own: a hung dependency holds at most those threads, never the ones recall
and search use, and work still queued when the deadline passes is dropped with its cancelled future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from functools import partial
from typing import Any

from actors.routing import ActorRouter
from mnemoflow.config import Settings
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.health import Check
from serving.deps import ApiDeps
from serving.health_kafka import KafkaProbe

PROBE_SCOPE = ("health", "probe")
"""The (tenant, user) the index probe counts: a query on the index's scope key, cheap at any size."""


async def actors_alive(router: ActorRouter, n: int, lookup: Executor) -> str:
    """Each of the ``n`` named actors answers ``stats()`` (a restarting actor answers once it is back). Session
    shards with a model also say how their background pass is doing (:func:`refine_detail`)."""
    loop = asyncio.get_running_loop()
    answers: list[dict[str, Any]] = []

    async def ping(index: int) -> str | None:
        try:
            handle = await loop.run_in_executor(lookup, router.handle, index)
            answers.append(await handle.stats.remote())
        except Exception as exc:  # noqa: BLE001 - any failure of one actor is reported, the others still count
            router.forget(index)
            return f"#{index} {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        return None

    failures = [f for f in await asyncio.gather(*(ping(i) for i in range(n))) if f is not None]
    if failures:
        raise ServiceUnavailable(f"{n - len(failures)}/{n} alive; " + "; ".join(failures))
    return f"{n}/{n} alive" + refine_detail(answers)


def refine_detail(stats: list[dict[str, Any]]) -> str:
    """The offload model's background pass over all shards: items by outcome, sessions queued and dropped; empty
    when no shard runs a model. A growing ``late``/``skipped``/``dropped`` says the model falls behind."""
    shards = [s for s in stats if isinstance(s, dict) and "refine" in s]
    if not shards:
        return ""
    outcomes: dict[str, int] = {}
    for s in shards:
        for key, n in s["refine"].items():
            outcome = key.rsplit("/", 1)[-1]
            outcomes[outcome] = outcomes.get(outcome, 0) + n
    items = ", ".join(f"{n} {o}" for o, n in sorted(outcomes.items())) or "nothing yet"
    queued, dropped = sum(s["refine_queued"] for s in shards), sum(s["refine_dropped"] for s in shards)
    return f"; offload model: {items}, {queued} sessions queued, {dropped} dropped"


async def atom_index(deps: ApiDeps, query: Executor) -> str:
    """The index the API opened for recall answers a count (opening it first, on the first probe)."""
    store = (await deps.recaller()).store
    await asyncio.get_running_loop().run_in_executor(query, store.count, *PROBE_SCOPE)
    return f"readable ({store.embedding_model}, dim {store.dim})"


BUSY_AFTER_SECONDS = 1.0
"""How long the extractor's own answer is awaited before its liveness is read from the Serve controller instead."""


class ServeAppProbe:
    """A Serve application answers ``check()`` through its handle (the ``llm`` replica also pings its upstream).

    With ``busy_after``, a replica that has not answered by then is asked about at the Serve controller: a
    deployment Serve reports HEALTHY (its replicas answer Serve's own health checks) is busy, not failing. Why: the
    extractor runs at a lower priority on purpose (``extractor_nice``), so on a machine whose cores are taken it can
    answer later than the whole report's deadline while it is only extracting; the controller is not niced.
    """

    def __init__(
        self,
        lookup: Executor,
        app_name: str,
        busy_after: float | None = None,
        app_state: Callable[[str], tuple[str, str]] | None = None,
    ) -> None:
        self._lookup, self._app_name, self._busy_after = lookup, app_name, busy_after
        self._app_state = app_state or serve_app_state
        self._handle: Any = None

    async def __call__(self) -> str:
        loop = asyncio.get_running_loop()
        if self._handle is None:
            from ray import serve

            self._handle = await loop.run_in_executor(self._lookup, serve.get_app_handle, self._app_name)
        answer = asyncio.ensure_future(self._handle.check.remote())
        done, _ = await asyncio.wait({answer}, timeout=self._busy_after)
        if done:
            return str(answer.result())
        answer.cancel()
        state = await loop.run_in_executor(self._lookup, self._app_state, self._app_name)
        if state != ("RUNNING", "HEALTHY"):
            raise ServiceUnavailable(f"no answer within {self._busy_after:g}s; Serve reports {'/'.join(state)}")
        return f"busy: no answer within {self._busy_after:g}s, Serve reports it RUNNING/HEALTHY"


def serve_app_state(app_name: str) -> tuple[str, str]:
    """The application's status and its deployment's (named as the application) at the Serve controller."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return ("NOT_DEPLOYED", "")
    deployment = app.deployments.get(app_name)
    return (_named(app.status), _named(deployment.status) if deployment is not None else "NO_DEPLOYMENT")


def _named(status: Any) -> str:
    """A Serve status enum's value (``str()`` of one gives ``ApplicationStatus.RUNNING``)."""
    return str(getattr(status, "value", status))


def runtime_checks(settings: Settings, bootstrap: str, shards: ActorRouter) -> Callable[[ApiDeps], dict[str, Check]]:
    """The checks of one API replica, for :func:`serving.api.create_api` (built once: they hold clients)."""
    from actors import CuratorClient

    def build(deps: ApiDeps) -> dict[str, Check]:
        ray_lookup = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemoflow-health-ray")
        index_query = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemoflow-health-index")
        kafka = KafkaProbe(bootstrap)
        curators = CuratorClient(settings.curator_shards, settings.ray_namespace)
        checks: dict[str, Check] = {
            "broker": kafka.broker,
            "worker": kafka.worker,
            "session_shards": partial(actors_alive, shards, settings.session_shards, ray_lookup),
            "curators": partial(actors_alive, curators, settings.curator_shards, ray_lookup),
            "atom_index": partial(atom_index, deps, index_query),
            "extractor": ServeAppProbe(ray_lookup, "extractor", busy_after=BUSY_AFTER_SECONDS),
        }
        if settings.llm_engine != "heuristic":
            checks["llm"] = ServeAppProbe(ray_lookup, "llm")
        return checks

    return build
