"""When to restart a part of the stack that died: exponential backoff that forgives a part once it stays up.

Pure bookkeeping with the time passed in, so the policy is unit-tested without processes; the stack launcher
(``mnemoflow.cli.stack``) owns the processes and asks this object when a restart is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RestartBackoff:
    """Per part: the first restart is immediate, each quick death doubles the wait (up to ``max_delay``), and a
    part that ran for ``stable_after`` seconds starts again from no wait."""

    base_delay: float = 1.0
    max_delay: float = 30.0
    stable_after: float = 60.0
    _failures: dict[str, int] = field(default_factory=dict)
    _next_at: dict[str, float] = field(default_factory=dict)
    _started_at: dict[str, float] = field(default_factory=dict)

    def started(self, part: str, now: float) -> None:
        self._started_at[part] = now

    def due(self, part: str, now: float) -> bool:
        """Called when ``part`` is found dead: may it be restarted now? Records the death once per wait."""
        if part in self._next_at:
            return now >= self._next_at[part]
        ran = now - self._started_at.get(part, now)
        failures = 0 if ran >= self.stable_after else self._failures.get(part, 0)
        self._failures[part] = failures + 1
        delay = 0.0 if failures == 0 else min(self.base_delay * 2 ** (failures - 1), self.max_delay)
        self._next_at[part] = now + delay
        return delay == 0.0

    def restarted(self, part: str, now: float) -> None:
        self._next_at.pop(part, None)
        self._started_at[part] = now

    def failures(self, part: str) -> int:
        """Deaths in a row without a stable run (for the log)."""
        return self._failures.get(part, 0)
