"""``mnemoflow.jobs``: run the L1 passes that jobs ask for, one per user, and fire the trigger wake-ups.

Jobs share the turns' partitions and key, so the worker that counts a user's turns also runs the user's jobs
and alone writes the user's trigger state (through the same writer thread). A failed pass goes back to the
trigger machine, which retries it later or, after the policy's last try, parks the job with the reason.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, TypeVar

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


class L1JobsHandler:
    """``run_l1`` None: no extractor is wired to this worker, and every job is parked saying so."""

    def __init__(
        self, ctx: HandlerContext, scheduler: L1Scheduler, run_l1: L1Runner | None, l1_done: L1Done | None = None
    ) -> None:
        self._ctx, self._scheduler, self._run_l1, self._l1_done = ctx, scheduler, run_l1, l1_done

    async def handle(self, records: Sequence[RawRecord]) -> JobsOutcome:
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
        while due:  # catch-up runs (turns that arrived during a run) follow at once
            due = await self._run_all(due, outcome, parents)
        return outcome

    async def tick(self) -> Outcome:
        """The runs whose wake-up has come (idle users, retries after a failure), to publish as jobs."""
        now = self._ctx.clock.now()
        try:
            return Outcome(jobs=await self._scheduled(lambda: self._scheduler.due(now), "fire L1 wake-ups"))
        except RetriesExhausted as exc:  # the wake-ups stay due: the next tick fires them
            log.error("%s", exc)
            return Outcome()

    async def forget(self) -> None:
        """Another worker may own these users now: checkpoint the turn counts, drop the wake-ups this one knew."""
        await self._checkpoint(self._scheduler.forget)

    async def flush(self) -> None:
        """A stopping worker writes the turn counts it has not checkpointed yet."""
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

    async def _run(self, tenant: str, user: str, parents: dict[str, Context] | None) -> L1RunReply:
        run_l1, tracing = self._run_l1, self._ctx.tracing
        assert run_l1 is not None
        try:
            if tracing is None or parents is None:
                return await run_l1(tenant, user)
            from opentelemetry.trace import SpanKind

            from mnemoflow.tracing import traceparent

            # the job's trace (a job fired by a wake-up timer has none: its span starts a trace)
            with tracing.span(
                "mnemoflow.worker.l1_run",
                parents.get(f"{tenant}/{user}"),
                {"mnemoflow.tenant": tenant},
                SpanKind.CONSUMER,
            ) as span:
                reply = await run_l1(tenant, user, traceparent=traceparent())
                span.set_attribute("mnemoflow.l1.ok", reply.ok)
                if reply.result is not None:
                    span.set_attribute("mnemoflow.l1.stored", reply.result.stored)
                return reply
        except Exception as exc:  # the extractor was unreachable: a failed pass like any other
            return L1RunReply.failed(exc)

    async def _run_all(
        self, due: dict[UserKey, L1Job], outcome: JobsOutcome, parents: dict[str, Context] | None = None
    ) -> dict[UserKey, L1Job]:
        replies = await asyncio.gather(*(self._run(tenant, user, parents) for tenant, user in due))
        follow: dict[UserKey, L1Job] = {}
        for (key, job), reply in zip(due.items(), replies, strict=True):
            outcome.runs.setdefault(key, []).append(reply)
            error = None if reply.ok else reply.error or "failed without a reason"
            if error is not None:
                log.warning("L1 for %s failed: %s", job.key, error)
            try:
                catch_up, dead = await self._settle(key, error)
            except RetriesExhausted as exc:
                outcome.parked.append(self._dead(job, str(exc)))
                continue
            if dead:
                outcome.parked.append(self._dead(job, f"L1 gave up: {dead}"))
            if catch_up is not None:
                follow[key] = catch_up
            if error is None and self._l1_done is not None:
                try:
                    await self._l1_done(*key)
                except Exception as exc:  # the curator also wakes on its own timer; L2 is late, not lost
                    log.warning("curator not told about %s: %s", job.key, exc)
        return follow

    async def _settle(self, key: UserKey, error: str | None) -> tuple[L1Job | None, str | None]:
        now: datetime = self._ctx.clock.now()
        return await self._scheduled(lambda: self._scheduler.on_result(*key, now, error), "record the L1 result")

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
