"""``python -m streams.worker``: one Faust worker process, configured from ``MNEMOFLOW_*`` settings.

The stack launcher starts it as a child process with the broker's bootstrap and the Ray address in the
environment, so it can be killed and restarted on its own (the integration tests SIGKILL it).
"""

from __future__ import annotations

import gc
import logging

import faust

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.tracing import setup_tracing
from streams.app import build_app
from streams.metrics import WorkerMetrics, serve_metrics

YOUNG_GC_THRESHOLD = 10_000
"""Net allocations between two young collections (Python's default: 700)."""


class Worker(faust.Worker):
    async def on_startup_finished(self) -> None:
        """Once started, the garbage collector is tuned for a process that allocates a few objects per record,
        nearly all freed at once by reference counting. Measured on a worker draining 50,000 turns, garbage
        collection was a fifth of its CPU:

        * everything alive so far (modules, faust's and Ray's services, the app) is moved out of the collector's
          reach (``gc.freeze``): each full collection walked all of it, ~150 ms a time;
        * young collections run every 10,000 net allocations instead of 700: ~460 of them per 50,000 records
          (with the middle generation's they took 0.17 s), 2 after.

        Cyclic garbage is still collected, later; what the records allocate stays collectable."""
        await super().on_startup_finished()
        gc.freeze()
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])


def main() -> None:
    settings = Settings()
    if not settings.kafka_bootstrap:
        raise ConfigError("the worker needs MNEMOFLOW_KAFKA_BOOTSTRAP (the stack launcher sets it)")
    notify = run_l1 = l1_done = apply_operation = None
    if settings.ray_address:
        from actors import CuratorClient, connect_shards
        from serving.extractor import ExtractorClient

        notify = connect_shards(settings).notify
        extractor = ExtractorClient()
        run_l1, apply_operation = extractor.run, extractor.apply_operation
        l1_done = CuratorClient(settings.curator_shards, settings.ray_namespace).after_l1
    metrics = WorkerMetrics()
    tracing = setup_tracing(settings, "worker")
    app = build_app(settings, settings.kafka_bootstrap, notify, run_l1, l1_done, apply_operation, metrics, tracing)
    logging.getLogger("mnemoflow").setLevel(logging.INFO)
    serve_metrics(metrics, settings.worker_metrics_host, settings.worker_metrics_port)
    worker = Worker(app, loglevel="WARNING", override_logging=True)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
