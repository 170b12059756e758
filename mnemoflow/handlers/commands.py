"""``mnemoflow.commands``: apply memory operations in partition order, once each, and record their outcomes.

The topic is keyed and partitioned like ``mnemoflow.turns``, so the worker that writes a user's L0 and trigger
state also applies the user's operations, one after the other in the order they were accepted. An operation
whose outcome is already recorded is skipped (Kafka re-delivers after a crash); a record reusing an id with
another body is parked (the API refuses that with 409, so only a race between two API replicas gets here).
A transient failure is retried by the policy, then recorded as failed with the reason and parked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from mnemoflow.governance.applier import ApplyOperation, OperationReply
from mnemoflow.governance.operations import OperationEvent, OperationStatus
from mnemoflow.governance.status import OperationLog
from mnemoflow.handlers.context import HandlerContext
from mnemoflow.handlers.outcome import Outcome
from mnemoflow.handlers.records import DeadLetter, RawRecord, parse_records
from mnemoflow.ports import FileStore
from mnemoflow.retry import RetriesExhausted

log = logging.getLogger(__name__)


AtomsChanged = Callable[[str, str], Awaitable[object]]
"""Told after an operation changed a user's atoms (the user's curator then takes them out of scenes and persona)."""
_CHANGES_ATOMS = ("patch_atom", "delete_atom", "remember", "forget_agent")


class CommandsHandler:
    """``apply`` None: no extractor is wired to this worker; operations are parked and recorded as failed."""

    def __init__(
        self,
        ctx: HandlerContext,
        files: FileStore,
        apply: ApplyOperation | None,
        atoms_changed: AtomsChanged | None = None,
    ) -> None:
        self._ctx, self._apply, self._atoms_changed = ctx, apply, atoms_changed
        self._log = OperationLog(files)

    async def handle(self, records: Sequence[RawRecord]) -> Outcome:
        parsed = parse_records(OperationEvent, records, "operation", self._ctx.clock.now())
        outcome = Outcome(parked=parsed.parked)
        for event, record in zip(parsed.events, parsed.records, strict=True):
            reason = await self._one(event)
            if reason is not None:
                outcome.parked.append(DeadLetter.of(record, reason, self._ctx.clock.now()))
        return outcome

    async def _one(self, event: OperationEvent) -> str | None:
        """Apply and record one operation; the reason to park its record, or None."""
        known = await self._ctx.blocking(lambda: self._log.get(event.tenant, event.operation_id))
        if known is not None and known.fingerprint != event.fingerprint:
            return f"operation {event.operation_id} was already used with another body"
        if known is not None and known.status != "pending":
            return None  # applied or failed before: a re-delivery
        apply = self._apply
        if apply is None:
            reply, park = OperationReply(ok=False, error="no extractor is wired to this worker"), True
        else:
            try:
                reply = await self._ctx.retry.call(lambda: apply(event), f"apply {event.op.kind}", self._ctx.sleep)
                park = False
            except RetriesExhausted as exc:
                reply, park = OperationReply(ok=False, error=str(exc)), True
        status = OperationStatus(
            id=event.operation_id,
            kind=event.op.kind,
            status="applied" if reply.ok else "failed",
            fingerprint=event.fingerprint,
            submitted_at=event.submitted_at,
            applied_at=self._ctx.clock.now(),
            reason=reply.error,
            result=reply.result,
        )
        await self._ctx.retry.call(
            lambda: self._ctx.blocking(lambda: self._log.put(event.tenant, status)),
            "record the operation's outcome",
            self._ctx.sleep,
        )
        if not reply.ok:
            log.warning("operation %s (%s) failed: %s", event.operation_id, event.op.kind, reply.error)
        elif self._atoms_changed is not None and event.op.kind in _CHANGES_ATOMS:
            try:
                await self._atoms_changed(event.tenant, event.key.split("/", 1)[1])
            except Exception as exc:  # the curator also wakes on its own timer: scenes follow late, not never
                log.warning("curator not told about %s: %s", event.key, exc)
        return reply.error if park else None
