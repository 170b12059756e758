"""Start, supervise and stop the whole running stack: broker, topics, Ray, actors, Serve apps, Faust worker.

This is the one place that starts runtimes; it imports ``streams``, ``actors`` and ``serving`` inside its
methods so that importing mnemoflow stays free of them. The CLI's ``up`` and the integration tests use it.
Every listener binds to loopback in the embedded shape; ``supervise`` restarts what died; ``stop`` stops the
parts newest first, so the worker flushes and commits before Serve, Ray and the broker go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import SecretStr

from mnemoflow.config import Settings
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.supervision import RestartBackoff
from serving.lean import lean_runtime_env

if TYPE_CHECKING:
    from streams import Broker

log = logging.getLogger(__name__)

DEFAULT_TENANT = "default"
UNHEALTHY_GRACE_S = 60.0  # how long Serve may take to replace an application's dead replicas before we redeploy it
LOCAL_RAY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray treats this machine as a single-node install


@dataclass(frozen=True)
class StackInfo:
    bootstrap: str
    broker: str  # "external", or the embedded broker's kind
    ray_address: str
    api_url: str
    data_dir: Path
    worker_pid: int | None
    serve_url: str
    """Serve's HTTP proxy: the same API one hop further (``api_url`` itself unless ``api_door`` is ``direct``)."""


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
        refuse_taken_port(settings.api_host, settings.api_port)  # before the API key is written
        self.settings = ensure_api_key(settings.model_copy(update={"data_dir": settings.data_dir.resolve()}))
        self.log_dir = self.settings.data_dir / "logs"
        self._broker: Broker | None = None
        self._worker: subprocess.Popen[bytes] | None = None
        self._own_ray = False
        self._serve_apps: dict[str, Any] = {}
        self._backoff = RestartBackoff()
        self._next_deep_check = 0.0
        self._unhealthy_since: dict[str, float] = {}
        self.shards: list[object] = []
        self.curators: list[object] = []
        self.info: StackInfo | None = None

    def start(self) -> StackInfo:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            bootstrap = self._start_broker()
            ray_address = self._start_ray()
            self._start_actors()
            api_url, serve_url = self._start_serve(bootstrap)
            self.settings = self.settings.model_copy(update={"kafka_bootstrap": bootstrap, "ray_address": ray_address})
            self.start_worker()
            _wait_ready(api_url, timeout=120)
        except BaseException:
            self.stop()
            raise
        broker = self._broker.kind if self._broker else "external"
        self.info = StackInfo(
            bootstrap, broker, ray_address, api_url, self.settings.data_dir, self.worker_pid, serve_url
        )
        return self.info

    def _start_broker(self) -> str:
        from streams import ensure_topics, open_broker

        bootstrap = self.settings.kafka_bootstrap
        if not bootstrap:
            self._broker = open_broker(self.settings, self.log_dir)
            bootstrap = self._broker.start()
            self._backoff.started("broker", time.monotonic())
        asyncio.run(ensure_topics(bootstrap, self.settings))
        return bootstrap

    def _start_ray(self) -> str:
        if not self.settings.ray_address:
            one_machine_ray()
        import ray

        # Token auth (Ray 2.60's default) guards the cluster shape, where Ray is reachable from other hosts; the
        # embedded Ray listens on loopback only, where the token would only stand between us and our own parts.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        # Ray runs its workers at nice 15; our actors and Serve replicas are the service, not background work.
        os.environ.setdefault("RAY_worker_niceness", "0")
        # Ray waits 30 s for its GCS to bind; on a busy 2-core machine it took longer (a clean-clone test run).
        os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")
        if not ray.is_initialized():
            with _keep_signal_handlers():  # ray.init installs its own SIGTERM handler, which exits at once
                if self.settings.ray_address:
                    ray.init(
                        address=self.settings.ray_address,
                        namespace=self.settings.ray_namespace,
                        runtime_env=lean_runtime_env(),
                    )
                else:
                    self._own_ray = True
                    start_local_ray(self.settings.ray_namespace)
        return str(ray.get_runtime_context().gcs_address)

    def _start_actors(self) -> None:
        self._build_shards()
        self._build_curators()

    def _build_shards(self) -> None:
        from serving.builder import ensure_shards

        self.shards = ensure_shards(self.settings, detached=False)  # the driver owns them while it holds the handles

    def _build_curators(self) -> None:
        from serving.builder import ensure_curators

        self.curators = ensure_curators(self.settings, detached=False)

    def _start_serve(self, bootstrap: str) -> tuple[str, str]:
        """Serve and its applications; the API's URL (its door, ``api_door``) and Serve's proxy's."""
        from ray import serve

        from serving.builder import applications
        from streams.broker import free_port

        host = self.settings.api_host
        port = self.settings.api_port or free_port(host)
        direct = self.settings.api_door == "direct"
        # Behind the direct door Serve's proxy is a second way in, kept on loopback whatever api_host exposes.
        proxy_host, proxy_port = ("127.0.0.1", free_port("127.0.0.1")) if direct else (host, port)
        serve.start(http_options={"host": proxy_host, "port": proxy_port}, grpc_options={"port": 0})
        # the builders a RayService names; the direct door is the API replicas' own listener on the API's port
        self._serve_apps.update(applications(self.settings, bootstrap, direct_port=port if direct else None))
        for name, (app, prefix) in self._serve_apps.items():
            serve.run(app, name=name, route_prefix=prefix)
        url, proxy_url = f"http://{host}:{port}", f"http://{proxy_host}:{proxy_port}"
        wait_live(proxy_url, timeout=60)
        if direct:
            wait_live(url, timeout=60)
        return url, proxy_url

    def start_worker(self) -> None:
        """Start (or restart) the Faust worker as a child process; its log is ``logs/worker.log``."""
        from streams.broker import spawn

        env = {**os.environ, **self.settings.to_env()}
        cmd = [sys.executable, "-m", "streams.worker", "worker", "--loglevel", "warning"]
        self._worker = spawn(cmd, self.log_dir / "worker.log", env=env)
        self._backoff.started("worker", time.monotonic())
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

    def metrics_urls(self) -> list[tuple[str, str]]:
        """Where each plane's Prometheus text is scraped: the API (its requests), the Faust worker (its topics; not
        served with ``worker_metrics_port`` 0), and each Ray node's metrics agent (actors and Serve replicas)."""
        import ray

        urls = [("api", f"{self.info.api_url}/metrics")] if self.info else []
        if self.settings.worker_metrics_port:
            host, port = self.settings.worker_metrics_host, self.settings.worker_metrics_port
            urls.append(("worker", f"http://{host}:{port}/metrics"))
        for node in ray.nodes():
            if node["Alive"]:
                urls.append(
                    (
                        f"ray node {node['NodeID'][:8]}",
                        f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics",
                    )
                )
        return urls

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker else None

    @property
    def broker_pid(self) -> int | None:
        return self._broker.pid if self._broker else None

    def worker_alive(self) -> bool:
        return self._worker is not None and self._worker.poll() is None

    def supervise(self, deep_every: float = 10.0) -> list[str]:
        """One round of supervision: restart each part found dead, when its backoff allows; say what was done.

        Processes are checked every round (cheap); actors and Serve applications every ``deep_every`` seconds.
        Ray itself is not restarted here: if it is gone, this raises ServiceUnavailable and the caller stops.
        """
        now = time.monotonic()
        done: list[str] = []
        if self._broker is not None and not self._broker.alive():
            self._restart("broker", now, self._broker.start, done)
        if not self.worker_alive():
            code = self._worker.poll() if self._worker is not None else None
            if self._restart("worker", now, self.start_worker, done):
                done[-1] += f" (it exited with code {code}; see {self.log_dir / 'worker.log'})"
        if now >= self._next_deep_check:
            self._next_deep_check = now + deep_every
            self._check_ray()
            self._check_actors(now, done)
            self._check_serve(now, done)
        for line in done:
            log.warning("supervisor: %s", line)
        return done

    def _restart(self, part: str, now: float, start: Any, done: list[str]) -> bool:
        if not self._backoff.due(part, now):
            return False
        try:
            start()
        except Exception as exc:  # noqa: BLE001 - a failed restart is retried after the next backoff
            done.append(f"restarting the {part} failed (death {self._backoff.failures(part)} in a row): {exc}")
            self._backoff.restarted(part, now)
            return False
        self._backoff.restarted(part, now)
        done.append(f"restarted the {part} (death {self._backoff.failures(part)} in a row)")
        return True

    def _check_ray(self) -> None:
        import ray

        try:
            ray.get_runtime_context().get_node_id()
            ray.nodes()  # a GCS round trip
        except Exception as exc:  # noqa: BLE001 - whatever the client raises, Ray is unreachable
            raise ServiceUnavailable(f"Ray at {self.settings.ray_address} is gone: {exc}") from exc

    def _check_actors(self, now: float, done: list[str]) -> None:
        """Ray restarts a killed actor by itself (max_restarts=-1); rebuild only actors that died for good."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError, RayError

        for part, handles, rebuild in (
            ("session shards", self.shards, self._build_shards),
            ("curators", self.curators, self._build_curators),
        ):
            try:
                # Actor handles (held as ``object``) get ``.remote`` from Ray at runtime, hence the ignore.
                ray.get([h.stats.remote() for h in handles], timeout=10)  # type: ignore[attr-defined]
            except ActorDiedError:
                self._restart(part, now, rebuild, done)  # get_if_exists keeps the live ones
            except (GetTimeoutError, RayError) as exc:  # restarting, busy or briefly unreachable: Ray is on it
                log.info("supervisor: %s not answering yet: %s", part, exc)

    def _check_serve(self, now: float, done: list[str]) -> None:
        """Serve's controller restarts dead replicas itself; redeploy an application it reports broken or lost."""
        from ray import serve

        status = serve.status().applications
        for name, (app, prefix) in self._serve_apps.items():
            state = str(getattr(status.get(name), "status", "MISSING")).rsplit(".", 1)[-1]
            if state != "UNHEALTHY":
                self._unhealthy_since.pop(name, None)
            elif now - self._unhealthy_since.setdefault(name, now) < UNHEALTHY_GRACE_S:
                continue  # Serve is replacing a dead replica itself; redeploy only an application stuck there
            if state in ("DEPLOY_FAILED", "UNHEALTHY", "MISSING"):

                def redeploy(app: Any = app, name: str = name, prefix: str | None = prefix) -> None:
                    serve.run(app, name=name, route_prefix=prefix)

                if self._restart(f"Serve application {name!r}", now, redeploy, done):
                    done[-1] += f" (it was {state})"

    def stop(self) -> None:
        """Stop everything this stack started, newest first; safe to call twice."""
        if self._worker is not None:
            log.info("stopping the Faust worker (it commits what it has written)")
            self.kill_worker(signal.SIGTERM)
        try:
            import ray
            from ray import serve

            if ray.is_initialized():
                log.info("stopping Serve and the actors")
                serve.shutdown()
                for handle in [*self.shards, *self.curators]:
                    with contextlib.suppress(Exception):
                        ray.kill(handle)
                self.shards, self.curators = [], []
                if self._own_ray:
                    log.info("stopping Ray")
                    ray.shutdown()
        except ImportError:  # pragma: no cover
            pass
        if self._broker is not None:
            log.info("stopping the broker")
            self._broker.stop()
            self._broker = None


@contextlib.contextmanager
def _keep_signal_handlers() -> Iterator[None]:
    """Restore the caller's SIGINT/SIGTERM handlers after a call that replaces them (``ray.init`` does).

    Ray's driver handler exits on SIGTERM at once, leaving the broker, the worker and Ray's own agents running;
    ``mnemoflow up`` must instead stop every part in order on SIGTERM as on Ctrl-C.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def one_machine_ray() -> None:
    """Make the Ray this process starts a one-machine install on loopback: call it before ray is imported.

    Without ``LOCAL_RAY_ENV=0`` Ray swaps 127.0.0.1 for the machine's routable address and its servers listen on
    every interface. Ray reads the variable once, when it is imported (its own processes inherit it), so a ray
    imported before the variable was set is refused here rather than started listening everywhere. Whatever starts
    a local Ray calls this first: :func:`start_local_ray`, the stack, the two-node cluster of ``tests/cluster.py``.

    It also keeps Ray from prestarting idle workers for the stack's job: its runtime_env (the setup hook of
    :mod:`serving.lean`) would have Ray start workers, ~80 MB each, that no actor of ours takes, since every actor
    and replica gets a worker of its own when it is created.
    """
    os.environ.setdefault(LOCAL_RAY_ENV, "0")
    os.environ.setdefault("RAY_prestart_worker_first_driver", "0")
    os.environ.setdefault("RAY_enable_worker_prestart", "0")
    from ray._private import ray_constants

    if ray_constants.ENABLE_RAY_CLUSTER:  # ray was imported before the environment said "one machine"
        raise ServiceUnavailable(f"set {LOCAL_RAY_ENV}=0 before importing ray, or Ray listens on every interface")


def start_local_ray(namespace: str, attempts: int = 4) -> None:
    """Start a one-machine Ray on loopback (2 CPUs, no dashboard, a 100 MB object store), retrying a failed start.

    Seen on a loaded 2-core machine: the raylet does not register within Ray's fixed 30 s ("The current node timed
    out during startup", a bare ``Exception``), and right after another local Ray shut down the new GCS server
    occasionally never reports its port; a later start works, so each failure is cleaned up and retried.
    """
    one_machine_ray()
    runtime_env = lean_runtime_env()  # before ray.init imports Serve here
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(
                address="local",  # our own Ray, even when another local Ray runs (ray.init would join that one)
                runtime_env=runtime_env,
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=100 * 1024 * 1024,
                _node_ip_address="127.0.0.1",
                namespace=namespace,
                logging_level=logging.WARNING,
                log_to_driver=False,
            )
            return
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a raylet that was too slow
            ray.shutdown()
            if attempt == attempts:
                raise ServiceUnavailable(f"Ray did not start after {attempts} tries: {exc}") from exc
            log.warning("Ray did not start (try %d/%d): %s; retrying", attempt, attempts, exc)
            time.sleep(3.0 * attempt)


def refuse_taken_port(host: str, port: int) -> None:
    """Fail before anything is started or written when a listener holds the API's port. The direct door's
    listener shares its port (``SO_REUSEPORT``): without this, a second stack's replica would join a first stack's
    port and the kernel would split the clients between the two stacks."""
    from streams.broker import port_is_free

    if port and not port_is_free(port, host):
        raise ServiceUnavailable(
            f"the API's port {host}:{port} is taken: stop what listens there, or choose another (mnemoflow up "
            "--port, MNEMOFLOW_API_PORT)"
        )


def wait_live(url: str, timeout: float) -> None:
    """Until the API process answers (liveness): the worker is not started yet, so readiness cannot hold."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health/live", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise ServiceUnavailable(f"the API at {url} did not answer within {timeout:.0f}s")


def _wait_ready(url: str, timeout: float) -> None:
    """Until ``/health`` says every dependency is ready (the worker has joined its group, the index is open).

    A stack still degraded after ``timeout`` is not stopped: it is supervised like any other, and the log says
    which checks fail (``mnemoflow status`` shows them too).
    """
    deadline = time.monotonic() + timeout
    failing: object = "no answer"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{url}/health", timeout=5)
            if response.status_code == 200:
                return
            failing = response.json().get("failing", response.text[:300])
        except (httpx.HTTPError, ValueError) as exc:
            failing = str(exc)
        time.sleep(1.0)
    log.warning("the stack is up but not ready after %.0fs; failing: %s", timeout, failing)
