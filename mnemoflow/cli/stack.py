"""Start and stop the whole running stack: broker, topics, Ray, session shards, Serve API, Faust worker.

This is the one place that starts runtimes; it imports ``streams``, ``actors`` and ``serving`` inside its
methods so that importing mnemoflow stays free of them. The CLI's ``up`` and the integration tests use it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from pydantic import SecretStr

from mnemoflow.config import Settings
from mnemoflow.errors import ServiceUnavailable

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"


@dataclass(frozen=True)
class StackInfo:
    bootstrap: str
    embedded_broker: bool
    ray_address: str
    api_url: str
    data_dir: Path
    worker_pid: int | None


def ensure_api_key(settings: Settings) -> Settings:
    """With no keys configured, use (or create) one for tenant 'default', kept in ``<data_dir>/api-key``."""
    if settings.api_keys:
        return settings
    path = settings.data_dir / "api-key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(24) + "\n")
        path.chmod(0o600)
    key = path.read_text().strip()
    return settings.model_copy(update={"api_keys": {DEFAULT_TENANT: [SecretStr(key)]}})


class Stack:
    def __init__(self, settings: Settings) -> None:
        self.settings = ensure_api_key(settings.model_copy(update={"data_dir": settings.data_dir.resolve()}))
        self.log_dir = self.settings.data_dir / "logs"
        self._broker = None
        self._worker: subprocess.Popen[bytes] | None = None
        self._own_ray = False
        self.shards: list[object] = []
        self.curators: list[object] = []
        self.info: StackInfo | None = None

    def start(self) -> StackInfo:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            bootstrap = self._start_broker()
            ray_address = self._start_ray()
            self._start_actors()
            api_url = self._start_serve(bootstrap)
            self.settings = self.settings.model_copy(update={"kafka_bootstrap": bootstrap, "ray_address": ray_address})
            self.start_worker()
        except BaseException:
            self.stop()
            raise
        self.info = StackInfo(
            bootstrap, self._broker is not None, ray_address, api_url, self.settings.data_dir, self.worker_pid
        )
        return self.info

    def _start_broker(self) -> str:
        from streams import EmbeddedBroker, ensure_topics

        bootstrap = self.settings.kafka_bootstrap
        if not bootstrap:
            self._broker = EmbeddedBroker(self.settings.embedded_broker_port, log_file=self.log_dir / "broker.log")
            bootstrap = self._broker.start()
        asyncio.run(ensure_topics(bootstrap, self.settings))
        return bootstrap

    def _start_ray(self) -> str:
        import ray

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Ray 2.60 turns token auth on by default
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # Ray runs its workers at nice 15; our actors and Serve replicas are the service, not background work.
        os.environ.setdefault("RAY_worker_niceness", "0")
        if not ray.is_initialized():
            if self.settings.ray_address:
                ray.init(address=self.settings.ray_address, namespace=self.settings.ray_namespace)
            else:
                self._own_ray = True
                start_local_ray(self.settings.ray_namespace)
        return str(ray.get_runtime_context().gcs_address)

    def _start_actors(self) -> None:
        from datetime import timedelta

        from actors import build_curators, build_shards, llm_factory
        from mnemoflow.memory.l2_schedule import L2Timing

        s = self.settings
        self.shards = build_shards(s)  # the driver owns them: they live while it holds the handles
        timing = L2Timing(
            delay_after_l1=timedelta(seconds=s.l2_delay_after_l1_seconds),
            min_interval=timedelta(seconds=s.l2_min_interval_seconds),
            max_interval=timedelta(seconds=s.l2_max_interval_seconds),
        )
        self.curators = build_curators(
            s.curator_shards, s.data_dir, s.ray_namespace, tick_seconds=s.curator_tick_seconds, timing=timing,
            llm_factory=llm_factory(s),
        )  # fmt: skip

    def _start_serve(self, bootstrap: str) -> str:
        from ray import serve

        from serving.app import build_app
        from serving.extractor import build_extractor_app
        from streams.broker import free_port

        port = self.settings.api_port or free_port(self.settings.api_host)
        serve.start(http_options={"host": self.settings.api_host, "port": port})
        if self.settings.llm_engine != "heuristic":
            from serving.llm import build_llm_app

            serve.run(build_llm_app(self.settings), name="llm", route_prefix=None)
        serve.run(build_extractor_app(self.settings), name="extractor", route_prefix=None)
        serve.run(build_app(self.settings, bootstrap), name="mnemoflow", route_prefix="/")
        url = f"http://{self.settings.api_host}:{port}"
        _wait_healthy(url, timeout=60)
        return url

    def start_worker(self) -> None:
        """Start (or restart) the Faust worker as a child process; its log is ``logs/worker.log``."""
        env = {**os.environ, **self.settings.to_env()}
        out = (self.log_dir / "worker.log").open("ab")
        cmd = [sys.executable, "-m", "streams.worker", "worker", "--loglevel", "warning"]
        self._worker = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        log.info("faust worker pid=%d", self._worker.pid)

    def kill_worker(self, sig: int = signal.SIGKILL) -> None:
        if self._worker is not None:
            self._worker.send_signal(sig)
            try:
                self._worker.wait(30)
            except subprocess.TimeoutExpired:
                self._worker.kill()
                self._worker.wait()
            self._worker = None

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    def worker_alive(self) -> bool:
        return self._worker is not None and self._worker.poll() is None

    def stop(self) -> None:
        """Stop everything this stack started, newest first; safe to call twice."""
        if self._worker is not None:
            self.kill_worker(signal.SIGTERM)
        try:
            import ray
            from ray import serve

            if ray.is_initialized():
                serve.shutdown()
                if self._own_ray:
                    ray.shutdown()
        except ImportError:  # pragma: no cover
            pass
        if self._broker is not None:
            self._broker.stop()
            self._broker = None


def start_local_ray(namespace: str, attempts: int = 3) -> None:
    """Start a one-machine Ray (2 CPUs, no dashboard, a 100 MB object store), retrying a start that timed out.

    Measured: right after another local Ray shut down, the new GCS server occasionally never reports its port
    and ``ray.init`` times out; a second start works.
    """
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=100 * 1024 * 1024,
                _node_ip_address="127.0.0.1",
                namespace=namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
            return
        except RuntimeError as exc:
            ray.shutdown()
            if attempt == attempts:
                raise ServiceUnavailable(f"Ray did not start after {attempts} tries: {exc}") from exc
            log.warning("Ray did not start (try %d/%d): %s; retrying", attempt, attempts, exc)
            time.sleep(2.0 * attempt)


def _wait_healthy(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/live", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise ServiceUnavailable(f"the API at {url} did not become healthy within {timeout:.0f}s")
