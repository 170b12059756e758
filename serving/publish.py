"""Turns and tool results onto their topics, stamped with the tenant: one way for every front door (the
``/v1/turns`` and ``/v1/tool-results`` routes, the OpenAI-compatible proxy)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS
from mnemoflow.events import ToolResultEvent, ToolResultIn, TurnEvent, TurnIn
from mnemoflow.sharding import shard_for
from serving.bus import EventBus, Headers


async def publish_turns(
    bus: EventBus, tenant: str, turns: Sequence[TurnIn], now: datetime, headers: Headers | None = None
) -> int:
    """Turns keyed by tenant/user (one writer per user); returns once Kafka acknowledged every one. ``headers``
    (tracing on): the request's trace context, on every record."""
    events = [TurnEvent.from_input(tenant, t, now) for t in turns]
    records = [(e.key, e.model_dump_json().encode(), None) for e in events]
    await bus.publish(TOPIC_TURNS, records, headers)
    return len(events)


async def publish_tool_results(
    bus: EventBus,
    partitions: int,
    tenant: str,
    results: Sequence[ToolResultIn],
    now: datetime,
    headers: Headers | None = None,
) -> int:
    """Each session's results go to the partition of the shard that owns the session."""
    events = [ToolResultEvent.from_input(tenant, r, now) for r in results]
    records = [(e.key, e.model_dump_json().encode(), shard_for(e.key, partitions)) for e in events]
    await bus.publish(TOPIC_TOOL_RESULTS, records, headers)
    return len(events)
