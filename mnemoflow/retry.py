"""One retry and dead-letter policy for every stage that retries failed work, so "retry or park" is decided once.

Kafka delivers at least once and nothing may be dropped silently (docs/DESIGN.md §4): work that fails is tried again
after a growing wait and, after the last try, parked on the dead-letter topic with the reason. The stream
handlers retry a batch write within seconds (a disk hiccup); the L1 trigger machine retries a failed pass over
minutes (a model that is down), persisting its count of failures. Both ask the same :class:`RetryPolicy`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.errors import MnemoflowError

log = logging.getLogger(__name__)
T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]


class RetriesExhausted(MnemoflowError):
    """Work failed on every try the policy allows; its records are parked on the dead-letter topic with this
    message as the reason. Fix the cause (disk, permissions, a bug the record triggers), then replay them."""


class RetryPolicy(BaseModel):
    """``attempts`` tries in all; after the n-th failure in a row wait ``base_delay * 2**(n-1)`` seconds (at
    most ``max_delay``) and try again; after the last, park."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attempts: int = Field(5, ge=1)
    base_delay: float = Field(0.2, gt=0)
    max_delay: float = Field(10.0, gt=0)

    def retry_after(self, failures: int) -> float | None:
        """Seconds to wait after ``failures`` failures in a row before the next try; None: park it now."""
        if failures >= self.attempts:
            return None
        return min(self.base_delay * 2.0 ** (failures - 1), self.max_delay)

    async def call(self, fn: Callable[[], Awaitable[T]], what: str, sleep: Sleep) -> T:
        """``await fn()`` until it succeeds; after the last failed try raise :class:`RetriesExhausted`."""
        failures = 0
        while True:
            try:
                return await fn()
            except Exception as exc:
                failures += 1
                delay = self.retry_after(failures)
                if delay is None:
                    raise RetriesExhausted(f"{what} failed after {failures} tries: {exc}") from exc
                log.warning("%s failed (try %d/%d): %s; retrying in %.1fs", what, failures, self.attempts, exc, delay)
                await sleep(delay)
