"""Create mnemoflow's topics before any worker or producer uses them (idempotent)."""

from __future__ import annotations

import asyncio
import logging

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
    finally:
        await admin.close()
