"""The Faust app: two batch agents that write L0 lines and offload entries, exactly once in effect.

Delivery is at least once (offsets are committed after a batch is handled); effects are idempotent by id in
the core writers, so a replay after a crash writes nothing twice. A batch that keeps failing is retried with
backoff and then parked on the dead-letter topic with the reason, never dropped, and never acknowledged before
it is handled: ``take_events`` acknowledges a batch when the agent asks for the next one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import faust

from mnemoflow.capture import parse_batch
from mnemoflow.config import TOPIC_DEAD_LETTERS, TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.events import ToolResultEvent, TurnEvent
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.offload.entries import OffloadWriter, SessionAppend
from mnemoflow.storage import LocalFileStore

log = logging.getLogger(__name__)
T = TypeVar("T")

ShardNotifier = Callable[[list[SessionAppend]], Awaitable[None]]


def faust_broker_url(bootstrap: str) -> str:
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap.split(","))


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


def build_app(settings: Settings, bootstrap: str, notify_shards: ShardNotifier | None = None) -> faust.App:
    """Faust app wired to the core writers. ``notify_shards`` hands new offload entries to the session actors."""
    app = faust.App(
        "mnemoflow",
        broker=faust_broker_url(bootstrap),
        store="memory://",
        web_enabled=False,
        topic_allow_declare=False,  # topics are created by streams.topics.ensure_topics with our partitions
        consumer_auto_offset_reset="earliest",
        broker_commit_interval=1.0,
        broker_session_timeout=settings.worker_session_timeout,
        broker_heartbeat_interval=min(3.0, settings.worker_session_timeout / 3),
        broker_rebalance_timeout=settings.worker_session_timeout,
        producer_acks=-1,
        stream_buffer_maxsize=max(4096, settings.worker_batch_size * 2),
        broker_max_poll_records=settings.worker_batch_size,
    )
    raw = {"key_serializer": "raw", "value_serializer": "raw"}
    turns = app.topic(TOPIC_TURNS, partitions=settings.turns_partitions, **raw)
    tool_results = app.topic(TOPIC_TOOL_RESULTS, partitions=settings.shard_partitions, **raw)
    dead_letters = app.topic(TOPIC_DEAD_LETTERS, partitions=1, **raw)

    files = LocalFileStore(settings.data_dir)
    l0 = L0Writer(files)
    offload = OffloadWriter(files)

    @app.on_partitions_revoked.connect
    async def _forget(app: faust.App, revoked: Any, **kwargs: Any) -> None:
        # Another worker may write these partitions' files now: never trust the id caches again.
        l0.forget()
        offload.forget()

    async def park(events: Sequence[Any], reason: str) -> None:
        for ev in events:
            record = {
                "topic": ev.message.topic,
                "partition": ev.message.partition,
                "offset": ev.message.offset,
                "key": (ev.key or b"").decode(errors="replace"),
                "value_b64": base64.b64encode(ev.value or b"").decode(),
                "reason": reason,
                "parked_at": datetime.now(UTC).isoformat(),
            }
            await dead_letters.send(key=ev.key, value=json.dumps(record).encode())
        log.error("parked %d events on %s: %s", len(events), TOPIC_DEAD_LETTERS, reason)

    async def handle(events: Sequence[Any], model: type[T], write: Callable[[list[T]], Any], what: str) -> Any:
        parsed = parse_batch(model, [ev.value or b"" for ev in events])
        for i, rejected in parsed.rejected:
            await park([events[i]], f"invalid {what} event: {rejected.reason}")
        if not parsed.events:
            return None
        try:
            return await with_retries(lambda: write(parsed.events), settings.worker_max_attempts, f"write {what}")
        except Exception as exc:
            valid = [ev for i, ev in enumerate(events) if i not in {j for j, _ in parsed.rejected}]
            await park(valid, f"{what} write failed after {settings.worker_max_attempts} tries: {exc}")
            return None

    @app.agent(turns, name="capture-turns")
    async def capture_turns(stream: faust.StreamT) -> None:
        async for events in stream.take_events(settings.worker_batch_size, within=settings.worker_batch_seconds):
            result = await handle(events, TurnEvent, l0.write, "turn")
            if result:
                log.debug("L0: wrote %d, skipped %d already applied", *result)

    @app.agent(tool_results, name="offload-tool-results")
    async def offload_tool_results(stream: faust.StreamT) -> None:
        async for events in stream.take_events(settings.worker_batch_size, within=settings.worker_batch_seconds):
            appended = await handle(events, ToolResultEvent, offload.write, "tool-result")
            if appended and notify_shards is not None:
                try:
                    await notify_shards(appended)
                except Exception as exc:  # the shard catches up from offload.jsonl when it next loads or syncs
                    log.warning("session shards not notified (%d sessions): %s", len(appended), exc)

    return app
