"""Per-batch error handling shared by the agents: bounded retries with backoff, and parking on dead letters."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


async def with_retries(fn: Callable[[], T], attempts: int, what: str, base_delay: float = 0.2) -> T:
    """Run ``fn`` until it succeeds or ``attempts`` tries failed (then re-raise), backing off exponentially."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts:
                raise
            delay = min(base_delay * 2 ** (attempt - 1), 10.0)
            log.warning("%s failed (try %d/%d): %s; retrying in %.1fs", what, attempt, attempts, exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


class Parker:
    """Writes what cannot be applied to the dead-letter topic, with where it came from and why."""

    def __init__(self, topic: Any) -> None:
        self._topic = topic

    async def __call__(self, events: Sequence[Any], reason: str) -> None:
        for ev in events:
            await self._send(ev.key, ev.value or b"", reason, ev.message.topic, ev.message.partition, ev.message.offset)
        log.error("parked %d events: %s", len(events), reason)

    async def record(self, key: str, value: str, reason: str) -> None:
        """Park a value that did not come straight from a topic record (a job that exhausted its retries)."""
        await self._send(key.encode(), value.encode(), reason, None, None, None)
        log.error("parked %s: %s", key, reason)

    async def _send(
        self, key: bytes | None, value: bytes, reason: str, topic: str | None, partition: int | None, offset: int | None
    ) -> None:
        record = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": (key or b"").decode(errors="replace"),
            "value_b64": base64.b64encode(value).decode(),
            "reason": reason,
            "parked_at": datetime.now(UTC).isoformat(),
        }
        await self._topic.send(key=key, value=json.dumps(record).encode())
