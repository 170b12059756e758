"""Token buckets per tenant, on a clock the test moves."""

import pytest

from mnemoflow.config import RateLimit
from mnemoflow.ratelimit import RateLimiter, TokenBucket, retry_after
from mnemoflow.testing import ManualClock


def test_a_bucket_admits_its_burst_then_refills_at_its_rate() -> None:
    bucket = TokenBucket(RateLimit(per_second=2, burst=3), now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)  # one token every 0.5 s
    assert bucket.take(0.25) == pytest.approx(0.25)  # a refused request takes nothing
    assert bucket.take(0.5) == 0.0
    assert bucket.take(100.0) == 0.0 and [bucket.take(100.0) for _ in range(2)] == [0.0, 0.0]  # capped at burst
    assert bucket.take(100.0) > 0


def test_a_clock_that_steps_back_does_not_drain_or_fill_the_bucket() -> None:
    bucket = TokenBucket(RateLimit(per_second=1, burst=1), now=10.0)
    assert bucket.take(10.0) == 0.0
    assert bucket.take(5.0) == pytest.approx(1.0)


def test_tenants_have_their_own_buckets_and_overrides() -> None:
    clock = ManualClock()
    limits = {"small": RateLimit(per_second=1, burst=1)}
    limiter = RateLimiter(lambda t: limits.get(t, RateLimit(per_second=100, burst=5)), clock.monotonic)
    assert limiter.acquire("small") == 0.0 and limiter.acquire("small") == pytest.approx(1.0)
    assert [limiter.acquire("big") for _ in range(5)] == [0.0] * 5  # unaffected by "small" being limited
    clock.advance(1.0)
    assert limiter.acquire("small") == 0.0
    assert len(limiter) == 2


@pytest.mark.parametrize(("wait", "header"), [(0.001, 1), (1.0, 1), (1.2, 2), (30.0, 30)])
def test_retry_after_is_whole_seconds_at_least_one(wait: float, header: int) -> None:
    assert retry_after(wait) == header
