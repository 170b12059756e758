"""Faust, cut to what a batch consumer of raw bytes needs: the per-record costs a worker profile showed.

1. The aiokafka transport's consumer hands a fetched batch to the conductor in one task (below), and the records
   of a batch topic straight to its handler (:meth:`App.batch_agent`); the fetch's records are iterated as a list,
   not through faust's per-record async generator (``BatchDrainConsumer._deliver``), and acknowledged as one batch
   with one tracked record per partition (``BatchDrainConsumer._ack_batch``).
2. :class:`RawBytes` gives the handlers the record's bytes without faust's serializer registry (codec lookup,
   ``loads_key``/``loads_value`` dispatch: 6% of a worker's CPU for an identity function).
3. :class:`App` does not register faust's ``Monitor`` as a sensor: it kept per-event statistics (four callbacks
   per record, 3-5% of the CPU) that nothing reads here (the web views are off; lag comes from Kafka itself).
   The consumer still calls the monitor directly for end offsets and commits, as faust does.

Why: profiling a worker (``py-spy record`` on ``python -m streams.worker`` draining 50,000 turns) put 12.6% of its
CPU in ``Consumer._drain_messages`` -> ``Service.wait_first``: faust-streaming 0.15 wraps the delivery of every
single message in ``wait_first(callback(message), suspend_flow.wait())``, which creates four tasks (the delivery,
the suspend waiter, and the service's stopped and crashed waiters) and an ``asyncio.wait`` per record. The guard
exists so that a rebalance (``suspend_flow`` set) abandons a delivery blocked on a full stream queue.

Here the guard is kept and taken once per fetched batch instead: one task delivers the batch's messages in order,
and ``suspend_flow`` cancels it between messages, as it cancelled a single delivery before. What was delivered
keeps its read offset; what was not is fetched again from the committed offset after the rebalance, as before.
Everything else of ``_drain_messages`` (offset gaps, ``commit_every``, the read-offset check, the periodic yield to
the loop) is unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, ClassVar

import faust
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as aiokafka_driver
from faust.types import TP
from faust.types.transports import ConsumerT, TransportT
from faust.types.tuples import ack_lock
from mode import Service, ServiceT
from mode.utils.futures import notify

BatchHandler = Callable[[list[Any]], Awaitable[None]]
"""Takes a batch of faust ``Message`` records of one topic; returns once their effects are durable."""

_YIELD_EVERY = 100
"""Messages delivered between two yields to the event loop (faust's own figure), so heartbeats and the other
agents run while a large batch is delivered."""


class BatchDrainConsumer(aiokafka_driver.Consumer):
    _n_acked: int  # faust's acknowledgement count (typed here: faust's own modules are not type-checked)

    async def _drain_messages(self, fetcher: Service) -> None:  # pragma: no cover - runs inside a live consumer
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                await self.sleep(0)  # a fetch may return at once in a loop: give the loop a turn
                if not self.should_stop:
                    # Not raced against ``suspend_flow`` as faust races each record's callback: cancelling a
                    # delivery mid-fetch lost the fetch's records when the consumer thread's ``getmany`` answered
                    # after the rebalance had sought back (the position moved past records nobody handled, until
                    # the next rebalance: a tool result landed five minutes late in a cluster test). The fetch
                    # returns within its timeout, and the delivery stops at the first record once the flow is
                    # suspended.
                    await self._deliver(timeout=1.0)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.info("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)

    async def _deliver(self, timeout: float) -> None:
        """Fetch, then the body of faust's per-message loop, without the per-message ``wait_first``; records of a
        batch topic (:meth:`App.batch_agent`) are collected and handed to their handler once the fetch is iterated.

        The fetch is faust's ``getmany`` taken apart: its checks run per record in :meth:`_iterate`, as they ran
        before each record was yielded, but the records are not passed through an async generator (resumed per
        record: about a tenth of a worker's Python time in a profile), and a partition's end offset goes to the
        monitor once per fetch, not per record (it only feeds the monitor's statistics)."""
        records, active_partitions = await self._wait_next_records(timeout)
        if records is None or self.should_stop:
            return
        if not self.flow_active:
            self.log.dev("fetch while flow not active. Seek back to committed offsets.")
            try:
                await self.perform_seek()
            except Exception as exc:
                self.log.warning(f"exception performing seek when flow not active {exc}")
            return
        batch_handlers = getattr(self.app, "batch_handlers", {})
        collected: dict[str, list[Any]] = {}
        tracked: list[Any] = []
        try:
            await self._iterate(self.scheduler.iterate(records), active_partitions, collected, tracked, batch_handlers)
        except BaseException:
            # A rebalance cancels the delivery mid-fetch: the records collected but not yet handed to a handler are
            # neither handled nor acknowledged, and must not stay tracked, or the revocation's ``wait_empty`` waits
            # for them forever (seen in a clean-clone run). Not acknowledged, they are fetched again.
            self._untrack(tracked)
            raise
        if collected:
            # Shielded: a rebalance cancels the delivery, but a batch already handed to the writer finishes and is
            # acknowledged (the revocation waits for it), as an agent's batch in flight did.
            await asyncio.shield(self._handle_batches(collected, tracked, batch_handlers))

    def _untrack(self, tracked: list[Any]) -> None:
        for message in tracked:
            self._unacked_messages.discard(message)

    async def _iterate(
        self,
        records: Iterator[tuple[TP, Any]],
        active_partitions: set[TP] | None,
        collected: dict[str, list[Any]],
        tracked: list[Any],
        batch_handlers: dict[str, Any],
    ) -> None:
        """``tracked`` gets the first record of each partition that feeds a batch handler (see :meth:`_ack_batch`)."""
        app = self.app
        generation_id = app.consumer_generation_id
        to_message = self._to_message
        end_offset_tracked: set[TP] = set()
        batch_tracked: set[TP] = set()
        dropped: set[TP] = set()
        callback = self.callback
        read_offset = self._read_offset
        acks_enabled_for = app.topics.acks_enabled_for
        since_yield = 0
        for tp, record in records:
            # getmany's checks before each record: a rebalance or a paused flow ends the fetch's delivery here.
            if not self.flow_active:
                break
            if app.consumer_generation_id != generation_id:
                self.log.dev(
                    "Generation id changed from %r to %r. Cancelling getmany.",
                    generation_id,
                    app.consumer_generation_id,
                )
                break
            if not (active_partitions is None or tp in active_partitions or tp in self._buffered_partitions):
                continue
            if tp not in end_offset_tracked:
                end_offset_tracked.add(tp)
                app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            message = to_message(tp, record)
            since_yield += 1
            if since_yield > _YIELD_EVERY:
                await asyncio.sleep(0)
                since_yield = 0
            offset = message.offset
            last = read_offset[tp]
            if last is not None and offset < last:
                if tp not in dropped:  # once per partition and fetch: a record below the read offset is skipped
                    dropped.add(tp)
                    self.log.warning(
                        "skipping %s[%d] from offset %d: below the read offset %d (taken as already read)",
                        tp.topic,
                        tp.partition,
                        offset,
                        last,
                    )
                continue
            if last and offset - last > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, last + 1, offset)
            if self._commit_every is not None and self._n_acked >= self._commit_every:
                self._n_acked = 0
                await self.commit()
            if tp.topic in batch_handlers:
                if tp in batch_tracked:
                    self._on_message_in(tp, offset, message)  # track_message's sensor call, without the tracking
                else:  # a revocation waits until the handler acknowledged the batch
                    batch_tracked.add(tp)
                    self.track_message(message)
                    tracked.append(message)
                collected.setdefault(tp.topic, []).append(message)
            else:
                await callback(message)
            read_offset[tp] = offset

    async def _handle_batches(
        self, collected: dict[str, list[Any]], tracked: list[Any], handlers: dict[str, BatchHandler]
    ) -> None:
        try:
            for topic, messages in collected.items():
                await handlers[topic](messages)
                self._ack_batch(messages)
        finally:  # acknowledged, or the worker crashes on the error: nothing may wait for these records
            self._untrack(tracked)

    def _ack_batch(self, messages: list[Any]) -> None:
        """faust's :meth:`Consumer.ack` for one topic's records of a fetch, under one lock and one notify.

        Why: tracking and acknowledging each record (a ``WeakSet`` add and discard, the lock, the topic's ack
        setting, a notify) was 14% of a capture worker's CPU in a profile. A batch is acknowledged all at once, so
        one tracked record per partition holds a revocation's ``wait_empty`` exactly as long as tracking every
        record did; the offsets are recorded as faust records them, so commits are unchanged.
        """
        with ack_lock:
            enabled = self.app.topics.acks_enabled_for(messages[0].topic)
            committed_offsets, acked_index, acked = self._committed_offset, self._acked_index, self._acked
            n_acked = 0
            for message in messages:
                if message.acked:
                    continue
                message.acked = True
                if not enabled:
                    continue
                tp, offset = message.tp, message.offset
                committed, index = committed_offsets[tp], acked_index[tp]
                if (committed is None or offset >= committed) and offset not in index:
                    index.add(offset)
                    acked[tp].append(offset)
                    n_acked += 1
            self._n_acked += n_acked
            notify(self._waiting_for_ack)


class Transport(aiokafka_driver.Transport):
    Consumer: ClassVar[type[ConsumerT]] = BatchDrainConsumer


class RawBytes(faust.Schema):
    """Key and value as the record's bytes (what ``key_serializer="raw"`` gives, without the registry)."""

    def loads_key(self, app: faust.App, message: Any, *, loads: Any = None, serializer: Any = None) -> Any:
        return message.key

    def loads_value(self, app: faust.App, message: Any, *, loads: Any = None, serializer: Any = None) -> Any:
        return message.value


class App(faust.App):
    """A ``faust.App`` whose consumer transport is :class:`Transport` (the producer keeps faust's own), whose
    per-event monitor sensor is left out, and which can consume a topic as batches (:meth:`batch_agent`)."""

    batch_handlers: dict[str, BatchHandler]

    def batch_agent(self, topic: faust.TopicT, handler: BatchHandler) -> None:
        """Consume ``topic`` as batches of raw records: each fetch's records of the topic (up to
        ``broker_max_poll_records``) go to ``handler`` in partition order, and are acknowledged when it returns.

        Why not an agent: a faust agent's stream costs an event object, a queue hop, sensor calls and an ack per
        record (about a third of a capture worker's CPU in a profile); a capture handler wants the batch.
        """
        if not hasattr(self, "batch_handlers"):
            self.batch_handlers = {}
        self.batch_handlers[topic.get_topic_name()] = handler
        self.topics.add(topic)  # subscribed like an agent's topic

    def _new_transport(self) -> TransportT:
        return Transport(self.conf.broker_consumer, self)

    def on_init_dependencies(self) -> Iterable[ServiceT]:
        dependencies = super().on_init_dependencies()
        self.sensors.remove(self.monitor)
        return dependencies
