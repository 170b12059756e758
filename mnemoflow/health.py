"""Readiness as data: one result per dependency and the verdict, with no runtime imported.

Why here: what is worth testing is the aggregation (every check at once, one deadline for all, a check that hangs
or raises counts as failing, the verdict follows the worst). The checks that talk to Kafka, Ray and the index live
in :mod:`serving.health` and are passed in as plain coroutine functions, so unit tests pass fakes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

CHECK_TIMEOUT_SECONDS = 1.5
"""Default deadline shared by the checks of one report (``Settings.health_timeout_seconds`` in the API), so that
``/health`` answers within about 2 s even when a part hangs. A Kubernetes readiness probe times out after 1 s by
default: give it ``timeoutSeconds: 3``."""

MAX_DETAIL_CHARS = 300

Check = Callable[[], Awaitable[str]]
"""Probes one dependency: returns a short detail when it is fine, raises when it is not (the error is the detail)."""


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    ok: bool
    detail: str
    latency_ms: float


class HealthReport(BaseModel):
    """The checks in the order they were given. ``ok`` only when every check passed."""

    model_config = ConfigDict(frozen=True)

    checks: tuple[CheckResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def status(self) -> Literal["ok", "degraded"]:
        return "ok" if self.ok else "degraded"

    @property
    def failing(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def payload(self) -> dict[str, Any]:
        """The JSON body of ``/health``: ``failing`` appears only when something fails."""
        body: dict[str, Any] = {"status": self.status}
        if not self.ok:
            body["failing"] = self.failing
        body["checks"] = [c.model_dump() for c in self.checks]
        return body


def aggregate(results: Iterable[CheckResult]) -> HealthReport:
    return HealthReport(checks=tuple(results))


def _detail_of(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text[:MAX_DETAIL_CHARS]


async def run_checks(
    checks: Mapping[str, Check],
    *,
    timeout: float = CHECK_TIMEOUT_SECONDS,
    timer: Callable[[], float] = time.perf_counter,
) -> HealthReport:
    """Run every check concurrently and wait at most ``timeout`` seconds for all of them.

    A check still running at the deadline is cancelled and reported failing; one that raises is failing with
    its error as the detail. The report never waits for a cancelled check to wind down.
    """
    started = timer()
    finished: dict[str, float] = {}

    async def timed(name: str, check: Check) -> str:
        try:
            return await check()
        finally:
            finished[name] = timer()

    tasks = {name: asyncio.ensure_future(timed(name, check)) for name, check in checks.items()}
    if tasks:
        await asyncio.wait(tasks.values(), timeout=timeout)
    results = []
    for name, task in tasks.items():
        if not task.done():
            task.cancel()
            results.append(
                CheckResult(
                    name=name, ok=False, detail=f"no answer within {timeout:g}s", latency_ms=round(timeout * 1000, 1)
                )
            )
            continue
        latency_ms = round((finished.get(name, timer()) - started) * 1000, 1)
        if task.cancelled():
            results.append(CheckResult(name=name, ok=False, detail="cancelled", latency_ms=latency_ms))
        elif (exc := task.exception()) is not None:
            results.append(CheckResult(name=name, ok=False, detail=_detail_of(exc), latency_ms=latency_ms))
        else:
            detail = str(task.result())[:MAX_DETAIL_CHARS]
            results.append(CheckResult(name=name, ok=True, detail=detail, latency_ms=latency_ms))
    return aggregate(results)


def consumer_lag(
    end: Mapping[tuple[str, int], int],
    committed: Mapping[tuple[str, int], int],
    beginning: Mapping[tuple[str, int], int],
) -> dict[str, int]:
    """Records not yet committed by a consumer group, per topic: end offset minus committed offset per partition.

    A partition the group never committed is read from its beginning (the workers start at ``earliest``), so its
    lag is end minus beginning; a negative difference (a truncated log) counts as 0.
    """
    lag: dict[str, int] = {}
    for (topic, partition), end_offset in sorted(end.items()):
        done = committed.get((topic, partition), -1)
        start = done if done >= 0 else beginning.get((topic, partition), 0)
        lag[topic] = lag.get(topic, 0) + max(0, end_offset - start)
    return lag
