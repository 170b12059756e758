"""When to run L1 for a user: a pure state machine (docs/tdam-spec.md §3.2), with no timers, threads or I/O.

Why pure: the stream worker owns time and persistence. It calls one of the ``on_*`` methods with the current
state and time, stores the returned state (:func:`mnemoflow.memory.l1.state.save_triggers`), runs L1 when the
decision says so, and calls :meth:`L1Triggers.on_tick` at ``decision.wake_at``. Rules, and where they beat
the original:

* warm-up: run after 1, 2, 4, … pending turns, then every ``every_n`` (5) — same as spec;
* idle: ``idle_s`` (600 s) after the last turn with turns pending;
* session end runs L1 whenever turns are pending (the original never does, docs/tdam-spec.md §9.5);
* one run in flight per user; turns that arrive meanwhile are kept and trigger a catch-up run;
* failure: exponential backoff, then a dead-letter decision carrying the reason (``config.retry``, the policy
  every retrying stage uses); the turns stay pending and the extraction cursor has not moved, so the next
  trigger retries them (nothing is dropped, docs/tdam-spec.md §9.3).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.retry import RetryPolicy

Reason = Literal["threshold", "idle", "session_end", "retry", "catch_up"]


class TriggerConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    every_n: int = Field(5, ge=1)
    warmup: bool = True
    idle_s: float = Field(600.0, gt=0)
    retry: RetryPolicy = RetryPolicy(attempts=6, base_delay=30.0, max_delay=600.0)


class TriggerState(BaseModel):
    """Persisted per user. ``inflight`` is how many pending turns the running pass covers."""

    model_config = ConfigDict(frozen=True)

    pending: int = 0
    inflight: int = 0
    running: bool = False
    rerun: bool = False
    warmup_threshold: int = 1
    last_turn_at: AwareDatetime | None = None
    failures: int = 0
    retry_at: AwareDatetime | None = None
    dead_lettered: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """``run``: start L1 now (the state already says it is running). ``wake_at``: call ``on_tick`` then.
    ``dead_letter``: park the work with this reason (the state is reset for the next trigger)."""

    run: bool = False
    reason: Reason | None = None
    wake_at: datetime | None = None
    dead_letter: str | None = None


class L1Triggers:
    """Transitions of :class:`TriggerState`. Every method is pure: (state, now, …) -> (state, decision)."""

    def __init__(self, config: TriggerConfig | None = None) -> None:
        self.config = config or TriggerConfig()

    def threshold(self, state: TriggerState) -> int:
        cfg = self.config
        if not cfg.warmup or state.warmup_threshold <= 0:
            return cfg.every_n
        return min(state.warmup_threshold, cfg.every_n)

    def _start(self, state: TriggerState, reason: Reason) -> tuple[TriggerState, Decision]:
        started = state.model_copy(
            update={"running": True, "inflight": state.pending, "rerun": False, "retry_at": None}
        )
        return started, Decision(run=True, reason=reason)

    def _idle_at(self, state: TriggerState) -> datetime | None:
        if state.pending <= 0 or state.last_turn_at is None:
            return None
        return state.last_turn_at + timedelta(seconds=self.config.idle_s)

    def wake_at(self, state: TriggerState) -> datetime | None:
        """When :meth:`on_tick` next has something to decide for a user not running (None: only a turn or a
        session end moves it)."""
        times = [t for t in (self._idle_at(state), state.retry_at) if t is not None]
        return min(times) if times else None

    def _wait(self, state: TriggerState) -> tuple[TriggerState, Decision]:
        return state, Decision(wake_at=self.wake_at(state))

    def on_inherit(self, state: TriggerState, now: datetime) -> TriggerState:
        """The state as a previous owner of the user left it (a crashed, stopped or rebalanced worker).

        A run it marked may still be in flight at the extractor, or ended with nobody to record it, or its job
        was never produced: the run is retried once the first retry delay has passed. By then a pass still in
        flight has usually finished, and the retry finds nothing past the cursor; at worst a pass runs twice,
        which the cursor makes harmless."""
        if not state.running:
            return state
        retry = self.config.retry
        retry_at = now + timedelta(seconds=min(retry.base_delay, retry.max_delay))
        return state.model_copy(update={"running": False, "inflight": 0, "rerun": False, "retry_at": retry_at})

    def on_turn(self, state: TriggerState, now: datetime) -> tuple[TriggerState, Decision]:
        """A user turn was written to L0."""
        return self.on_turns(state, now, 1)

    def on_turns(self, state: TriggerState, now: datetime, n: int) -> tuple[TriggerState, Decision]:
        """``n`` (>= 1) user turns written to L0 at ``now``: the state of ``n`` calls of :meth:`on_turn`, and the
        decision that started a run among them, else the last one.

        Why in one step: a worker's batch brings several turns per user, and a state copy per turn was most of
        the scheduler's CPU. On turns alone a run can only start at the turn whose pending count reaches the
        threshold (the threshold does not move), and once running only ``pending`` and ``last_turn_at`` change.
        """
        pending = state.pending + n
        if not state.running and state.retry_at is None:
            due = max(state.pending + 1, self.threshold(state))  # the pending count at which the run starts
            if due <= pending:
                started, decision = self._start(
                    state.model_copy(update={"pending": due, "last_turn_at": now}), "threshold"
                )
                return started.model_copy(update={"pending": pending}), decision
        state = state.model_copy(update={"pending": pending, "last_turn_at": now})
        return (state, Decision()) if state.running else self._wait(state)

    def on_tick(self, state: TriggerState, now: datetime) -> tuple[TriggerState, Decision]:
        """A wake-up asked for by an earlier decision (or any periodic check)."""
        if state.running:
            return state, Decision()
        if state.retry_at is not None and now >= state.retry_at:
            return self._start(state, "retry")
        idle_at = self._idle_at(state)
        if state.retry_at is None and idle_at is not None and now >= idle_at:
            return self._start(state, "idle")
        return self._wait(state)

    def on_session_end(self, state: TriggerState, now: datetime) -> tuple[TriggerState, Decision]:
        """The host closed a session: extract whatever is pending now rather than after the idle timeout."""
        if state.running:
            return state.model_copy(update={"rerun": state.pending > state.inflight}), Decision()
        if state.pending > 0:
            return self._start(state, "session_end")
        return self._wait(state)

    def on_success(self, state: TriggerState, now: datetime) -> tuple[TriggerState, Decision]:
        """The pass stored its atoms and advanced the cursor."""
        nxt = state.warmup_threshold * 2 if state.warmup_threshold > 0 else 0
        warm = 0 if nxt >= self.config.every_n else nxt
        state = state.model_copy(
            update={
                "pending": max(0, state.pending - state.inflight),
                "inflight": 0,
                "running": False,
                "failures": 0,
                "retry_at": None,
                "warmup_threshold": warm,
            }
        )
        if state.pending > 0 and (state.rerun or state.pending >= self.threshold(state)):
            return self._start(state, "catch_up")
        return self._wait(state)

    def on_failure(self, state: TriggerState, now: datetime, reason: str) -> tuple[TriggerState, Decision]:
        """The pass failed (model, store, validation); the cursor did not move."""
        failures = state.failures + 1
        base = state.model_copy(update={"running": False, "inflight": 0, "rerun": False})
        delay = self.config.retry.retry_after(failures)
        if delay is None:
            # Parked: no idle wake-up until the next turn, which retries the same (still pending) messages.
            parked = base.model_copy(
                update={"failures": 0, "retry_at": None, "last_turn_at": None, "dead_lettered": state.dead_lettered + 1}
            )
            return parked, Decision(dead_letter=reason)
        retry = base.model_copy(update={"failures": failures, "retry_at": now + timedelta(seconds=delay)})
        return self._wait(retry)
