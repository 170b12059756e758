"""When L2 runs (docs/tdam-spec.md §3.2), as pure functions of a small persisted state and the time.

Why pure: the original kept this in in-memory timers beside mutable module state (STYLE anti-pattern 10). Here
the caller (the ``UserCurator`` actor) stores :class:`L2Timer` (per user, JSON), asks :func:`next_wakeup` when to
wake, and feeds events in; no function reads a clock or sleeps.

Rules kept from the spec: after an L1 pass the run is pulled *earlier only* ("downward-only") to
``max(now + delay_after_l1, last_run + min_interval)``; after any L2 run (or failure) the next is
``now + max_interval``; a due timer with no new L1 work whose user has been inactive for ``active_window`` is
dropped until the next L1; a first-ever run that found nothing does not set the min-interval floor; L3 is
considered after every L2 run except a failed one or a first-ever skipped one.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict


@dataclass(frozen=True, slots=True)
class L2Timing:
    delay_after_l1: timedelta = timedelta(seconds=10)
    min_interval: timedelta = timedelta(seconds=900)
    max_interval: timedelta = timedelta(seconds=3600)
    active_window: timedelta = timedelta(hours=24)


class L2Timer(BaseModel):
    """Per-user L2 timing state (persist as JSON). ``next_run`` None = no run scheduled."""

    model_config = ConfigDict(frozen=True)

    next_run: AwareDatetime | None = None
    last_run: AwareDatetime | None = None
    last_active: AwareDatetime | None = None
    pending_l1: int = 0
    """L1 passes finished since the last successful L2 run."""


L2Result = Literal["applied", "skipped", "failed"]
Decision = Literal["run", "wait", "drop"]


def on_activity(timer: L2Timer, now: datetime) -> L2Timer:
    """A user turn arrived: only the activity time changes (L1 triggers are L1's business)."""
    return timer.model_copy(update={"last_active": now})


def on_l1_done(timer: L2Timer, now: datetime, t: L2Timing = L2Timing()) -> L2Timer:
    """An L1 pass stored atoms: schedule L2 soon, never later than already scheduled."""
    desired = now + t.delay_after_l1
    if timer.last_run is not None:
        desired = max(desired, timer.last_run + t.min_interval)
    next_run = desired if timer.next_run is None else min(timer.next_run, desired)
    return timer.model_copy(update={"next_run": next_run, "pending_l1": timer.pending_l1 + 1})


def decide(timer: L2Timer, now: datetime, t: L2Timing = L2Timing()) -> Decision:
    """At a wake-up: run, keep waiting, or drop an idle max-interval timer (revived by the next L1)."""
    if timer.next_run is None or now < timer.next_run:
        return "wait"
    inactive = timer.last_active is None or now - timer.last_active >= t.active_window
    if timer.pending_l1 == 0 and inactive:
        return "drop"
    return "run"


def on_drop(timer: L2Timer) -> L2Timer:
    return timer.model_copy(update={"next_run": None})


def on_l2_done(timer: L2Timer, now: datetime, result: L2Result, t: L2Timing = L2Timing()) -> L2Timer:
    """After a run: next at ``now + max_interval``; the min-interval floor unless first-ever and skipped."""
    first_skip = timer.last_run is None and result == "skipped"
    update: dict[str, object] = {"next_run": now + t.max_interval}
    if not first_skip:
        update["last_run"] = now
    if result != "failed":
        update["pending_l1"] = 0
    return timer.model_copy(update=update)


def l3_after_l2(timer_before: L2Timer, result: L2Result) -> bool:
    """Whether to evaluate the persona triggers after this L2 run (spec: not after a failure or a first skip)."""
    return result != "failed" and not (result == "skipped" and timer_before.last_run is None)


def next_wakeup(timer: L2Timer) -> datetime | None:
    return timer.next_run
