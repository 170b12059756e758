"""Shards spread over the Ray nodes even when a node has just joined.

A node that just joined is alive in the GCS before the scheduling raylet has its resources: a soft node affinity
to it then falls back to another node. A clean-clone run under load put every shard of the local cluster on the
head that way; ``build_shards`` now creates a shard again until it lands on its node. This test starts the shards
right after the second node joins, the moment the race is likeliest (it reproduced on a quiet machine too)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from mnemoflow.config import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
    for attempt in (1, 2, 3):  # Ray gives a starting raylet a fixed 30 s to register, too little on a busy machine
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        cluster = Cluster(initialize_head=False)
        try:
            cluster.add_node(**node, include_dashboard=False)
            cluster.add_node(**node)
            break
        except Exception:
            cluster.shutdown()
            # A node whose start timed out is not in the cluster, so shutdown() leaves its processes running, and
            # its GCS holds the port the next attempt's GCS needs (seen: the retry then timed out on that port).
            for process in psutil.Process().children(recursive=True):
                if process.pid not in before:
                    with contextlib.suppress(psutil.Error):
                        process.kill()
            if attempt == 3:
                raise
    ray.init(address=cluster.address, namespace="placement-test", logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_shards_land_round_robin_on_the_nodes_and_a_second_build_keeps_them(two_nodes: Any, tmp_path: Path) -> None:
    import ray

    from actors.placement import _node_of, alive_nodes, build_shards, home_node

    settings = Settings(data_dir=tmp_path, session_shards=4, ray_namespace="placement-test")
    nodes = alive_nodes()
    assert len(nodes) == 2
    handles = build_shards(settings)
    placed = ray.get([h.__ray_call__.remote(_node_of) for h in handles])
    assert placed == [home_node(i, nodes) for i in range(4)] and set(placed) == set(nodes)
    pids = ray.get([h.__ray_call__.remote(lambda self: __import__("os").getpid()) for h in handles])

    again = build_shards(settings)  # the same named actors, not new ones
    assert ray.get([h.__ray_call__.remote(_node_of) for h in again]) == placed
    assert ray.get([h.__ray_call__.remote(lambda self: __import__("os").getpid()) for h in again]) == pids
