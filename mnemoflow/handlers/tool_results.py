"""``mnemoflow.tool-results``: store refs and offload entries, then tell the session shards what was added.

The refs and entries of a batch form one group commit, durable before the shards hear of them and before Kafka
commits the batch's offsets. A shard that is not told catches up from ``offload.jsonl`` when it next syncs or
is read, so a failed notification is logged, not retried.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol

from mnemoflow.config import TOPIC_TOOL_RESULTS
from mnemoflow.events import ToolResultEvent
from mnemoflow.governance.tombstones import Tombstones
from mnemoflow.handlers.context import HandlerContext
from mnemoflow.handlers.outcome import ToolResultsOutcome
from mnemoflow.handlers.records import RawRecord
from mnemoflow.offload.entries import OffloadWriter, SessionAppend
from mnemoflow.offload.owner import record_owners
from mnemoflow.ports import FileStore

if TYPE_CHECKING:
    from mnemoflow.tracing import BatchTrace

log = logging.getLogger(__name__)


class ShardNotifier(Protocol):
    """Sends each session shard the new entries of its sessions (the Ray actors). ``traceparents`` is passed
    only when tracing is on: the traces the shards' work continues (the first) and links (the others)."""

    def __call__(self, appended: list[SessionAppend], /, *, traceparents: Sequence[str] = ()) -> Awaitable[None]: ...


class ToolResultsHandler:
    def __init__(self, ctx: HandlerContext, files: FileStore, notify: ShardNotifier | None = None) -> None:
        self._ctx, self._files, self._notify = ctx, files, notify
        self._offload = OffloadWriter(files)
        self._tombstones = Tombstones(files)

    async def handle(self, records: Sequence[RawRecord]) -> ToolResultsOutcome:
        tracing = self._ctx.tracing
        if tracing is None:
            return await self._handle(records)
        with tracing.batch(
            "mnemoflow.worker.offload_write",
            records,
            {"messaging.destination.name": TOPIC_TOOL_RESULTS, "messaging.batch.message_count": len(records)},
        ) as spans:
            return await self._handle(records, spans)

    async def _handle(self, records: Sequence[RawRecord], spans: BatchTrace | None = None) -> ToolResultsOutcome:
        applied = await self._ctx.apply(records, ToolResultEvent, "tool-result", self._write)
        outcome = ToolResultsOutcome(parked=applied.parked, appended=applied.result or [])
        if spans is not None:
            spans.set_attributes(
                {
                    "mnemoflow.offload.entries": sum(len(a.new_entries) for a in outcome.appended),
                    "mnemoflow.offload.sessions": len(outcome.appended),
                    "mnemoflow.parked": len(outcome.parked),
                }
            )
        if outcome.appended and self._notify is not None:
            try:
                if spans is None:
                    await self._notify(outcome.appended)
                else:  # the shards' span continues the batch's first trace and links the others
                    await self._notify(outcome.appended, traceparents=spans.traceparents())
            except Exception as exc:
                log.warning("session shards not notified (%d sessions): %s", len(outcome.appended), exc)
        return outcome

    def _write(self, events: list[ToolResultEvent]) -> list[SessionAppend]:
        """Results of an erased session from before the erase are re-deliveries: dropped. The first result naming an
        agent or team makes it the session's owner (:mod:`mnemoflow.offload.owner`)."""
        events, _ = self._tombstones.keep(events, "sessions", lambda e: (e.tenant, e.session, e.ts))
        with self._files.group_commit():
            record_owners(self._files, events)
            return self._offload.write(events)

    async def forget(self) -> None:
        """Another worker may own these sessions now: drop what this one knew (see ``OffloadWriter.forget``)."""
        await self._ctx.blocking(self._offload.forget)
