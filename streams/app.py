"""The Faust app: thin wiring from topics to the stream handlers of :mod:`mnemoflow.handlers`.

Each agent takes a batch, hands it to its handler and produces what the outcome lists (L1 jobs, dead letters)
before it asks for the next batch: ``take_events`` acknowledges a batch only then, so offsets are committed
after the batch's writes are durable (the handlers fsync them as one group commit) and its messages are sent.
Delivery is at least once; effects are idempotent by id in the core writers, so a replay writes nothing twice.

``mnemoflow.jobs`` has as many partitions as ``mnemoflow.turns`` and the same key, so Faust assigns a user's
turns and jobs to the same worker, which alone writes that user's trigger state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import faust

from mnemoflow.config import (
    TOPIC_COMMANDS,
    TOPIC_DEAD_LETTERS,
    TOPIC_JOBS,
    TOPIC_TOOL_RESULTS,
    TOPIC_TURNS,
    WORKER_GROUP,
    Settings,
)
from mnemoflow.governance.applier import ApplyOperation
from mnemoflow.handlers import (
    CommandsHandler,
    HandlerContext,
    L1Done,
    L1JobsHandler,
    L1Runner,
    Outcome,
    RawRecord,
    ShardNotifier,
    ToolResultsHandler,
    TurnsHandler,
    WriterThread,
)
from mnemoflow.handlers.retention import RetentionSweeper
from mnemoflow.memory.l1.schedule import L1Scheduler
from mnemoflow.ports import SystemClock
from mnemoflow.retry import RetryPolicy
from mnemoflow.sharding import user_key
from mnemoflow.storage import LocalFileStore
from mnemoflow.tracing import Tracing
from streams.faust_transport import App, RawBytes
from streams.metrics import FetchStalls, WorkerMetrics
from streams.topics import keyed_partition

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 5.0
"""How often the consumer lag per partition is measured (a position look-up per assigned partition)."""


def faust_broker_url(bootstrap: str) -> str:
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap.split(","))


def raw_record(message: Any) -> RawRecord:
    """A faust ``Message`` (a batch topic's record, or an agent event's ``message``) as a RawRecord."""
    return RawRecord(message.value or b"", message.key, message.topic, message.partition, message.offset)


def traced_record(message: Any) -> RawRecord:
    """:func:`raw_record` with the record's headers (the trace context), read only when tracing is on."""
    return RawRecord(
        message.value or b"", message.key, message.topic, message.partition, message.offset, message.headers
    )


def build_app(
    settings: Settings,
    bootstrap: str,
    notify_shards: ShardNotifier | None = None,
    run_l1: L1Runner | None = None,
    l1_done: L1Done | None = None,
    apply_operation: ApplyOperation | None = None,
    metrics: WorkerMetrics | None = None,
    tracing: Tracing | None = None,
) -> faust.App:
    """Faust app wired to the core. The callables reach the Ray actors and Serve deployments (None: not wired).
    ``metrics`` is counted whether or not anything serves it (the worker process does, on loopback). ``tracing``
    None: no span is made and no record header read."""
    metrics = metrics if metrics is not None else WorkerMetrics()
    app = App(
        WORKER_GROUP,  # the app id is the consumer group (health, KEDA and the assignor topic name it)
        broker=faust_broker_url(bootstrap),
        store="memory://",
        datadir=str(settings.data_dir / "faust"),  # not the folder the worker happened to start in
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
    raw = {"schema": RawBytes(key_serializer="raw", value_serializer="raw")}
    turns = app.topic(TOPIC_TURNS, partitions=settings.turns_partitions, **raw)
    tool_results = app.topic(TOPIC_TOOL_RESULTS, partitions=settings.shard_partitions, **raw)
    jobs = app.topic(TOPIC_JOBS, partitions=settings.turns_partitions, **raw)
    commands = app.topic(TOPIC_COMMANDS, partitions=settings.turns_partitions, **raw)
    out = {TOPIC_JOBS: jobs, TOPIC_DEAD_LETTERS: app.topic(TOPIC_DEAD_LETTERS, partitions=1, **raw)}

    ctx = HandlerContext(
        SystemClock(), RetryPolicy(attempts=settings.worker_max_attempts), WriterThread(), tracing=tracing
    )
    to_record = raw_record if tracing is None else traced_record
    files = LocalFileStore(settings.data_dir, fsync=settings.fsync_files)
    scheduler = L1Scheduler(files, checkpoint_s=settings.l1_trigger_checkpoint_seconds)
    schedule_l1 = settings.l1_enabled and run_l1 is not None
    on_turns = TurnsHandler(ctx, files, scheduler if schedule_l1 else None)
    on_tool_results = ToolResultsHandler(ctx, files, notify_shards)
    on_commands = CommandsHandler(ctx, files, apply_operation, l1_done)

    async def produce(outcome: Outcome) -> None:
        """Send what the outcome lists and wait until Kafka acknowledged each message: the batch's offsets are
        committed after this returns, so a parked record or a job must not live only in the producer's buffer."""
        pending = [await out[m.topic].send(key=m.key, value=m.value, headers=m.headers) for m in outcome.messages()]
        await asyncio.gather(*pending)
        metrics.produced(outcome)
        for dead in outcome.parked:
            log.error("parked %s[%s]@%s key=%s: %s", dead.topic, dead.partition, dead.offset, dead.key, dead.reason)

    on_jobs = L1JobsHandler(ctx, scheduler, run_l1, l1_done, report=produce)
    adopting: set[asyncio.Task[int]] = set()

    @app.on_partitions_assigned.connect
    async def _adopt(app: faust.App, assigned: Any, **kwargs: Any) -> None:
        # The users of the turns partitions this worker owns now: its passes for users it kept settle, the others
        # are left to their new owners; idle and retry wake-ups, and passes a previous owner left running, come
        # back from the trigger states (beside the stream, not in the way of the rebalance).
        if run_l1 is None:
            return
        mine = {tp.partition for tp in assigned if tp.topic == TOPIC_TURNS}
        n = app.consumer.topic_partitions(TOPIC_TURNS) or settings.turns_partitions
        task = asyncio.ensure_future(
            on_jobs.adopt(lambda tenant, user: keyed_partition(user_key(tenant, user).encode(), n) in mine)
        )
        adopting.add(task)
        task.add_done_callback(adopting.discard)

    @app.on_partitions_revoked.connect
    async def _forget(app: faust.App, revoked: Any, **kwargs: Any) -> None:
        # Another worker may own these partitions' users and sessions now: the writers drop their caches, the
        # jobs handler checkpoints and waits for the assignment to know which of its users it kept.
        for handler in (on_turns, on_tool_results, on_jobs):
            await handler.forget()

    @app.on_before_shutdown.connect
    async def _flush(app: faust.App, **kwargs: Any) -> None:
        await on_jobs.flush()

    async def handled(
        topic: str, records: Sequence[Any], handle: Callable[[list[RawRecord]], Awaitable[Outcome]]
    ) -> None:
        """Handle a batch, produce its outcome, and count both (the latency includes the produce's acks)."""
        started = time.perf_counter()
        outcome = await handle([to_record(r) for r in records])
        await produce(outcome)
        metrics.batch(topic, len(records), outcome, time.perf_counter() - started)

    async def capture_turns(messages: list[Any]) -> None:
        await handled(TOPIC_TURNS, messages, on_turns.handle)

    async def offload_tool_results(messages: list[Any]) -> None:
        await handled(TOPIC_TOOL_RESULTS, messages, on_tool_results.handle)

    app.batch_agent(turns, capture_turns)
    app.batch_agent(tool_results, offload_tool_results)

    @app.agent(jobs, name="run-l1-jobs")
    async def run_jobs(stream: faust.StreamT) -> None:
        async for events in stream.take_events(64, within=0.2):
            await handled(TOPIC_JOBS, [ev.message for ev in events], on_jobs.handle)

    @app.agent(commands, name="apply-operations")
    async def apply_operations(stream: faust.StreamT) -> None:
        async for events in stream.take_events(64, within=0.05):
            await handled(TOPIC_COMMANDS, [ev.message for ev in events], on_commands.handle)

    stalls = FetchStalls()

    @app.timer(interval=LAG_INTERVAL_S)
    async def measure_lag() -> None:
        consumer = app.consumer
        positions: dict[tuple[str, int], tuple[int, int]] = {}
        try:
            for tp in consumer.assignment():
                high, position = consumer.highwater(tp), await consumer.position(tp)
                if high is not None and position is not None:
                    positions[(tp.topic, tp.partition)] = (position, max(0, high - position))
        except Exception as exc:  # noqa: BLE001 - a rebalance took a partition mid-walk: the next tick measures
            log.debug("consumer lag not measured: %s", exc)
            return
        metrics.set_lag({tp: lag for tp, (_, lag) in positions.items()})
        for stall in stalls.observe(positions, time.monotonic()):
            log.warning("not fetching %s", stall)

    if settings.retention:
        sweeper = RetentionSweeper(ctx, files, settings.retention)

        @app.timer(interval=settings.retention_sweep_seconds)
        async def sweep_retention() -> None:
            await sweeper.run()

    if schedule_l1:

        @app.timer(interval=settings.l1_tick_seconds)
        async def fire_due_triggers() -> None:
            await produce(await on_jobs.tick())

    return app
