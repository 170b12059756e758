"""Kafka checks behind ``/health``: the broker answers a metadata request, the Faust workers' group is stable
with members, and how far the group is behind (end offsets minus committed offsets, per topic).

Why one long-lived admin client and one group-less consumer per API replica: a probe is then a few small
requests on open connections, not a new bootstrap; aiokafka reconnects them by itself when the broker returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from mnemoflow.config import TOPIC_JOBS, TOPIC_TOOL_RESULTS, TOPIC_TURNS, WORKER_GROUP
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.health import consumer_lag

WORKER_TOPICS = (TOPIC_TURNS, TOPIC_TOOL_RESULTS, TOPIC_JOBS)
REQUEST_TIMEOUT_MS = 5000


class KafkaProbe:
    """Started on first use inside the replica's event loop; a start that fails or is cancelled is retried next."""

    def __init__(self, bootstrap: str, group: str = WORKER_GROUP, topics: tuple[str, ...] = WORKER_TOPICS) -> None:
        self._bootstrap, self._group, self._topics = bootstrap, group, topics
        self._admin: Any = None
        self._consumer: Any = None
        self._lock = asyncio.Lock()

    async def _clients(self) -> tuple[Any, Any]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.admin import AIOKafkaAdminClient

        async with self._lock:
            if self._admin is None:
                common = {"bootstrap_servers": self._bootstrap, "request_timeout_ms": REQUEST_TIMEOUT_MS}
                admin = AIOKafkaAdminClient(**common)
                consumer = AIOKafkaConsumer(group_id=None, enable_auto_commit=False, **common)
                try:
                    await admin.start()
                    await consumer.start()
                except BaseException:
                    await asyncio.shield(_close(admin, consumer))
                    raise
                self._admin, self._consumer = admin, consumer
        return self._admin, self._consumer

    async def broker(self) -> str:
        """A metadata request: which brokers the cluster reports."""
        admin, _ = await self._clients()
        cluster = await admin.describe_cluster()
        brokers = cluster.get("brokers", [])
        return f"{len(brokers)} broker(s), controller {cluster.get('controller_id')}"

    async def worker(self) -> str:
        """The workers' group is Stable with members; the detail carries its lag per topic (informational)."""
        from aiokafka import TopicPartition

        admin, consumer = await self._clients()
        described: Any
        committed: Any
        topics: Any
        described, committed, topics = await asyncio.gather(
            admin.describe_consumer_groups([self._group]),
            admin.list_consumer_group_offsets(self._group),
            admin.describe_topics(list(self._topics)),
            return_exceptions=True,
        )
        if isinstance(described, BaseException):
            raise described
        group = described[0].to_object()["groups"][0]
        state, members = group["state"], len(group["members"])
        summary = f"group {self._group} {state or 'unknown'} with {members} member(s)"
        if isinstance(committed, BaseException) or isinstance(topics, BaseException):
            # tansu (the memory-only broker) cannot list a group's offsets: liveness is known, lag is not
            failed = committed if isinstance(committed, BaseException) else topics
            detail = f"{summary}; lag unknown ({type(failed).__name__})"
        else:
            partitions = [TopicPartition(t["topic"], p["partition"]) for t in topics for p in t["partitions"]]
            end, beginning = await asyncio.gather(
                consumer.end_offsets(partitions), consumer.beginning_offsets(partitions)
            )
            lag = consumer_lag(end, {tp: meta.offset for tp, meta in committed.items()}, beginning)
            per_topic = ", ".join(f"{topic} {n}" for topic, n in lag.items())
            detail = f"{summary}; lag {sum(lag.values())}" + (f" ({per_topic})" if per_topic else "")
        if state != "Stable" or members == 0:
            raise ServiceUnavailable(f"no Faust worker consuming: {detail}")
        return detail

    async def close(self) -> None:
        async with self._lock:
            await _close(self._admin, self._consumer)
            self._admin = self._consumer = None


async def _close(admin: Any, consumer: Any) -> None:
    """Close what was made; an error while closing a half-started client must not hide the error that stopped it."""
    if consumer is not None:
        with contextlib.suppress(Exception):
            await consumer.stop()
    if admin is not None:
        with contextlib.suppress(Exception):
            await admin.close()
