"""``mnemoflow.turns``: append new turns to L0 and count them for L1; the runs that become due are published.

The L0 append is one group commit, durable before :meth:`handle` returns and so before Kafka commits the batch's
offsets. The trigger counts it updates ride along when a checkpoint is due (``L1Scheduler``'s ``checkpoint_s``):
they are derived from L0 and the extraction cursor, so a crash delays a trigger and loses no turn.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from mnemoflow.config import TOPIC_TURNS
from mnemoflow.events import TurnEvent
from mnemoflow.governance.tombstones import Tombstones
from mnemoflow.handlers.context import HandlerContext
from mnemoflow.handlers.outcome import TurnsOutcome
from mnemoflow.handlers.records import RawRecord
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1.schedule import L1Job, L1Scheduler
from mnemoflow.ports import FileStore

log = logging.getLogger(__name__)


class TurnsHandler:
    """``scheduler`` None: L1 is not scheduled from this worker (disabled, or no extractor to run it)."""

    def __init__(self, ctx: HandlerContext, files: FileStore, scheduler: L1Scheduler | None = None) -> None:
        self._ctx, self._files, self._scheduler = ctx, files, scheduler
        self._l0 = L0Writer(files)
        self._tombstones = Tombstones(files)

    async def handle(self, records: Sequence[RawRecord]) -> TurnsOutcome:
        tracing = self._ctx.tracing
        if tracing is None:
            return await self._handle(records)
        with tracing.batch(
            "mnemoflow.worker.l0_write",
            records,
            {"messaging.destination.name": TOPIC_TURNS, "messaging.batch.message_count": len(records)},
        ) as spans:
            outcome = await self._handle(records)
            spans.set_attributes(
                {
                    "mnemoflow.l0.written": outcome.written,
                    "mnemoflow.l0.skipped": outcome.skipped,
                    "mnemoflow.parked": len(outcome.parked),
                }
            )
            for job in outcome.jobs:  # a job continues the trace of the user's last turn in the batch
                headers = spans.headers_for(job.key)
                if headers:
                    outcome.job_headers[job.key] = headers
        return outcome

    async def _handle(self, records: Sequence[RawRecord]) -> TurnsOutcome:
        now = self._ctx.clock.now()
        applied = await self._ctx.apply(records, TurnEvent, "turn", lambda events: self._write(events, now))
        outcome = TurnsOutcome(parked=applied.parked)
        if applied.result is not None:
            (outcome.written, outcome.skipped), outcome.jobs = applied.result
        return outcome

    def _write(self, events: list[TurnEvent], now: datetime) -> tuple[tuple[int, int], list[L1Job]]:
        """Turns of an erased user said before the erase are re-deliveries: counted as skipped, never written."""
        events, erased = self._tombstones.keep(events, "users", lambda e: (e.tenant, e.user, e.ts))
        with self._files.group_commit():
            written, skipped = self._l0.write(events)
            return (written, skipped + erased), self._schedule(events, now)

    def _schedule(self, events: list[TurnEvent], now: datetime) -> list[L1Job]:
        if self._scheduler is None:
            return []
        try:
            return self._scheduler.on_turns(events, now)
        except Exception as exc:  # the turns are in L0: L1 reads them at the user's next trigger, late, not lost
            log.warning("L1 triggers not updated for %d turns: %s", len(events), exc)
            return []

    async def forget(self) -> None:
        """Another worker may own these users now: drop what this one knew (see ``L0Writer.forget``)."""
        await self._ctx.blocking(self._l0.forget)
