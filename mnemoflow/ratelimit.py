"""Per-tenant token buckets: a tenant may send ``burst`` requests at once and ``per_second`` on average.

Why here and not in the API: the arithmetic is pure and wants a clock that tests move by hand
(:meth:`mnemoflow.testing.ManualClock.monotonic`); the API applies it once the key has resolved the tenant.
Memory is bounded: there is one bucket per tenant, and tenants come only from the key ring. With several API
replicas every replica keeps its own buckets, so the limit holds per replica (N replicas admit N times the rate).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from mnemoflow.config import RateLimit


class TokenBucket:
    """``limit.burst`` tokens, refilled continuously at ``limit.per_second``; a request takes one."""

    __slots__ = ("_limit", "_tokens", "_at")

    def __init__(self, limit: RateLimit, now: float) -> None:
        self._limit = limit
        self._tokens = float(limit.burst)
        self._at = now

    def take(self, now: float) -> float:
        """Take a token: 0.0 when one was there, else the seconds until one will be (nothing is taken then)."""
        elapsed = max(0.0, now - self._at)  # a clock that steps back must not drain the bucket
        self._tokens = min(float(self._limit.burst), self._tokens + elapsed * self._limit.per_second)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self._limit.per_second


class RateLimiter:
    """One :class:`TokenBucket` per tenant, created on the tenant's first request. Safe to call from threads."""

    def __init__(self, limit_for: Callable[[str], RateLimit], timer: Callable[[], float] = time.monotonic) -> None:
        self._limit_for = limit_for
        self._timer = timer
        self._buckets: dict[str, TokenBucket] = {}
        self._lock = threading.Lock()

    def limit(self, tenant: str) -> RateLimit:
        return self._limit_for(tenant)

    def acquire(self, tenant: str) -> float:
        """0.0 when the tenant may go ahead, else how many seconds it should wait before retrying."""
        with self._lock:
            now = self._timer()
            bucket = self._buckets.get(tenant)
            if bucket is None:
                bucket = self._buckets[tenant] = TokenBucket(self._limit_for(tenant), now)
            return bucket.take(now)

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after(wait: float) -> int:
    """The ``Retry-After`` header value: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait))
