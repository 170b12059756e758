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
        kept = [name for name in wanted if name in existing]
        if kept:
            await _match_partitions(admin, {name: wanted[name] for name in kept}, deadline)
    finally:
        await admin.close()


async def _match_partitions(admin: AIOKafkaAdminClient, wanted: dict[str, int], deadline: float) -> None:
    """Grow a topic that has fewer partitions than the settings ask for (``session_shards`` raised on a running
    deployment): the API sends each session's tool results to the partition of its shard, and a partition that does
    not exist would refuse every one of them. Kafka cannot shrink a topic; one with more partitions than asked for
    works (the extra partitions stay unused by the shard routing), so it is only logged."""
    from aiokafka.admin import NewPartitions

    have = {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(list(wanted))}
    grow = {name: NewPartitions(total_count=n) for name, n in wanted.items() if have.get(name, n) < n}
    if grow:
        await admin.create_partitions(grow)
        log.warning("grew topics %s (sessions and users move to the partitions of their new shards)",
                    ", ".join(f"{name} {have[name]}->{p.total_count}" for name, p in grow.items()))  # fmt: skip
        while any(len(t["partitions"]) < wanted[t["topic"]] for t in await admin.describe_topics(list(grow))):
            if asyncio.get_running_loop().time() > deadline:  # the new partitions reach the metadata a moment later
                raise ServiceUnavailable(f"Kafka did not show the new partitions of {', '.join(grow)} in time")
            await asyncio.sleep(0.2)
    for name, n in wanted.items():
        if have.get(name, n) > n:
            log.warning("topic %s has %d partitions, settings ask for %d: the extra ones stay unused", name,
                        have[name], n)  # fmt: skip
