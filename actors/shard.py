"""SessionShard: the Ray actor that owns the state of many sessions (sessions are virtual actors).

A session's state is loaded on first use from ``state.json`` (and caught up with its offload log when an
update leaves a hole or when it is read), kept while the session is active, saved after every change, and
evicted when idle or when the shard holds too many. So a shard can restart or move and lose nothing: files
are the source of truth, memory is a cache. Every change to one session (a sync from the stream, a
compaction) runs under that session's lock, so ``state.json`` has one writer at a time. This class is plain
Python; :func:`actors.build_shards` applies ``ray.remote`` to it.

Where a model runs offload stages, a compaction still runs the heuristic ones (no request waits on a model) and
the shard queues the session for a background pass (:func:`mnemoflow.offload.refine.refine_session`), one session
at a time in arrival order. The queue holds at most ``max_sessions`` sessions; a session that finds it full keeps
the heuristic's output until its next turn queues it again (counted as ``refine_dropped``). The pass's cursors live
in ``state.json``, so a restarted shard resumes at the session's next turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from actors.metrics import ShardMetrics
from mnemoflow.config import MODEL_STAGES, ModelStage
from mnemoflow.errors import InvalidInput
from mnemoflow.offload.annotations import AnnotatedLog
from mnemoflow.offload.entries import OffloadEntry, read_entries
from mnemoflow.offload.refine import RefineReport, refine_due, refine_session
from mnemoflow.offload.replies import CompactRefused, CompactReply
from mnemoflow.offload.session import compact_turn, summarise_unscored
from mnemoflow.offload.session_state import SequenceGap, SessionState, advance, load_state, save_state, save_states
from mnemoflow.ports import SystemClock
from mnemoflow.ports.llm import LLM
from mnemoflow.skills.learn import learn_session, learn_session_with_model, owner_agent
from mnemoflow.storage import LocalFileStore
from mnemoflow.tokens import load_tokenizer
from mnemoflow.tracing import TraceExport, from_traceparent, links_to

log = logging.getLogger(__name__)

SessionKey = tuple[str, str]


class SessionShard:
    def __init__(
        self,
        index: int,
        data_dir: str,
        idle_seconds: float,
        max_sessions: int,
        llm_factory: Callable[[], LLM] | None = None,
        trace_export: TraceExport | None = None,
        model_stages: Collection[ModelStage] = MODEL_STAGES,
    ) -> None:
        self.index = index
        self._tracing = trace_export.start("shard") if trace_export is not None else None
        self._files = LocalFileStore(Path(data_dir))
        self._idle_seconds = idle_seconds
        self._max_sessions = max_sessions
        self._llm = llm_factory() if llm_factory else None  # None: heuristic summaries, boundaries, canvases
        self._model_stages = frozenset(model_stages)  # the offload stages that run on the model (the rest: heuristic)
        self._clock = SystemClock()
        self._sessions: OrderedDict[SessionKey, tuple[SessionState, float]] = OrderedDict()
        self._logs: dict[SessionKey, AnnotatedLog] = {}  # a held session's log as its last compaction read it
        self._locks: dict[SessionKey, asyncio.Lock] = {}
        self._loads = 0
        self._refine_queue: OrderedDict[SessionKey, None] = OrderedDict()
        self._refine_wake = asyncio.Event()
        self._refine_worker: asyncio.Task[None] | None = None
        self._refined = RefineReport()
        self._refine_dropped = 0
        self._metrics = ShardMetrics(index)
        self._learning: set[asyncio.Task[None]] = set()
        self._summary_due: set[SessionKey] = set()  # sessions whose summarising task has not taken the lock yet
        self._summarising: set[asyncio.Task[None]] = set()
        # Every compaction counts tokens: the vocabulary (~0.5-1 s of CPU, ~80 MB) loads with the shard, or the
        # first request each shard serves after a start pays for it (the proxy bench's slowest first request: 942
        # ms, all of it compaction in a shard the warm-up had not reached).
        load_tokenizer()

    def _lock(self, key: SessionKey) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    @asynccontextmanager
    async def _locked(self, key: SessionKey) -> AsyncIterator[None]:
        """The session's lock, for a writer outside this class's cache (the refine pass): the cached state is
        dropped, so the next use reads what it saved."""
        async with self._lock(key):
            try:
                yield
            finally:
                self._drop(key)

    def _drop(self, key: SessionKey) -> None:
        """Forget what is held of the session (its state, its log as last read): the next use reads the files."""
        self._sessions.pop(key, None)
        self._logs.pop(key, None)

    def _refine_later(self, key: SessionKey, state: SessionState) -> None:
        """Queue the session for the model's background pass, if it has anything to refine (bounded)."""
        if self._llm is None or not refine_due(state, self._model_stages) or key in self._refine_queue:
            return
        if len(self._refine_queue) >= self._max_sessions:
            self._refine_dropped += 1
            self._metrics.refine_dropped()
            return
        self._refine_queue[key] = None
        self._metrics.refine_queued(len(self._refine_queue))
        self._refine_wake.set()
        if self._refine_worker is None or self._refine_worker.done():
            self._refine_worker = asyncio.get_running_loop().create_task(self._refine_loop())

    async def _refine_loop(self) -> None:
        assert self._llm is not None
        while True:
            if not self._refine_queue:
                self._refine_wake.clear()
                await self._refine_wake.wait()
                continue
            key, _ = self._refine_queue.popitem(last=False)
            self._metrics.refine_queued(len(self._refine_queue))
            try:
                report = await refine_session(
                    self._files,
                    *key,
                    self._llm,
                    self._model_stages,
                    clock=self._clock,
                    locked=partial(self._locked, key),
                )
            except Exception:  # noqa: BLE001 - one session's failure must not stop the others' passes
                log.exception("refine pass of %s/%s failed; its heuristic output stays", *key)
                continue
            for (stage, outcome), n in report.counts.items():
                self._refined.add(stage, outcome, n)
                self._metrics.refined(stage, outcome, n)

    def _catch_up(self, state: SessionState) -> SessionState:
        return advance(state, read_entries(self._files, state.tenant, state.session, after_seq=state.last_seq))

    def _get(self, key: SessionKey) -> SessionState:
        if key in self._sessions:
            self._sessions.move_to_end(key)
            return self._sessions[key][0]
        self._loads += 1
        self._metrics.loaded()
        return load_state(self._files, *key)

    def _put(self, key: SessionKey, state: SessionState) -> None:
        now = time.monotonic()
        self._sessions[key] = (state, now)
        self._sessions.move_to_end(key)
        while self._sessions:
            oldest_key, (_, touched) = next(iter(self._sessions.items()))
            full = len(self._sessions) > self._max_sessions
            if not full and now - touched < self._idle_seconds:
                break
            del self._sessions[oldest_key]  # saved on every change already: eviction only frees memory
            self._logs.pop(oldest_key, None)
            self._metrics.evicted("full" if full else "idle")
            lock = self._locks.get(oldest_key)
            if lock is not None and not lock.locked():
                del self._locks[oldest_key]
        self._metrics.held(len(self._sessions))

    async def sync(self, updates: list[tuple[str, str, list[str], int]], traceparents: Sequence[str] = ()) -> int:
        """Apply new offload entries: ``(tenant, session, entries as JSON, last seq of the log)`` per session.

        Entries already applied are ignored; a hole is filled from the session's log. The changed states are
        saved together, off the event loop, under the locks of their sessions. Returns how many changed.
        ``traceparents`` (tracing on): the worker's spans this call continues (the first) and links (the others).
        """
        if self._tracing is None or not traceparents:
            return await self._sync(updates)
        parent, *others = traceparents
        with self._tracing.span(
            "mnemoflow.shard.sync",
            from_traceparent(parent),
            {"mnemoflow.shard": self.index, "mnemoflow.offload.sessions": len(updates)},
            SpanKind.SERVER,
            links_to(others),
        ) as span:
            changed = await self._sync(updates)
            span.set_attribute("mnemoflow.shard.changed", changed)
            return changed

    async def _sync(self, updates: list[tuple[str, str, list[str], int]]) -> int:
        states: dict[SessionKey, SessionState] = {}
        changed: list[SessionState] = []
        async with AsyncExitStack() as locks:
            for key in sorted({(tenant, session) for tenant, session, _, _ in updates}):
                await locks.enter_async_context(self._lock(key))
            for tenant, session, raw_entries, last_seq in updates:
                key = (tenant, session)
                state = states.get(key) or self._get(key)
                if state.last_seq < last_seq:
                    try:
                        new = advance(state, [OffloadEntry.model_validate_json(raw) for raw in raw_entries])
                    except SequenceGap:
                        new = self._catch_up(state)
                    if new is not state:
                        changed.append(new)
                    state = new
                states[key] = state
            if changed:
                await asyncio.to_thread(save_states, self._files, changed)
            for key, state in states.items():
                self._put(key, state)
        for state in changed:
            self._summarise_later((state.tenant, state.session))
            self._refine_later((state.tenant, state.session), state)
        return len({(s.tenant, s.session) for s in changed})

    def _summarise_later(self, key: SessionKey) -> None:
        """Summarise the session's new entries in the background (:func:`summarise_unscored`), so that its next
        compaction, which an agent waits for, finds them done; ``sync`` does not wait for it, nor does the stream
        worker that called it. One task per session at a time waits for the session's lock: the entries that arrive
        meanwhile are the ones it reads."""
        if key in self._summary_due:
            return
        self._summary_due.add(key)
        task = asyncio.get_running_loop().create_task(self._summarise(key))
        self._summarising.add(task)
        task.add_done_callback(self._summarising.discard)

    async def _summarise(self, key: SessionKey) -> None:
        async with self._lock(key):
            self._summary_due.discard(key)
            held = key in self._sessions  # an evicted session's log is not kept
            annotated = self._logs.setdefault(key, AnnotatedLog()) if held else AnnotatedLog()
            try:
                await asyncio.to_thread(summarise_unscored, self._files, *key, annotated)
            except Exception:  # the next compaction summarises what is left unscored
                self._drop(key)
                log.exception("summarising the new entries of %s/%s failed", *key)

    async def get_state(self, tenant: str, session: str) -> SessionState:
        """The session's state, caught up with its log."""
        key = (tenant, session)
        async with self._lock(key):
            state = self._get(key)
            caught_up = self._catch_up(state)
            if caught_up is not state:
                save_state(self._files, caught_up)
            self._put(key, caught_up)
            return caught_up

    async def compact(
        self, tenant: str, session: str, messages: list[dict[str, Any]], window: int
    ) -> CompactReply | CompactRefused:
        """One compaction turn (see :func:`mnemoflow.offload.session.compact_session`).

        A malformed request comes back refused with the reason (nothing was written), so the API answers 4xx.
        """
        key = (tenant, session)
        arrived = time.perf_counter()
        async with self._lock(key):
            started = time.perf_counter()
            state = self._get(key)
            tasks_before = state.canvas_counter
            try:
                result, after = await compact_turn(
                    self._files,
                    tenant,
                    session,
                    messages,
                    window,
                    clock=self._clock,
                    judge_later=self._llm is not None and "boundary" in self._model_stages,
                    state=state,
                    log=self._logs.setdefault(key, AnnotatedLog()),
                )
            except InvalidInput as exc:
                self._drop(key)
                return CompactRefused(reason=str(exc))
            except BaseException:
                self._drop(key)
                raise
            finally:
                self._metrics.compacted(time.perf_counter() - started)
            self._put(key, after)  # what the turn saved in state.json (or the state unchanged): no read back
            if after.canvas_counter > tasks_before and tasks_before > 0:
                self._learn_later(tenant, session, after.active_canvas)
            if self._llm is not None:
                self._refine_later(key, after)
            reply = CompactReply.of(result)
            return reply.model_copy(update={"shard_ms": (time.perf_counter() - arrived) * 1000})

    def _learn_later(self, tenant: str, session: str, active: str | None) -> None:
        """A new long task began, so the ones before it ended: distil them into skills in the background (the
        reply does not wait; a failure is logged, and the next boundary, the session's end or an explicit call
        runs the idempotent pass again)."""

        async def learn() -> None:
            agent = owner_agent(self._files, tenant, session)
            unfinished = {active} if active else set()
            now = self._clock.now()
            llm = self._llm if "skills" in self._model_stages else None
            attributes = {"mnemoflow.shard": self.index, "mnemoflow.skills.engine": "model" if llm else "heuristic"}
            traced = self._tracing.span("mnemoflow.shard.skill_pass", None, attributes) if self._tracing else None
            with traced or nullcontext() as span:
                try:
                    if llm is not None:
                        done = await learn_session_with_model(
                            self._files, tenant, session, now, llm, agent=agent, unfinished=unfinished
                        )
                    else:
                        done = await asyncio.to_thread(
                            learn_session, self._files, tenant, session, now, agent=agent, unfinished=unfinished
                        )
                except Exception:
                    log.exception("skill pass for %s/%s failed; the next one retries it", tenant, session)
                    return
                if span is not None:
                    for action, count in Counter(item.action for item in done).items():
                        span.set_attribute(f"mnemoflow.skills.{action}", count)
            self._metrics.skills_learnt(done)

        task = asyncio.get_running_loop().create_task(learn())
        self._learning.add(task)
        task.add_done_callback(self._learning.discard)

    def stats(self) -> dict[str, Any]:
        """Sessions held and loaded; with a model, the background pass: items per ``stage/outcome``, sessions
        waiting and sessions dropped because the queue was full."""
        out: dict[str, Any] = {"index": self.index, "sessions_in_memory": len(self._sessions), "loads": self._loads}
        if self._llm is not None:
            out["refine"] = {f"{stage}/{outcome}": n for (stage, outcome), n in sorted(self._refined.counts.items())}
            out["refine_queued"] = len(self._refine_queue)
            out["refine_dropped"] = self._refine_dropped
        return out
