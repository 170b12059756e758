"""Token, latency and failure accounting for LLM calls, per call and per stage.

Why an object and not module counters: several engines (or several tests) must not share hidden globals, and the
benchmarks read the totals of exactly the engine they drove. Inject one ``LLMUsage`` into several engines to
get one combined view.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One ``complete`` call: the sum over its attempts (a validation retry is a second attempt)."""

    stage: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    attempts: int
    ok: bool
    error: str | None = None
    """Class name of the error raised when ``ok`` is False (``StructuredOutputError``, ``ServiceUnavailable``…)."""
    fallback: bool = False
    """Not a call: the caller gave the item of a failed call to the heuristic engine (:meth:`LLMUsage.fallback`)."""


@dataclass(slots=True)
class StageTotals:
    """Running totals for one stage."""

    calls: int = 0
    ok: int = 0
    failed: int = 0
    retries: int = 0
    """Validation retries: attempts beyond the first."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    """Items a failed call left to the heuristic engine (a failed call the caller retries later is not one)."""

    def add(self, record: CallRecord) -> None:
        if record.fallback:
            self.fallbacks += 1
            return
        self.calls += 1
        self.ok += record.ok
        self.failed += not record.ok
        self.retries += max(0, record.attempts - 1)
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.latency_s += record.latency_s
        if record.error is not None:
            self.errors[record.error] = self.errors.get(record.error, 0) + 1


class LLMUsage:
    """Records every call; keeps per-stage totals forever and the last ``keep`` call records.

    Thread-safe, because Serve replicas and benchmark threads may share one recorder. ``on_record`` is also told
    each call (outside the lock): the runtime's metrics read calls here without the core knowing about them.
    """

    def __init__(self, keep: int = 1000, on_record: Callable[[CallRecord], None] | None = None) -> None:
        self._on_record = on_record
        self._lock = threading.Lock()
        self._stages: dict[str, StageTotals] = {}
        self._recent: deque[CallRecord] = deque(maxlen=keep)

    def record(self, record: CallRecord) -> None:
        with self._lock:
            self._stages.setdefault(record.stage, StageTotals()).add(record)
            if not record.fallback:
                self._recent.append(record)
        if self._on_record is not None:
            self._on_record(record)

    def fallback(self, stage: str, error: BaseException) -> None:
        """Count that ``stage`` gave one item to its heuristic engine after ``error`` (a failed call)."""
        self.record(CallRecord(stage, 0, 0, 0.0, 0, ok=False, error=type(error).__name__, fallback=True))

    def stage(self, name: str) -> StageTotals:
        """A copy of the totals of one stage (zeros if the stage never ran)."""
        with self._lock:
            totals = self._stages.get(name, StageTotals())
            return replace(totals, errors=dict(totals.errors))

    def stages(self) -> dict[str, StageTotals]:
        with self._lock:
            names = sorted(self._stages)
        return {name: self.stage(name) for name in names}

    def records(self) -> list[CallRecord]:
        """The most recent call records (fallbacks are not calls), oldest first."""
        with self._lock:
            return list(self._recent)

    def total(self) -> StageTotals:
        """Totals over all stages."""
        out = StageTotals()
        for totals in self.stages().values():
            for f in (
                "calls",
                "ok",
                "failed",
                "retries",
                "prompt_tokens",
                "completion_tokens",
                "latency_s",
                "fallbacks",
            ):
                setattr(out, f, getattr(out, f) + getattr(totals, f))
            for k, v in totals.errors.items():
                out.errors[k] = out.errors.get(k, 0) + v
        return out

    def summary(self) -> str:
        """One line per stage for a health detail: calls, retries, failures, fallbacks, tokens, mean latency; a
        count that is zero is left out (the caller's side of a Serve call knows no tokens)."""
        lines = []
        for name, t in self.stages().items():
            parts = [f"{t.calls} calls"]
            parts += [f"{n} {label}" for n, label in ((t.retries, "retries"), (t.failed, "failed")) if n]
            parts += [f"{t.fallbacks} fallbacks"] if t.fallbacks else []
            if t.prompt_tokens or t.completion_tokens:
                parts.append(f"tokens {t.prompt_tokens} in / {t.completion_tokens} out")
            if t.calls:
                parts.append(f"{t.latency_s / t.calls:.2f} s mean")
            lines.append(f"{name}: " + ", ".join(parts))
        return "; ".join(lines)
