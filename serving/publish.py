"""Turns and tool results onto their topics, stamped with the tenant: one way for every front door (the
``/v1/turns`` and ``/v1/tool-results`` routes, the OpenAI-compatible proxy)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS
from mnemoflow.events import ToolResultEvent, ToolResultIn, TurnEvent, TurnIn
from mnemoflow.sharding import shard_for
from serving.bus import EventBus


async def publish_turns(bus: EventBus, tenant: str, turns: Sequence[TurnIn], now: datetime) -> int:
    """Turns keyed by tenant/user (one writer per user); returns once Kafka acknowledged every one."""
    events = [TurnEvent.from_input(tenant, t, now) for t in turns]
    await bus.publish(TOPIC_TURNS, [(e.key, e.model_dump_json().encode(), None) for e in events])
    return len(events)


async def publish_tool_results(
    bus: EventBus, partitions: int, tenant: str, results: Sequence[ToolResultIn], now: datetime
) -> int:
    """Each session's results go to the partition of the shard that owns the session."""
    events = [ToolResultEvent.from_input(tenant, r, now) for r in results]
    records = [(e.key, e.model_dump_json().encode(), shard_for(e.key, partitions)) for e in events]
    await bus.publish(TOPIC_TOOL_RESULTS, records)
    return len(events)
