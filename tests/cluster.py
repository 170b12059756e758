"""The cluster shape on one host, out of real parts: the fixture of the scale-out tests and of ``bench/scale.py``.

What Kubernetes runs as pods runs here as processes, all on loopback:

* Apache Kafka (KRaft, the embedded broker's jars, fsync per batch as in production);
* Milvus Lite's server binary on a TCP port (the cluster shape talks to Milvus over the network);
* a Ray cluster of two nodes (Ray's own ``ray.cluster_utils.Cluster``: a head and a second raylet, each with a
  custom resource, ``head-node`` and ``second-node``, so that tests can say where something runs);
* the session shards (spread over the nodes) and the curators, owned by this process;
* Serve with the ``api`` and ``extractor`` deployments at N replicas each, one HTTP proxy on the head;
* N Faust workers in one consumer group, each a child process that can be killed and restarted on its own.

This module does not import pytest, so ``bench/`` can use it too (``with LocalCluster(root, shape) as c: ...``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemoflow.config import Settings
from streams.broker import free_port, spawn, stop_process, wait_for_port
from streams.broker_kafka import EmbeddedKafka, ensure_kafka_jars

log = logging.getLogger(__name__)

TENANT, KEY = "default", "cluster-key"
HEAD_RESOURCE, SECOND_RESOURCE = "head-node", "second-node"


@dataclass(frozen=True)
class ClusterShape:
    workers: int = 3
    api_replicas: int = 2
    extractor_replicas: int = 2
    session_shards: int = 4
    milvus: bool = True
    settings: dict[str, Any] = field(default_factory=dict)
    """Overrides of the stack's Settings (field names), e.g. ``{"l1_enabled": False}``."""


class MilvusLiteServer:
    """Milvus Lite's own server process (``milvus_lite.server.Server``) listening on a loopback TCP port, so that
    every process reaches one index over gRPC, as the cluster's Milvus is reached."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._server: Any = None
        self.uri = ""

    def start(self, timeout: float = 60.0) -> str:
        from milvus_lite.server import Server

        self.workdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self._server = Server(str(self.workdir / "atoms.db"), f"127.0.0.1:{port}")
        if not self._server.init() or not self._server.start():
            raise RuntimeError("Milvus Lite did not start (see its output above)")
        wait_for_port("127.0.0.1", port, timeout)
        self.uri = f"http://127.0.0.1:{port}"
        return self.uri

    @property
    def pid(self) -> int | None:
        proc = getattr(self._server, "_p", None)
        return proc.pid if proc is not None else None

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None


class LocalCluster:
    def __init__(self, root: Path, shape: ClusterShape | None = None) -> None:
        self.root = Path(root).resolve()
        self.shape = shape or ClusterShape()
        self.data_dir = self.root / "data"
        self.log_dir = self.root / "logs"
        self.kafka: EmbeddedKafka | None = None
        self.milvus: MilvusLiteServer | None = None
        self.ray_cluster: Any = None
        self.second_node: Any = None
        self.settings: Settings | None = None
        self.api_url = ""
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self._owned: list[Any] = []  # actor handles: the shards and curators live while this process holds them

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        from streams import ensure_topics

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.kafka = EmbeddedKafka(self.root / "kafka", ensure_kafka_jars(), heap_mb=384)
        bootstrap = self.kafka.start()
        milvus_uri = None
        if self.shape.milvus:
            self.milvus = MilvusLiteServer(self.root / "milvus")
            milvus_uri = self.milvus.start()
        ray_address = self._start_ray()
        self.settings = Settings(
            **{
                "data_dir": self.data_dir,
                "kafka_bootstrap": bootstrap,
                "ray_address": ray_address,
                "milvus_uri": milvus_uri,
                "session_shards": self.shape.session_shards,
                "api_keys": {TENANT: [KEY]},
                "api_port": free_port(),
                **self.shape.settings,
            }
        )
        asyncio.run(ensure_topics(bootstrap, self.settings))
        self._start_actors()
        self.api_url = self._start_serve(bootstrap)
        for index in range(self.shape.workers):
            self.start_worker(index)

    def _start_ray(self) -> str:
        """Two raylets on this host. Node liveness is checked every second (3 misses: dead), so that a killed node
        is declared dead in seconds, not Ray's default half minute."""
        from mnemoflow.cli.stack import one_machine_ray

        one_machine_ray()  # before ray is imported: both nodes on loopback
        import ray
        from ray.cluster_utils import Cluster

        node = {"num_cpus": 2, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
        self.ray_cluster = Cluster(
            initialize_head=True,
            head_node_args={
                **node,
                "resources": {HEAD_RESOURCE: 1},
                "include_dashboard": False,
                "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
            },
        )
        self.second_node = self.ray_cluster.add_node(**node, resources={SECOND_RESOURCE: 1})
        ray.init(
            address=self.ray_cluster.address, namespace="mnemoflow", logging_level=logging.WARNING, log_to_driver=False
        )
        # The second node is registered, but the scheduler may not see its resources yet (a loaded machine delays
        # the sync): a soft node affinity to it then falls back to the head, and every shard lands there (seen in
        # a clean-clone run). Actors are created once the cluster's resource view has both nodes.
        deadline = time.monotonic() + 120
        while not {HEAD_RESOURCE, SECOND_RESOURCE} <= set(ray.available_resources()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the scheduler never saw both nodes: {ray.available_resources()}")
            time.sleep(0.2)
        return str(self.ray_cluster.address)

    def _start_actors(self) -> None:
        from serving.builder import ensure_curators, ensure_shards

        assert self.settings is not None
        self._owned = ensure_shards(self.settings, detached=False) + ensure_curators(self.settings, detached=False)

    def _start_serve(self, bootstrap: str) -> str:
        from ray import serve

        from mnemoflow.cli.stack import wait_live
        from serving.builder import applications

        assert self.settings is not None
        port = self.settings.api_port
        # One proxy, on the head: a proxy per node would bind the same loopback port twice on this one host.
        serve.start(http_options={"host": "127.0.0.1", "port": port, "location": "HeadOnly"}, grpc_options={"port": 0})
        apps = applications(self.settings, bootstrap, self.shape.api_replicas, self.shape.extractor_replicas)
        for name, (app, prefix) in apps.items():
            serve.run(app, name=name, route_prefix=prefix)
        url = f"http://127.0.0.1:{port}"
        wait_live(url, timeout=120)
        return url

    def stop(self) -> None:
        for index in list(self.workers):
            self.stop_worker(index)
        if self.ray_cluster is not None:
            import ray
            from ray import serve

            try:
                serve.shutdown()
            except Exception as exc:  # noqa: BLE001 - stopping: say what failed, go on
                log.warning("serve shutdown: %s", exc)
            self._owned = []
            ray.shutdown()
            self.ray_cluster.shutdown()
            self.ray_cluster = None
        if self.milvus is not None:
            self.milvus.stop()
        if self.kafka is not None:
            self.kafka.stop()

    # -- workers -----------------------------------------------------------------------------------------------

    def start_worker(self, index: int) -> int:
        assert self.settings is not None
        # Each worker its own metrics port: on one host, a shared one would be served by the first worker only.
        env = {**os.environ, **self.settings.to_env(), "MNEMOFLOW_WORKER_METRICS_PORT": str(free_port())}
        cmd = [sys.executable, "-m", "streams.worker", "worker", "--loglevel", "warning"]
        self.workers[index] = spawn(cmd, self.log_dir / f"worker-{index}.log", env=env)
        return self.workers[index].pid

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        proc = self.workers.pop(index)
        proc.send_signal(sig)
        proc.wait(30)

    def stop_worker(self, index: int) -> None:
        stop_process(self.workers.pop(index), timeout=30)

    # -- Ray nodes and placement -------------------------------------------------------------------------------

    @property
    def second_node_id(self) -> str:
        return str(self.second_node.node_id)

    def raylet_pid(self) -> int:
        from ray._private import ray_constants

        return int(self.second_node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)

    def kill_second_raylet(self) -> None:
        """SIGKILL the second node's raylet: its workers (and the actors and replicas they host) die with it."""
        os.kill(self.raylet_pid(), signal.SIGKILL)

    def alive_nodes(self) -> set[str]:
        import ray

        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}

    def wait_node_dead(self, node_id: str, timeout: float = 60.0) -> float:
        started = time.monotonic()
        while node_id in self.alive_nodes():
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"node {node_id[:8]} still alive after {timeout:.0f} s")
            time.sleep(0.2)
        return time.monotonic() - started

    def actors(self, class_name: str) -> dict[str, dict[str, Any]]:
        """The live actors of a class by name, as the GCS sees them (``NodeID``, ``Pid``, ``NumRestarts``)."""
        from ray._private.state import state

        table = state.actor_table(None, actor_state_name="ALIVE")
        return {
            a["Name"]: {**a["Address"], "Pid": a["Pid"], "NumRestarts": a["NumRestarts"]}
            for a in table.values()
            if a["ActorClassName"] == class_name
        }

    def shard_nodes(self) -> dict[str, str]:
        """Which node each live session shard runs on, by shard name."""
        return {name: info["NodeID"] for name, info in self.actors("SessionShard").items()}

    def replica_pids(self, deployment: str) -> list[int]:
        """The process ids of a Serve deployment's replicas in this cluster (Ray's workers are children of their
        node's raylet; the process title names the replica)."""
        import psutil
        from ray._private import ray_constants

        raylets = {
            n.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
            for n in (self.ray_cluster.head_node, self.second_node)
        }
        tag = f"ray::ServeReplica:{'mnemoflow' if deployment == 'api' else deployment}:{deployment}"
        return sorted(
            p.pid
            for p in psutil.process_iter(["cmdline", "ppid"])
            if p.info["ppid"] in raylets and (p.info["cmdline"] or [""])[0].startswith(tag)
        )

    # -- helpers -----------------------------------------------------------------------------------------------

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {KEY}"}
