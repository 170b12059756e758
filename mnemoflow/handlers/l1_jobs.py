"""``mnemoflow.jobs``: start the L1 passes that jobs ask for, one per user, and fire the trigger wake-ups.

Jobs share the turns' partitions and key, so the worker that counts a user's turns also runs the user's jobs
and alone writes the user's trigger state (through the same writer thread). A failed pass goes back to the
trigger machine, which retries it later or, after the policy's last try, parks the job with the reason.

A job is acknowledged once its run is recorded in the trigger state, not when the pass ends: the pass runs
beside the stream, and its result is settled and reported when it comes. Why: a pass takes seconds to minutes
(a backlog, a CPU model, an extractor replica lost mid-pass), and a record in flight holds a rebalance, which
waits for every record in flight before it hands partitions over; a worker that waits longer than the
rebalance timeout is expelled from the group and its partitions stand still until it rejoins (issue 9). The run
is not lost with the record: the state says it is running. A pass in flight across a rebalance is settled by this
worker if it still owns the user afterwards; otherwise the worker that is assigned the user retries it from the
files (:meth:`L1Scheduler.scan`, :meth:`L1Triggers.on_inherit`): the L0 lines past the cursor are the work, and
the cursor makes a second pass harmless.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from mnemoflow.handlers.context import HandlerContext
from mnemoflow.handlers.outcome import JobsOutcome, Outcome
from mnemoflow.handlers.records import DeadLetter, RawRecord, parse_records
from mnemoflow.memory.l1.pipeline import L1RunReply
from mnemoflow.memory.l1.schedule import L1Job, L1Scheduler, UserKey
from mnemoflow.retry import RetriesExhausted

if TYPE_CHECKING:
    from opentelemetry.context import Context

log = logging.getLogger(__name__)
T = TypeVar("T")


class L1Runner(Protocol):
    """Runs one user's L1 pass (the extractor deployment). ``traceparent`` is passed only when tracing is on:
    the span the pass continues."""

    def __call__(self, tenant: str, user: str, /, *, traceparent: str | None = None) -> Awaitable[L1RunReply]: ...


L1Done = Callable[[str, str], Awaitable[object]]
"""Told after a successful pass (the user's curator schedules L2/L3)."""

Report = Callable[[JobsOutcome], Awaitable[object]]
"""Given what a pass did once it is settled (its reply, and a job it parked after the last retry): the wiring
produces the dead letters and counts the runs."""

Owns = Callable[[str, str], bool]
"""Whether a (tenant, user) is in the partitions assigned to this worker."""


def _everyone(tenant: str, user: str) -> bool:
    return True


class _Rebalancing:
    """A settle that found a rebalance under way: it waits for the assignment and tries again."""


_REBALANCING = _Rebalancing()


PASS_TIMEOUT_S = 900.0
"""A pass unanswered by then counts as failed, and the trigger machine retries it. Why a bound: a request whose
replica died without an answer must not keep the user "running" forever. Why so long: a first pass over a
backlog with a CPU model takes minutes (a retry that reaches the replica still running the pass joins it)."""

MAX_PASSES = 64
"""Passes one worker has at the extractor at once (a replica's ``max_ongoing_requests``, and the most one batch of
jobs ran at once when jobs waited for their passes); the others wait their turn in the worker. Why a bound: jobs
no longer wait for passes, so a burst of due users (a restart's retries, a replay) would otherwise become that
many requests queued at the extractor's router at once."""


class L1JobsHandler:
    """``run_l1`` None: no extractor is wired to this worker, and every job is parked saying so. ``report``
    None: settled passes are only logged."""

    def __init__(
        self,
        ctx: HandlerContext,
        scheduler: L1Scheduler,
        run_l1: L1Runner | None,
        l1_done: L1Done | None = None,
        report: Report | None = None,
        pass_timeout_s: float = PASS_TIMEOUT_S,
        max_passes: int = MAX_PASSES,
    ) -> None:
        self._ctx, self._scheduler, self._run_l1, self._l1_done = ctx, scheduler, run_l1, l1_done
        self._report, self._pass_timeout_s = report, pass_timeout_s
        self._passes: dict[UserKey, asyncio.Task[None]] = {}
        """By user, the pass not yet settled in the trigger state (its task then goes on to report)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max_passes)
        self._owns: Owns = _everyone
        """The users of the partitions assigned to this worker (everyone until a first assignment says)."""
        self._assigned = asyncio.Event()
        """Cleared from a revocation until the next assignment: who owns what is unknown, so nothing settles."""
        self._assigned.set()

    async def handle(self, records: Sequence[RawRecord]) -> JobsOutcome:
        """Record the runs the jobs ask for and start their passes; the outcome lists the records parked (the
        passes report through ``report`` when they end)."""
        now = self._ctx.clock.now()
        if self._run_l1 is None:
            return JobsOutcome(parked=[DeadLetter.of(r, "no extractor is wired to this worker", now) for r in records])
        parsed = parse_records(L1Job, records, "job", now)
        outcome = JobsOutcome(parked=parsed.parked)
        parents = None if self._ctx.tracing is None else _parents(parsed.records)
        try:
            due = await self._scheduled(lambda: self._scheduler.runs_for(parsed.events, now), "plan L1 runs")
        except RetriesExhausted as exc:
            outcome.parked += [DeadLetter.of(r, str(exc), self._ctx.clock.now()) for r in parsed.records]
            return outcome
        for key, job in due.items():
            if key in self._passes:  # a job delivered again: the user's run is this worker's pass, not yet settled
                log.debug("L1 for %s is already running", job.key)
                continue
            parent = None if parents is None else parents.get(job.key)
            task = asyncio.create_task(self._pass(key, job, parent), name=f"L1 pass {job.key}")
            self._passes[key] = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(functools.partial(self._ended, key))
        return outcome

    def _ended(self, key: UserKey, task: asyncio.Future[Any] | None) -> None:
        if self._passes.get(key) is task:  # not a pass abandoned and since replaced
            del self._passes[key]

    async def drain(self) -> None:
        """Wait until no pass of this worker is in flight or reporting (catch-up runs included)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def tick(self) -> Outcome:
        """The runs whose wake-up has come (idle users, retries after a failure), to publish as jobs."""
        now = self._ctx.clock.now()
        try:
            return Outcome(jobs=await self._scheduled(lambda: self._scheduler.due(now), "fire L1 wake-ups"))
        except RetriesExhausted as exc:  # the wake-ups stay due: the next tick fires them
            log.error("%s", exc)
            return Outcome()

    async def adopt(self, owns: Owns) -> int:
        """This worker was assigned partitions (``owns``: whether a user is in them). What it knew of users it
        no longer owns goes, with its passes for them (their next owner retries them); its passes for users it
        kept settle as usual. The wake-ups of users it did not know are indexed from their persisted states, so
        an idle user's extraction, a retry, or a pass a previous owner left running is not forgotten. The files
        are read on a thread of their own (the writer thread keeps writing L0 meanwhile). Returns how many
        wake-ups were indexed."""
        await self._ctx.blocking(lambda: self._scheduler.retain(owns))
        for key in [k for k in self._passes if not owns(*k)]:
            self._passes.pop(key).cancel()  # the pass runs on at the extractor: only its result is not ours
        self._owns = owns
        self._assigned.set()
        try:
            found = await asyncio.to_thread(self._scheduler.scan, owns)
        except Exception as exc:  # noqa: BLE001 - the users' next turns index them again: late, not lost
            log.error("L1 wake-ups not re-derived from the trigger states: %s", exc)
            return 0
        now = self._ctx.clock.now()

        def adopt() -> int:  # on the writer thread; not if another rebalance began meanwhile
            return self._scheduler.adopt(found, now) if self._owns is owns and self._assigned.is_set() else 0

        indexed = await self._ctx.blocking(adopt)
        log.info("L1 wake-ups of %d users re-derived from %d trigger states", indexed, len(found))
        return indexed

    async def forget(self) -> None:
        """A revocation: until the next assignment says which users stay, passes that end wait to settle; the
        turn counts are checkpointed for whichever worker owns the users next."""
        self._assigned.clear()
        await self._checkpoint(self._scheduler.flush)

    async def flush(self) -> None:
        """A stopping worker writes the turn counts it has not checkpointed yet, and stops waiting for its
        passes (each runs on at the extractor; the next owner of the user retries it from the files)."""
        self._assigned.clear()
        for task in self._passes.values():
            task.cancel()
        self._passes.clear()
        await self._checkpoint(self._scheduler.flush)

    async def _checkpoint(self, fn: Callable[[datetime], None]) -> None:
        now = self._ctx.clock.now()
        try:
            await self._ctx.blocking(lambda: fn(now))
        except Exception as exc:  # noqa: BLE001 - the counts are derived from L0 and the cursor: late, not lost
            log.warning("L1 trigger counts not checkpointed: %s", exc)

    async def _scheduled(self, fn: Callable[[], T], what: str) -> T:
        """Scheduler work (trigger state in files) on the writer thread, with the retry policy."""
        return await self._ctx.retry.call(lambda: self._ctx.blocking(fn), what, self._ctx.sleep)

    async def _pass(self, key: UserKey, job: L1Job, parent: Context | None) -> None:
        """Run the user's pass, settle it in the trigger state, report it; then the catch-up run, if the turns
        that came meanwhile make one due."""
        run: L1Job | None = job
        while run is not None:
            async with self._slots:
                reply = await self._run(*key, parent)
            outcome = JobsOutcome(runs={key: [reply]})
            error = None if reply.ok else reply.error or "failed without a reason"
            if error is not None:
                log.warning("L1 for %s failed: %s", run.key, error)
            try:
                settled = await self._settle(key, error)
            except RetriesExhausted as exc:
                outcome.parked.append(self._dead(run, str(exc)))
                await self._reported(outcome)
                return
            if settled is None:  # the user went to another worker meanwhile
                return
            catch_up, dead = settled
            if catch_up is None:  # settled: a job for the user from now on asks for a new run, not this one
                self._ended(key, asyncio.current_task())
            if dead:
                outcome.parked.append(self._dead(run, f"L1 gave up: {dead}"))
            if error is None and self._l1_done is not None:
                try:
                    await self._l1_done(*key)
                except Exception as exc:  # the curator also wakes on its own timer; L2 is late, not lost
                    log.warning("curator not told about %s: %s", run.key, exc)
            await self._reported(outcome)
            run = catch_up

    async def _run(self, tenant: str, user: str, parent: Context | None) -> L1RunReply:
        run_l1, tracing = self._run_l1, self._ctx.tracing
        assert run_l1 is not None
        try:
            if tracing is None:
                return await asyncio.wait_for(run_l1(tenant, user), self._pass_timeout_s)
            from opentelemetry.trace import SpanKind

            from mnemoflow.tracing import traceparent

            # the job's trace (a job fired by a wake-up timer has none: its span starts a trace)
            with tracing.span(
                "mnemoflow.worker.l1_run", parent, {"mnemoflow.tenant": tenant}, SpanKind.CONSUMER
            ) as span:
                reply = await asyncio.wait_for(run_l1(tenant, user, traceparent=traceparent()), self._pass_timeout_s)
                span.set_attribute("mnemoflow.l1.ok", reply.ok)
                if reply.result is not None:
                    span.set_attribute("mnemoflow.l1.stored", reply.result.stored)
                return reply
        except TimeoutError:
            return L1RunReply(ok=False, error=f"no reply from the extractor within {self._pass_timeout_s:g} s")
        except Exception as exc:  # the extractor was unreachable: a failed pass like any other
            return L1RunReply.failed(exc)

    async def _settle(self, key: UserKey, error: str | None) -> tuple[L1Job | None, str | None] | None:
        """Record the pass's result once this worker knows it owns the user (None: it does not, and records
        nothing)."""
        while True:
            await self._assigned.wait()

            def settle() -> tuple[L1Job | None, str | None] | None | _Rebalancing:
                if not self._assigned.is_set():  # a revocation began after the wait: wait for its assignment
                    return _REBALANCING
                if not self._owns(*key):
                    return None
                return self._scheduler.on_result(*key, self._ctx.clock.now(), error)

            settled = await self._scheduled(settle, "record the L1 result")
            if not isinstance(settled, _Rebalancing):
                return settled

    async def _reported(self, outcome: JobsOutcome) -> None:
        if self._report is None:
            return
        try:
            await self._report(outcome)
        except Exception as exc:  # noqa: BLE001 - the trigger state holds the result; only the report is lost
            log.error("L1 pass outcome not produced: %s", exc)

    def _dead(self, job: L1Job, reason: str) -> DeadLetter:
        record = RawRecord(value=job.model_dump_json().encode(), key=job.key.encode())
        return DeadLetter.of(record, reason, self._ctx.clock.now())


def _parents(records: Sequence[RawRecord]) -> dict[str, Context]:
    """By job key, the trace context of the last job record that carried one (tracing on only)."""
    from mnemoflow.tracing import extract_headers

    parents = {}
    for record in records:
        context = extract_headers(record.headers)
        if context is not None and record.key is not None:
            parents[record.key.decode(errors="replace")] = context
    return parents
