"""The ``extractor`` Serve deployment: L1 passes for many users, batched, with dedup against the atom index.

``@serve.batch`` gathers concurrent run requests (one per user, from the stream workers' job agents) and runs
their pipelines concurrently, so model calls from different users overlap at the engine (vLLM batches them
continuously). A user is never run twice at once: requests for the same user share one run.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind
from ray import serve

from actors.metrics import ExtractorMetrics, TimedIndex
from mnemoflow.config import Settings
from mnemoflow.governance.applier import OperationApplier, OperationReply
from mnemoflow.governance.operations import OperationEvent
from mnemoflow.index.factory import index_path, open_index
from mnemoflow.index.sqlite_scrub import scrub_sqlite_index
from mnemoflow.memory.engines import l1_engines
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1RunReply, L1RunResult
from mnemoflow.ports import SystemClock
from mnemoflow.storage import Layout, LocalFileStore
from mnemoflow.tracing import Tracing, from_traceparent, setup_tracing
from serving.llm import llm_factory
from serving.loopback import keep_replica_on_loopback

T = TypeVar("T")


def lower_priority(increment: int) -> None:
    """Raise this process's niceness by ``increment`` (at most 19): every thread's, because Linux keeps a niceness
    per thread and a Serve replica runs its constructor on a thread of its own; threads started later inherit
    their creator's."""
    tasks = Path("/proc/self/task")
    for tid in [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]:
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + increment))


class PassLoop:
    """An event loop on a thread of its own for the work of the model-free engines.

    Why: a pass of the heuristic engines is CPU work from its first line to its last (extraction, embedding,
    dedup, index writes, with no model to await), so on the replica's own loop it held every other request until
    it ended: on a busy machine ``/health`` reported the extractor failing ("no answer within 1.5s") while it was
    only extracting, and new batches waited for the whole backlog. Here the replica's loop stays free (it gets the
    interpreter every few milliseconds), and everything that touches the pipeline and the index runs on this one
    loop, so passes and operations still interleave only where they await, as they did on the replica's loop (the
    SQLite index is one connection: two threads must not interleave its transactions)."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="l1-passes", daemon=True).start()

    def run(self, work: Callable[[], Awaitable[T]]) -> Awaitable[T]:
        """Run ``work()`` on this loop; awaitable from the caller's loop (cancelling it cancels the work)."""

        async def call() -> T:
            return await work()

        return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), self._loop))


class ExtractorServer:
    def __init__(self, settings: Settings, max_batch_size: int = 16) -> None:
        keep_replica_on_loopback()
        lower_priority(settings.extractor_nice)  # this replica is its own process: background work
        self.run.set_max_batch_size(max_batch_size)  # 1 turns batching off (the benchmark compares both)
        embedder, index = open_index(settings)
        self.store = TimedIndex(index)
        make_llm = llm_factory(settings) if "l1" in settings.model_stages else None
        self._llm = make_llm() if make_llm else None
        extractor, judge = l1_engines(self._llm)
        # Model engines await the model (the llm deployment's handle belongs to this loop): they stay here.
        self._work: Callable[[Callable[[], Awaitable[T]]], Awaitable[T]] = PassLoop().run if make_llm is None else _here
        self._pipeline = L1Pipeline(
            files=LocalFileStore(settings.data_dir, fsync=settings.fsync_files),
            store=self.store,
            embedder=embedder,
            extractor=extractor,
            judge=judge,
            clock=SystemClock(),
        )
        self._running: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self._batch_sizes: deque[int] = deque(maxlen=1000)
        self._locks: dict[tuple[str, str], tuple[asyncio.Lock, list[int]]] = {}
        self._operations = _operation_applier(settings, self._pipeline, embedder, self.store)
        self._metrics = ExtractorMetrics()
        self._tracing = setup_tracing(settings, "extractor")
        self._data_dir = settings.data_dir

    @contextlib.asynccontextmanager
    async def _user(self, key: tuple[str, str]) -> AsyncIterator[None]:
        """One user's L1 passes and operations never overlap in this replica (an erase must not race a pass's
        writes)."""
        entry = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        entry[1][0] += 1  # holders and waiters: the lock is dropped when the last one leaves
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if not entry[1][0]:
                del self._locks[key]

    async def _locked_run(self, tenant: str, user: str, parent: str | None = None) -> tuple[L1RunResult, float]:
        """The pass's result and its own time, ms (the locks' waits not in it)."""
        lock = self._data_dir / Layout.user_dir(tenant, user) / "state" / "l1.lock"
        async with self._user((tenant, user)), across_replicas(lock):  # and one pass per user across replicas
            run = functools.partial(self._pipeline.run, tenant, user)

            async def counted() -> tuple[L1RunResult, int]:
                result = await (run() if self._tracing is None else traced_pass(self._tracing, parent, tenant, run))
                return result, self.store.count(tenant)

            started = time.perf_counter()
            try:
                result, rows = await self._work(counted)
            except Exception:
                self._metrics.ran(None, self._pipeline.deduper.stats)
                raise
            self._metrics.ran(result, self._pipeline.deduper.stats)
            self._metrics.rows(tenant, rows)
            return result, (time.perf_counter() - started) * 1000

    async def apply_operation(self, event: OperationEvent) -> OperationReply:
        """Apply one memory operation (the commands topic's worker calls it in partition order)."""
        scope = event.key.split("/", 1)[1]
        async with self._user((event.tenant, scope)):

            async def counted() -> tuple[OperationReply, int]:
                return await self._operations.apply(event), self.store.count(event.tenant)

            reply, rows = await self._work(counted)
            self._metrics.rows(event.tenant, rows)
            return reply

    async def _run_user(self, tenant: str, user: str, parent: str | None = None) -> L1RunReply:
        """``parent``: the traceparent of the worker's span (tracing on); a request that joins a run in flight
        joins its span too."""
        key, started = (tenant, user), time.perf_counter()
        task = self._running.get(key)
        if task is None:
            task = asyncio.ensure_future(self._locked_run(tenant, user, parent))
            self._running[key] = task
            self._metrics.running(len(self._running))
            task.add_done_callback(lambda _: self._finished(key))
        try:
            result, pass_ms = await asyncio.shield(task)
            replica_ms = (time.perf_counter() - started) * 1000
            return L1RunReply(ok=True, result=result, replica_ms=replica_ms, pass_ms=pass_ms)
        except Exception as exc:  # reported to the job handler, which retries with backoff or parks it
            return L1RunReply.failed(exc)

    def _finished(self, key: tuple[str, str]) -> None:
        self._running.pop(key, None)
        self._metrics.running(len(self._running))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.01, max_concurrent_batches=4)
    async def run(self, requests: list[tuple[str, str] | tuple[str, str, str | None]]) -> list[L1RunReply]:
        """Each request is ``(tenant, user)``, or ``(tenant, user, traceparent)`` from a worker that traces.

        A batch answers when its slowest pass ends, so batches run side by side (4 of 16: the replica's 64
        requests in flight): with one at a time (Serve's default), a user's short pass queued behind a batch of
        other users' backlogs for minutes (the replica-kill cluster test did not settle in a clean clone)."""
        self._batch_sizes.append(len(requests))
        return list(await asyncio.gather(*(self._run_user(*request) for request in requests)))

    def batch_sizes(self) -> list[int]:
        return list(self._batch_sizes)

    async def check(self) -> str:
        """Readiness of this replica, for ``/health``: it answers, and says how many users' runs are in flight and,
        with a model engine, its calls per stage as this side saw them (latency with queueing, and the items that fell
        back to the heuristic engine; the llm replica's detail has the tokens and retries)."""
        runs = f"{len(self._running)} runs in flight"
        stages = self._llm.usage.summary() if self._llm is not None else ""
        return f"{runs}; model calls from this replica: {stages}" if stages else runs


async def _here(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


LOCK_POLL_S = 0.2
"""How often a pass waiting for another replica's pass on the same user tries the file lock again."""


@contextlib.asynccontextmanager
async def across_replicas(path: Path) -> AsyncIterator[None]:
    """An exclusive ``flock`` on ``path``, waited for without blocking the event loop.

    Why: when a user moves to another stream worker mid-pass (a rebalance, a crash), the new owner retries the pass
    and Serve may route it to another replica while the first still runs. Held apart, the second pass starts after
    the first advanced the cursor and finds little left, instead of extracting the same turns beside it (work done
    twice, and atoms neither pass had indexed yet stored twice). Erasing the user removes the file with the rest;
    the next pass makes a new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(LOCK_POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock


MAX_ATOM_IDS = 100
"""Atom ids a pass's span lists (a backlog's first pass can store thousands; the counts are always whole)."""


async def traced_pass(
    tracing: Tracing, parent: str | None, tenant: str, run: Callable[[], Awaitable[L1RunResult]]
) -> L1RunResult:
    """One L1 pass under a span continuing the worker's trace, with what it did to the atoms (counts and the
    ids of the atoms stored; never their text)."""
    attributes = {"mnemoflow.tenant": tenant}
    with tracing.span("mnemoflow.extractor.l1_pass", from_traceparent(parent), attributes, SpanKind.SERVER) as span:
        result = await run()
        span.set_attributes(
            {
                "mnemoflow.l1.windows": result.windows,
                "mnemoflow.l1.stored": result.stored,
                "mnemoflow.l1.updated": result.updated,
                "mnemoflow.l1.merged": result.merged,
                "mnemoflow.l1.skipped": result.skipped,
                "mnemoflow.l1.atom_ids": result.atom_ids[:MAX_ATOM_IDS],
            }
        )
        return result


def _operation_applier(settings: Settings, pipeline: L1Pipeline, embedder: Any, store: Any) -> OperationApplier:
    """Memory operations over the same files, index and dedup as the L1 passes; SQLite is scrubbed on erase."""
    scrub = None if settings.milvus_uri else functools.partial(scrub_sqlite_index, index_path(settings))
    return OperationApplier.over(
        files=LocalFileStore(settings.data_dir, fsync=settings.fsync_files),
        store=store,
        embedder=embedder,
        clock=SystemClock(),
        pipeline=pipeline,
        scrub=scrub,
    )


def build_extractor_app(settings: Settings, replicas: int = 1, max_batch_size: int = 16) -> Any:
    deployment = serve.deployment(
        name="extractor", num_replicas=replicas, max_ongoing_requests=64, ray_actor_options={"num_cpus": 0}
    )
    return deployment(ExtractorServer).bind(settings, max_batch_size)


class ExtractorClient:
    """Calls the ``extractor`` application from any process connected to the Ray cluster."""

    def __init__(self, app_name: str = "extractor") -> None:
        self._handle = serve.get_app_handle(app_name)

    async def run(self, tenant: str, user: str, *, traceparent: str | None = None) -> L1RunReply:
        request = (tenant, user) if traceparent is None else (tenant, user, traceparent)
        return await self._handle.run.remote(request)

    async def apply_operation(self, event: OperationEvent) -> OperationReply:
        return await self._handle.apply_operation.remote(event)
