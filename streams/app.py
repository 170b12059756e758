"""The Faust app: batch agents that write L0 lines and offload entries, schedule L1 and run its jobs.

Delivery is at least once (offsets are committed after a batch is handled); effects are idempotent by id in
the core writers, so a replay after a crash writes nothing twice. A batch that keeps failing is retried with
backoff and then parked on the dead-letter topic with the reason, never dropped, and never acknowledged before
it is handled: ``take_events`` acknowledges a batch when the agent asks for the next one.

``mnemoflow.jobs`` has as many partitions as ``mnemoflow.turns`` and the same key, so Faust assigns a user's
turns and jobs to the same worker, which alone writes that user's trigger state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import faust

from mnemoflow.capture import parse_batch
from mnemoflow.config import TOPIC_DEAD_LETTERS, TOPIC_JOBS, TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.events import ToolResultEvent, TurnEvent
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.memory.l1_schedule import L1Job, L1Scheduler
from mnemoflow.offload.entries import OffloadWriter, SessionAppend
from mnemoflow.storage import LocalFileStore
from streams.handling import Parker, with_retries

log = logging.getLogger(__name__)
T = TypeVar("T")

ShardNotifier = Callable[[list[SessionAppend]], Awaitable[None]]
L1Runner = Callable[[str, str], Awaitable[dict[str, Any]]]
"""Runs one user's L1 pass (the extractor deployment); returns ``{"ok": bool, "error"?: str, ...}``."""
L1Done = Callable[[str, str], Awaitable[None]]
"""Told after a successful L1 pass (the user's curator schedules L2/L3)."""


def faust_broker_url(bootstrap: str) -> str:
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap.split(","))


def build_app(
    settings: Settings,
    bootstrap: str,
    notify_shards: ShardNotifier | None = None,
    run_l1: L1Runner | None = None,
    l1_done: L1Done | None = None,
) -> faust.App:
    """Faust app wired to the core. The callables reach the Ray actors and Serve deployments (None: not wired)."""
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
    jobs = app.topic(TOPIC_JOBS, partitions=settings.turns_partitions, **raw)
    park = Parker(app.topic(TOPIC_DEAD_LETTERS, partitions=1, **raw))

    files = LocalFileStore(settings.data_dir)
    l0 = L0Writer(files)
    offload = OffloadWriter(files)
    scheduler = L1Scheduler(files)
    schedule_l1 = settings.l1_enabled and run_l1 is not None

    @app.on_partitions_revoked.connect
    async def _forget(app: faust.App, revoked: Any, **kwargs: Any) -> None:
        # Another worker may own these partitions' users and sessions now: never trust the caches again.
        l0.forget()
        offload.forget()
        scheduler.forget()

    async def handle(
        events: Sequence[Any], model: type[T], write: Callable[[list[T]], Any], what: str
    ) -> tuple[list[T], Any]:
        """Parse (parking what never parses), write with retries (parking what keeps failing).

        Returns the parsed events and what ``write`` returned (None when nothing was written)."""
        parsed = parse_batch(model, [ev.value or b"" for ev in events])
        for i, rejected in parsed.rejected:
            await park([events[i]], f"invalid {what} event: {rejected.reason}")
        if not parsed.events:
            return [], None
        try:
            result = await with_retries(lambda: write(parsed.events), settings.worker_max_attempts, f"write {what}")
            return parsed.events, result
        except Exception as exc:
            bad = {i for i, _ in parsed.rejected}
            valid = [ev for i, ev in enumerate(events) if i not in bad]
            await park(valid, f"{what} write failed after {settings.worker_max_attempts} tries: {exc}")
            return [], None

    async def publish(new_jobs: list[L1Job]) -> None:
        for job in new_jobs:
            await jobs.send(key=job.key.encode(), value=job.model_dump_json().encode())

    @app.agent(turns, name="capture-turns")
    async def capture_turns(stream: faust.StreamT) -> None:
        async for events in stream.take_events(settings.worker_batch_size, within=settings.worker_batch_seconds):
            written, result = await handle(events, TurnEvent, l0.write, "turn")
            if result and schedule_l1:
                await publish(scheduler.on_turns(written, datetime.now(UTC)))

    @app.agent(tool_results, name="offload-tool-results")
    async def offload_tool_results(stream: faust.StreamT) -> None:
        async for events in stream.take_events(settings.worker_batch_size, within=settings.worker_batch_seconds):
            _, appended = await handle(events, ToolResultEvent, offload.write, "tool-result")
            if appended and notify_shards is not None:
                try:
                    await notify_shards(appended)
                except Exception as exc:  # the shard catches up from offload.jsonl when it next syncs or reads
                    log.warning("session shards not notified (%d sessions): %s", len(appended), exc)

    @app.agent(jobs, name="run-l1-jobs")
    async def run_jobs(stream: faust.StreamT) -> None:
        async for events in stream.take_events(64, within=0.2):
            if run_l1 is None:
                await park(events, "no extractor is wired to this worker")
                continue
            parsed = parse_batch(L1Job, [ev.value or b"" for ev in events])
            for i, rejected in parsed.rejected:
                await park([events[i]], f"invalid job: {rejected.reason}")
            due = scheduler.runs_for(parsed.events, datetime.now(UTC))
            while due:  # catch-up runs (turns that arrived during a run) follow at once
                due = await _run_all(due)

    async def _run_all(due: dict[tuple[str, str], L1Job]) -> dict[tuple[str, str], L1Job]:
        assert run_l1 is not None
        results = await asyncio.gather(*(run_l1(t, u) for t, u in due), return_exceptions=True)
        follow: dict[tuple[str, str], L1Job] = {}
        for (tenant, user), result in zip(due, results, strict=True):
            if isinstance(result, BaseException):
                error: str | None = f"{type(result).__name__}: {result}"
            else:
                error = None if result.get("ok") else str(result.get("error"))
            job, dead = scheduler.on_result(tenant, user, datetime.now(UTC), error)
            if error:
                log.warning("L1 for %s/%s failed: %s", tenant, user, error)
            if dead:
                await park.record(f"{tenant}/{user}", due[(tenant, user)].model_dump_json(), f"L1 gave up: {dead}")
            if job is not None:
                follow[(tenant, user)] = job
            if error is None and l1_done is not None:
                try:
                    await l1_done(tenant, user)
                except Exception as exc:  # the curator also wakes on its own timer; L2 is late, not lost
                    log.warning("curator not told about %s/%s: %s", tenant, user, exc)
        return follow

    if schedule_l1:

        @app.timer(interval=settings.l1_tick_seconds)
        async def fire_due_triggers() -> None:
            await publish(scheduler.due(datetime.now(UTC)))

    return app
