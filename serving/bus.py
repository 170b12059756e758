"""The event bus the API produces to: Kafka through aiokafka, answering once the broker acknowledged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from mnemoflow.errors import ServiceUnavailable

log = logging.getLogger(__name__)


Headers = list[tuple[str, bytes]]


class EventBus(Protocol):
    async def publish(
        self, topic: str, records: Sequence[tuple[str, bytes, int | None]], headers: Headers | None = None
    ) -> None:
        """Produce ``(key, value, partition or None)`` records in order; return when all are acknowledged.
        ``headers`` go on every record (the request's trace context, when tracing is on)."""
        ...

    async def close(self) -> None: ...


class KafkaBus:
    """aiokafka producer with ``acks=all``, started on first use inside the serving event loop."""

    def __init__(self, bootstrap: str) -> None:
        self._bootstrap = bootstrap
        self._producer = None
        self._lock = asyncio.Lock()

    async def _get(self) -> Any:
        from aiokafka import AIOKafkaProducer

        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self._bootstrap, acks="all", linger_ms=2, request_timeout_ms=15000
                )
                await producer.start()
                self._producer = producer
        return self._producer

    async def publish(
        self, topic: str, records: Sequence[tuple[str, bytes, int | None]], headers: Headers | None = None
    ) -> None:
        from aiokafka.errors import KafkaError

        try:
            producer = await self._get()
            futures = [
                await producer.send(topic, value, key=key.encode(), partition=p, headers=headers)
                for key, value, p in records
            ]
            await asyncio.gather(*futures)
        except KafkaError as exc:
            raise ServiceUnavailable(f"Kafka did not acknowledge the events: {exc}") from exc

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
