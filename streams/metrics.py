"""Prometheus metrics of one Faust worker, read from the typed outcomes the handlers return.

Why here and not in the handlers: the core stays runtime-free; an outcome already says what a batch did, so the
wiring counts it after it has produced the outcome's messages. One registry per worker (not prometheus_client's
global one), served on loopback by :func:`serve_metrics`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from mnemoflow.handlers import JobsOutcome, Outcome, ToolResultsOutcome, TurnsOutcome

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BatchTally:
    """What one batch of ``consumed`` records of a topic came to. ``dead`` counts the batch's own records parked
    (a job the L1 handler parks after failed passes is not one of its records, but is counted too: it went to
    the dead letters from this topic)."""

    applied: int
    skipped: int
    dead: int


def tally(consumed: int, outcome: Outcome) -> BatchTally:
    """Turns say what they wrote and skipped; tool results what entries they added (the rest were known ids or
    an erased session's); jobs and operations count a record applied unless it was parked."""
    dead = len(outcome.parked)
    if isinstance(outcome, TurnsOutcome):
        return BatchTally(outcome.written, outcome.skipped, dead)
    if isinstance(outcome, ToolResultsOutcome):
        applied = sum(len(append.new_entries) for append in outcome.appended)
        return BatchTally(applied, max(0, consumed - applied - dead), dead)
    return BatchTally(max(0, consumed - dead), 0, dead)


class WorkerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.consumed = Counter(
            "mnemoflow_worker_events_consumed", "Records handed to a handler", ["topic"], registry=r
        )
        self.applied = Counter(
            "mnemoflow_worker_events_applied", "Records whose effect was written", ["topic"], registry=r
        )
        self.skipped = Counter(
            "mnemoflow_worker_events_skipped",
            "Records already applied (re-deliveries, known ids, erased users)",
            ["topic"],
            registry=r,
        )
        self.dead = Counter(
            "mnemoflow_worker_events_dead_lettered", "Records parked on mnemoflow.dead-letters", ["topic"], registry=r
        )
        self.batch_seconds = Histogram(
            "mnemoflow_worker_batch_seconds",
            "A batch from its handler's start to its outcome produced",
            ["topic"],
            registry=r,
        )
        self.jobs_published = Counter("mnemoflow_worker_l1_jobs_published", "L1 jobs put on mnemoflow.jobs", registry=r)
        self.l1_runs = Counter(
            "mnemoflow_worker_l1_runs", "L1 passes the job handler ran, by result", ["result"], registry=r
        )
        self.lag = Gauge(
            "mnemoflow_worker_consumer_lag",
            "Records in an assigned partition past this worker's fetch position (highwater - position)",
            ["topic", "partition"],
            registry=r,
        )

    def batch(self, topic: str, consumed: int, outcome: Outcome, seconds: float) -> None:
        counts = tally(consumed, outcome)
        self.consumed.labels(topic).inc(consumed)
        self.applied.labels(topic).inc(counts.applied)
        self.skipped.labels(topic).inc(counts.skipped)
        self.dead.labels(topic).inc(counts.dead)
        self.batch_seconds.labels(topic).observe(seconds)

    def produced(self, outcome: Outcome) -> None:
        """Jobs published (by any handler or the trigger timer) and the results of the L1 passes run."""
        self.jobs_published.inc(len(outcome.jobs))
        runs = outcome.runs.values() if isinstance(outcome, JobsOutcome) else ()
        for replies in runs:
            for reply in replies:
                self.l1_runs.labels("ok" if reply.ok else "failed").inc()

    def set_lag(self, lags: dict[tuple[str, int], int]) -> None:
        """The lag of the partitions assigned now; partitions handed to another worker disappear."""
        self.lag.clear()
        for (topic, partition), lag in lags.items():
            self.lag.labels(topic, str(partition)).set(lag)


def serve_metrics(metrics: WorkerMetrics, host: str, port: int) -> int | None:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; the port bound, or None (``port`` 0, or taken).

    A port already taken (a second worker on one host with the same setting) is logged, not fatal: the worker's
    job is the stream, and metrics are not worth stopping it for.
    """
    if not port:
        return None
    try:
        server, _ = start_http_server(port, addr=host, registry=metrics.registry)
    except OSError as exc:
        log.error("worker metrics not served on %s:%d: %s", host, port, exc)
        return None
    bound = int(server.server_address[1])
    log.info("worker metrics on http://%s:%d/metrics", host, bound)
    return bound


STALL_S = 30.0
"""How long an assigned partition may have records past its position without the position moving before the
worker says so in its log."""


class FetchStalls:
    """Partitions whose consumer position stands still while records wait past it: a worker that stopped
    fetching a partition it owns looks healthy in every other way (seen after rebalances under load, issue 9)."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self._stall_s = stall_s
        self._since: dict[tuple[str, int], tuple[int, float]] = {}
        self._told: set[tuple[str, int]] = set()

    def observe(self, positions: dict[tuple[str, int], tuple[int, int]], now: float) -> list[str]:
        """``positions``: by partition, (position, records past it). Returns what to log, once per stall."""
        said = []
        for tp, (position, lag) in positions.items():
            seen = self._since.get(tp)
            if lag <= 0 or seen is None or seen[0] != position:
                self._since[tp] = (position, now)
                self._told.discard(tp)
            elif now - seen[1] >= self._stall_s and tp not in self._told:
                self._told.add(tp)
                said.append(
                    f"{tp[0]}[{tp[1]}]: {lag} records past position {position}, which has not moved for "
                    f"{now - seen[1]:.0f} s"
                )
        for tp in set(self._since) - set(positions):  # partitions handed to another worker
            del self._since[tp]
            self._told.discard(tp)
        return said
