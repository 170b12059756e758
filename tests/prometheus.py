"""Prometheus text as samples, for the tests that scrape an endpoint and compare counters with what they did.

Ray's agent adds labels of its own (worker, node, session), so a series is matched on the labels a test names.
This module does not import pytest.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    text = httpx.get(url, timeout=10).text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(value for (n, have), value in samples.items() if n == name and want <= have)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def ray_metrics_url() -> str:
    """The metrics agent of the (one) alive node of the Ray this process is connected to."""
    import ray

    [node] = [n for n in ray.nodes() if n["Alive"]]
    return f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
