"""Create mnemoflow's topics before any worker or producer uses them (idempotent)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from mnemoflow.config import (
    TOPIC_COMMANDS,
    TOPIC_DEAD_LETTERS,
    TOPIC_JOBS,
    TOPIC_TOOL_RESULTS,
    TOPIC_TURNS,
    WORKER_GROUP,
    Settings,
)
from mnemoflow.errors import ServiceUnavailable

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

log = logging.getLogger(__name__)


def keyed_partition(key: bytes, partitions: int) -> int:
    """The partition the Kafka client's default partitioner picks for ``key`` (murmur2, as the Java client):
    turns and jobs are produced by key, without a partition, so this is where a user's records go."""
    from aiokafka.partitioner import murmur2

    return (murmur2(key) & 0x7FFFFFFF) % partitions


def topic_partitions(settings: Settings) -> dict[str, int]:
    return {
        TOPIC_TURNS: settings.turns_partitions,
        TOPIC_TOOL_RESULTS: settings.shard_partitions,
        TOPIC_JOBS: settings.turns_partitions,  # co-partitioned with turns: one worker owns a user's triggers
        TOPIC_COMMANDS: settings.turns_partitions,  # co-partitioned with turns: one writer applies a user's operations
        TOPIC_DEAD_LETTERS: 1,
        # Faust's partition assignor elects a leader through this topic; it may not declare topics itself here
        f"{WORKER_GROUP}-__assignor-__leader": 1,
    }


async def ensure_topics(bootstrap: str, settings: Settings, timeout: float = 60.0) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            await admin.start()
            break
        except KafkaError as exc:
            if asyncio.get_running_loop().time() > deadline:
                raise ServiceUnavailable(f"Kafka at {bootstrap} did not answer: {exc}") from exc
            await asyncio.sleep(0.5)
    try:
        existing = set(await admin.list_topics())
        wanted = topic_partitions(settings)
        new = [NewTopic(name, n, settings.topic_replication) for name, n in wanted.items() if name not in existing]
        if new:
            await admin.create_topics(new)
            log.info("created topics %s", ", ".join(f"{t.name}({t.num_partitions})" for t in new))
        have = await _partition_counts(admin, wanted, deadline)
        await _grow(admin, {name: n for name, n in wanted.items() if have[name] < n}, have, deadline)
        for name, n in wanted.items():
            if have[name] > n:
                log.warning(
                    "topic %s has %d partitions, settings ask for %d: the extra ones stay unused", name, have[name], n
                )
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, wanted: dict[str, int], deadline: float) -> dict[str, int]:
    """Partitions of each topic, once the broker's metadata shows every one of them (a topic created a moment ago,
    here or by another process starting at the same time, is described without partitions until then)."""
    while True:
        counts = {
            t["topic"]: len(t["partitions"])
            for t in await admin.describe_topics(list(wanted))
            if not t.get("error_code")
        }
        if all(counts.get(name, 0) > 0 for name in wanted):
            return counts
        if asyncio.get_running_loop().time() > deadline:
            missing = sorted(name for name in wanted if counts.get(name, 0) == 0)
            raise ServiceUnavailable(f"Kafka did not show the topics {', '.join(missing)} in time")
        await asyncio.sleep(0.2)


async def _grow(admin: AIOKafkaAdminClient, grow: dict[str, int], have: dict[str, int], deadline: float) -> None:
    """Grow a topic that has fewer partitions than the settings ask for (``session_shards`` raised on a running
    deployment): the API sends each session's tool results to the partition of its shard, and a partition that does
    not exist would refuse every one of them. Kafka cannot shrink a topic; one with more partitions than asked for
    works (the extra partitions stay unused by the shard routing), so the caller only logs it."""
    from aiokafka.admin import NewPartitions
    from aiokafka.errors import InvalidPartitionsError

    if not grow:
        return
    try:
        await admin.create_partitions({name: NewPartitions(total_count=n) for name, n in grow.items()})
    except InvalidPartitionsError:  # another process starting at the same time grew it first
        pass
    log.warning(
        "grew topics %s (sessions and users move to the partitions of their new shards)",
        ", ".join(f"{name} {have[name]}->{n}" for name, n in grow.items()),
    )
    while any(count < grow[name] for name, count in (await _partition_counts(admin, grow, deadline)).items()):
        if asyncio.get_running_loop().time() > deadline:  # the new partitions reach the metadata a moment later
            raise ServiceUnavailable(f"Kafka did not show the new partitions of {', '.join(grow)} in time")
        await asyncio.sleep(0.2)
