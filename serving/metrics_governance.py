"""Erasures and expiries in ``/metrics``, read from the files at scrape time.

Why from the files: erasures are applied in the extractor deployment and expiries by the stream workers, not in
the API process; the tombstones and ``retention.json`` they leave are the record, so every API replica reports
the same numbers without a shared counter.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from mnemoflow.config import SERVICE_DIRS
from mnemoflow.governance.retention import Expired, read_totals
from mnemoflow.storage import LocalFileStore


class GovernanceCollector(Collector):
    def __init__(self, files: LocalFileStore) -> None:
        self._files = files

    def collect(self) -> Iterator[GaugeMetricFamily]:
        erased = GaugeMetricFamily(
            "mnemoflow_erased", "Users and sessions erased (tombstones kept)", labels=["tenant", "kind"]
        )
        expired = GaugeMetricFamily(
            "mnemoflow_expired", "Raw data removed by the retention sweep, since the start", labels=["tenant", "kind"]
        )
        for tenant in self._files.list_dir(""):
            if tenant in SERVICE_DIRS or not self._files.list_dir(tenant):
                continue
            for kind in ("users", "sessions"):
                erased.add_metric([tenant, kind], len(self._files.list_dir(f"{tenant}/tombstones/{kind}")))
            totals = read_totals(self._files, tenant)
            for kind in Expired.model_fields:
                expired.add_metric([tenant, kind], getattr(totals, kind))
        yield erased
        yield expired
