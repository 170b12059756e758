"""Run the L1 trigger state machine for the users of one stream worker, with persistence and wake-ups.

:class:`~mnemoflow.memory.l1.triggers.L1Triggers` is pure; this class loads and saves each user's
:class:`~mnemoflow.memory.l1.triggers.TriggerState` around every transition (files are the source of truth) and
keeps an in-memory index of wake-up times so a periodic ``due`` call can fire idle and retry triggers. The
index is a cache: a worker that is assigned partitions re-derives the wake-ups of their users from the persisted
states (:meth:`L1Scheduler.scan`, :meth:`L1Scheduler.adopt`), so a restart or a rebalance does not forget an
idle user's extraction or a retry.

Counting turns is checkpointed, not written per batch (``checkpoint_s``). Why: the per-user state file written
with every capture batch was most of what a worker spent per event beyond the L0 append (issue 9), yet the count
it holds is derived data. L0 and the extraction cursor are the truth: a pass extracts every line past the cursor
whatever the count said, so a crash that loses the last ``checkpoint_s`` of counts makes the successor trigger
later, never lose or skip a turn. The transitions around a pass (session end, result, wake-ups) are rare and
still written at once; a revoked partition or a stopping worker flushes what is unsaved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict

from mnemoflow.events import TurnEvent
from mnemoflow.ids import SafeId
from mnemoflow.lru import LRU
from mnemoflow.memory.l1.state import load_triggers, save_triggers
from mnemoflow.memory.l1.triggers import Decision, L1Triggers, TriggerState
from mnemoflow.ports import FileStore
from mnemoflow.storage.layout import users

log = logging.getLogger(__name__)

UserKey = tuple[str, str]


class L1Job(BaseModel):
    """A work order on ``mnemoflow.jobs`` (key ``tenant/user``): run L1 now, or the host ended a session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["run", "session_end"]
    tenant: SafeId
    user: SafeId
    reason: str = ""
    requested_at: AwareDatetime

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.user}"


class L1Scheduler:
    def __init__(
        self,
        files: FileStore,
        triggers: L1Triggers | None = None,
        max_wakeups: int = 100_000,
        checkpoint_s: float = 0.0,
    ) -> None:
        self._files = files
        self.triggers = triggers or L1Triggers()
        self._wake: dict[UserKey, datetime] = {}
        self._max_wakeups = max_wakeups
        self._states: LRU[UserKey, TriggerState] = LRU(max_wakeups)
        """The current states, so a batch does not read back every user's file: while this worker owns a user's
        partition it alone writes the user's state."""
        self._checkpoint = timedelta(seconds=checkpoint_s)
        self._unsaved: dict[UserKey, TriggerState] = {}
        """States counted by ``on_turns`` since the last checkpoint (bounded: a full map is written at once)."""
        self._saved_at: datetime | None = None

    def _load(self, key: UserKey, now: datetime) -> TriggerState:
        """The current state: this worker's own, else the persisted one as a previous owner left it (a run it
        marked is retried, :meth:`L1Triggers.on_inherit`)."""
        return self._states.get_or_load(key, lambda k: self.triggers.on_inherit(load_triggers(self._files, *k), now))

    def _save(self, states: dict[UserKey, TriggerState], now: datetime) -> None:
        """Write ``states`` and whatever is unsaved (one write for the batch of users). On failure the caller
        retries its transition from the files, where some may hold the new state and some the old: ``states`` are
        read again; earlier unsaved states stay unsaved (their transitions are done)."""
        try:
            save_triggers(self._files, {**self._unsaved, **states})
        except Exception:
            for key in states:
                self._states.pop(key)
                self._unsaved.pop(key, None)
            raise
        self._unsaved = {}
        self._saved_at = now

    def _checkpoint_due(self, now: datetime) -> bool:
        return (
            self._saved_at is None
            or now - self._saved_at >= self._checkpoint
            or len(self._unsaved) >= self._max_wakeups
        )

    def _settle(
        self, settled: list[tuple[UserKey, TriggerState, Decision]], now: datetime, defer: bool = False
    ) -> list[L1Job]:
        """Persist the new states (or, ``defer``, leave them to the next checkpoint), index their wake-ups,
        return the due runs."""
        states = {key: state for key, state, _ in settled}
        if defer and not self._checkpoint_due(now):
            self._unsaved.update(states)
        else:
            self._save(states, now)
        jobs = []
        for key, state, decision in settled:
            self._states.put(key, state)
            self._wake.pop(key, None)
            if decision.wake_at is not None and len(self._wake) < self._max_wakeups:
                self._wake[key] = decision.wake_at
            if decision.run:
                jobs.append(
                    L1Job(kind="run", tenant=key[0], user=key[1], reason=decision.reason or "", requested_at=now)
                )
        return jobs

    def _settle_one(self, key: UserKey, state: TriggerState, decision: Decision, now: datetime) -> L1Job | None:
        return next(iter(self._settle([(key, state, decision)], now)), None)

    def on_turns(self, events: Iterable[TurnEvent], now: datetime) -> list[L1Job]:
        """Count each new user message (assistant replies ride along); return the runs that became due."""
        counts: dict[UserKey, int] = {}
        for event in events:
            if event.role == "user":
                counts[(event.tenant, event.user)] = counts.get((event.tenant, event.user), 0) + 1
        settled = [(key, *self.triggers.on_turns(self._load(key, now), now, n)) for key, n in counts.items()]
        return self._settle(settled, now, defer=True)

    def on_session_end(self, tenant: str, user: str, now: datetime) -> L1Job | None:
        state, decision = self.triggers.on_session_end(self._load((tenant, user), now), now)
        return self._settle_one((tenant, user), state, decision, now)

    def runs_for(self, jobs: Iterable[L1Job], now: datetime) -> dict[UserKey, L1Job]:
        """One run per user for a batch of jobs: ``run`` jobs as they are, ``session_end`` jobs through the
        trigger machine (which starts a run only when turns are pending)."""
        runs: dict[UserKey, L1Job] = {}
        for job in jobs:
            key = (job.tenant, job.user)
            run = self.on_session_end(job.tenant, job.user, now) if job.kind == "session_end" else job
            if run is not None:
                runs[key] = run
        return runs

    def due(self, now: datetime) -> list[L1Job]:
        """Fire the wake-ups whose time has come (idle extraction, retries after a failure)."""
        due = [k for k, at in self._wake.items() if at <= now]
        settled = [(key, *self.triggers.on_tick(self._load(key, now), now)) for key in due]
        if settled or self._unsaved:  # the periodic tick is also the checkpoint of a worker with no new turns
            return self._settle(settled, now)
        return []

    def on_result(
        self, tenant: str, user: str, now: datetime, error: str | None = None
    ) -> tuple[L1Job | None, str | None]:
        """After a run: a catch-up run due now (if any) and, after too many failures, a dead-letter reason."""
        state = self._load((tenant, user), now)
        if error is None:
            state, decision = self.triggers.on_success(state, now)
        else:
            state, decision = self.triggers.on_failure(state, now, error)
        return self._settle_one((tenant, user), state, decision, now), decision.dead_letter

    def flush(self, now: datetime) -> None:
        """Write the states counted since the last checkpoint (a stopping worker, a revoked partition)."""
        if self._unsaved:
            self._save({}, now)

    def retain(self, owns: Callable[[str, str], bool]) -> None:
        """After a rebalance: keep what this worker knew of the users it still owns (their states, wake-ups and
        unsaved counts, and so the runs in flight it will settle), drop the others (another worker owns them)."""
        self._states.retain(lambda key: owns(*key))
        self._wake = {key: at for key, at in self._wake.items() if owns(*key)}
        self._unsaved = {key: state for key, state in self._unsaved.items() if owns(*key)}

    def scan(self, owns: Callable[[str, str], bool]) -> dict[UserKey, TriggerState]:
        """The persisted states of the users ``owns`` says this worker owns now, those with something left to
        decide (turns pending, a retry, a run a previous owner marked). Only reads files: it runs on any thread,
        and its result goes to :meth:`adopt`."""
        found: dict[UserKey, TriggerState] = {}
        for key in users(self._files):
            if len(found) >= self._max_wakeups:
                break
            if not owns(*key):
                continue
            try:
                state = load_triggers(self._files, *key)
            except ValueError as exc:  # the user's next turn fails loudly on it; the others are adopted
                log.error("L1 trigger state of %s/%s unreadable: %s", *key, exc)
                continue
            if state.running or state.pending > 0 or state.retry_at is not None:
                found[key] = state
        return found

    def adopt(self, found: dict[UserKey, TriggerState], now: datetime) -> int:
        """Index the wake-ups of the states :meth:`scan` found; a user this worker has loaded since keeps its
        own state. Returns how many wake-ups were indexed."""
        indexed = 0
        for key, persisted in found.items():
            if key in self._states or len(self._wake) >= self._max_wakeups:
                continue
            state = self.triggers.on_inherit(persisted, now)
            wake_at = self.triggers.wake_at(state)
            if wake_at is not None:
                self._states.put(key, state)
                self._wake[key] = wake_at
                indexed += 1
        return indexed
