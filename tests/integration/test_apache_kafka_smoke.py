"""Smoke test: the embedded Apache Kafka broker (streams/broker_kafka.py) works end to end.

It proves the pieces the rest of the suite relies on: topic creation through the
admin API, idempotent-safe acks=all produce, and consumer-group reads that keep
per-key order across partitions.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.broker_kafka import EmbeddedKafka
from tests.services import apache_kafka_session

pytestmark = pytest.mark.integration

N_MESSAGES = 100
N_KEYS = 7
PARTITIONS = 3


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    """A broker for this module only, so the smoke test runs on its own."""
    yield from apache_kafka_session(tmp_path_factory)


async def _create_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name=topic, num_partitions=PARTITIONS, replication_factor=1)])
        described = await admin.describe_topics([topic])
        assert len(described[0]["partitions"]) == PARTITIONS
    finally:
        await admin.close()


async def _produce(bootstrap: str, topic: str) -> list[tuple[str, int]]:
    from aiokafka import AIOKafkaProducer

    sent: list[tuple[str, int]] = []
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for i in range(N_MESSAGES):
            key = f"key-{i % N_KEYS}"
            await producer.send_and_wait(topic, key=key.encode(), value=str(i).encode())
            sent.append((key, i))
    finally:
        await producer.stop()
    return sent


async def _consume(bootstrap: str, topic: str, group: str) -> list[tuple[str, int]]:
    from aiokafka import AIOKafkaConsumer

    got: list[tuple[str, int]] = []
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        async with asyncio.timeout(60):
            while len(got) < N_MESSAGES:
                batches = await consumer.getmany(timeout_ms=1000)
                for records in batches.values():
                    got.extend((r.key.decode(), int(r.value)) for r in records)
        await consumer.commit()
    finally:
        await consumer.stop()
    return got


def test_produce_and_consume_keeps_per_key_order(kafka: EmbeddedKafka) -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    group = f"smoke-group-{uuid.uuid4().hex[:8]}"

    asyncio.run(_create_topic(kafka.bootstrap, topic))
    sent = asyncio.run(_produce(kafka.bootstrap, topic))
    got = asyncio.run(_consume(kafka.bootstrap, topic, group))

    assert sorted(v for _, v in got) == list(range(N_MESSAGES))
    expected: dict[str, list[int]] = defaultdict(list)
    for key, value in sent:
        expected[key].append(value)
    actual: dict[str, list[int]] = defaultdict(list)
    for key, value in got:
        actual[key].append(value)
    assert actual == expected


async def _partitions(bootstrap: str, topic: str) -> int:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return len((await admin.describe_topics([topic]))[0]["partitions"])
    finally:
        await admin.close()


def test_topics_grow_with_the_session_shards_and_never_shrink(kafka: EmbeddedKafka, tmp_path: Path) -> None:
    """A stack started again with more session shards must get a tool-results partition for each shard: the API
    routes a session's results to its shard's partition, and a missing one refused them all (503)."""
    from mnemoflow.config import TOPIC_TOOL_RESULTS, Settings
    from streams.topics import ensure_topics

    def ensure(shards: int) -> int:
        settings = Settings(data_dir=tmp_path, kafka_bootstrap=kafka.bootstrap, session_shards=shards)
        asyncio.run(ensure_topics(kafka.bootstrap, settings))
        return asyncio.run(_partitions(kafka.bootstrap, TOPIC_TOOL_RESULTS))

    assert ensure(2) == 2
    assert ensure(4) == 4
    assert ensure(2) == 4  # Kafka cannot shrink a topic: the extra partitions stay, unused by the shard routing
