"""The default embedded broker: a real single-node Apache Kafka (KRaft, broker and controller in one JVM).

Its logs live under the data directory, so an event the API acknowledged (``acks=all``) survives a SIGKILL of
any process of the stack, the broker included: the next start finds it on disk. The jars come from Maven
Central through ``tools/kafka/fetch.sh`` (run by ``make install``); nothing is downloaded at start.

Sized for a 2-core machine that also runs the workers: a capped heap, the serial collector, the C1 compiler
only and small thread pools (about 300 MiB resident when idle, against 450+ with the JVM's defaults).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from mnemoflow.errors import ConfigError, ServiceUnavailable
from streams.broker import LoopbackProcess, free_port, port_is_free, port_open, spawn, tail

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
FETCH_SCRIPT = REPO_ROOT / "tools" / "kafka" / "fetch.sh"
DEFAULT_LIBS = REPO_ROOT / ".cache" / "kafka" / "libs"

_LOG4J2 = """\
status = warn
# Kafka stops itself from its own shutdown hook; keep logging until it is done.
shutdownHook = disable
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = STDOUT
logger.server.name = kafka.server.KafkaServer
logger.server.level = info
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = info
"""


def ensure_kafka_jars(libs: Path | None = None) -> Path:
    """Return the folder of Apache Kafka jars, fetching them from Maven Central with Maven when missing."""
    libs = Path(libs) if libs else DEFAULT_LIBS
    if any(libs.glob("kafka_2.13-*.jar")):
        return libs
    if libs != DEFAULT_LIBS or not FETCH_SCRIPT.exists():
        raise ConfigError(
            f"no Apache Kafka jars in {libs}: run `make install` (or `bash tools/kafka/fetch.sh`), point "
            "MNEMOFLOW_KAFKA_LIBS at a folder of them, or set MNEMOFLOW_EMBEDDED_BROKER=tansu (memory only)"
        )
    done = subprocess.run(["bash", str(FETCH_SCRIPT)], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0 or not any(libs.glob("kafka_2.13-*.jar")):
        raise ConfigError(f"{FETCH_SCRIPT} could not fetch the Kafka jars:\n{done.stderr[-3000:]}")
    return libs


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ConfigError(
            "java not found: the embedded Apache Kafka needs Java 17+ (or MNEMOFLOW_EMBEDDED_BROKER=tansu)"
        )
    return java


def _cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def server_properties(
    workdir: Path, port: int, controller_port: int, *, fsync_each_batch: bool, auto_create_topics: bool
) -> str:
    """KRaft settings for one combined broker and controller on loopback.

    ``fsync_each_batch`` flushes every produce request to disk before it is acknowledged, so an acknowledged
    event survives a power cut too, not only a process crash (Kafka's default leaves that to the page cache).
    """
    values = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
        "auto.create.topics.enable": str(auto_create_topics).lower(),
        "num.partitions": "4",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "background.threads": "2",
        "num.replica.fetchers": "1",
        "num.recovery.threads.per.data.dir": "1",
        "log.retention.hours": "168",  # raw events stay a week; the files are the memory (see README)
        "log.flush.interval.messages": "1" if fsync_each_batch else "9223372036854775807",
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


async def _serves_metadata(bootstrap: str) -> bool:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        await asyncio.wait_for(admin.start(), timeout=10)
        cluster = await asyncio.wait_for(admin.describe_cluster(), timeout=10)
        return bool(cluster.get("brokers"))
    except Exception:  # noqa: BLE001 - any failure means "not ready yet"
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


class EmbeddedKafka(LoopbackProcess):
    """Apache Kafka in ``workdir``: formatted once, restartable on the same ports and logs."""

    kind = "Apache Kafka"
    durable = True

    def __init__(
        self,
        workdir: Path,
        libs: Path | None = None,
        port: int = 0,
        heap_mb: int = 256,
        log_file: Path | None = None,
        fsync_each_batch: bool = True,
        auto_create_topics: bool = False,
    ) -> None:
        self.workdir = Path(workdir)
        self.libs = libs
        self.heap_mb = heap_mb
        self.log_file = log_file or self.workdir / "kafka.log"
        self.fsync_each_batch = fsync_each_batch
        self.auto_create_topics = auto_create_topics
        self.port, self.controller_port = self._ports(port)
        self.started_in_s = 0.0

    def _ports(self, wanted: int) -> tuple[int, int]:
        """The ports of the last run when they are still free (clients keep the bootstrap), else new ones."""
        saved = self.workdir / "ports.json"
        if saved.exists():
            old = json.loads(saved.read_text())
            if (not wanted or wanted == old["port"]) and port_is_free(old["port"]) and port_is_free(old["controller"]):
                return int(old["port"]), int(old["controller"])
        port = wanted or free_port()
        controller = free_port()
        while controller == port:
            controller = free_port()
        return port, controller

    def _java_cmd(self) -> list[str]:
        libs = ensure_kafka_jars(self.libs)
        return [
            _java(),
            f"-Xms{min(64, self.heap_mb)}m",
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:ReservedCodeCacheSize=48m",
            "-XX:MaxMetaspaceSize=96m",
            "-XX:MaxDirectMemorySize=64m",
            "-Xss512k",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.workdir / 'logs'}",
            "-cp",
            f"{libs}{os.sep}*",
        ]

    def start(self, timeout: float = 90.0) -> str:
        """Format the log folder on first use, start the JVM and wait until it serves metadata."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / "server.properties"
        props.write_text(
            server_properties(
                self.workdir,
                self.port,
                self.controller_port,
                fsync_each_batch=self.fsync_each_batch,
                auto_create_topics=self.auto_create_topics,
            )
        )
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        (self.workdir / "ports.json").write_text(json.dumps({"port": self.port, "controller": self.controller_port}))
        java = self._java_cmd()
        began = time.monotonic()
        if not (self.workdir / "data" / "meta.properties").exists():
            fmt = subprocess.run(
                [
                    *java,
                    "kafka.tools.StorageTool",
                    "format",
                    "--ignore-formatted",
                    f"--cluster-id={_cluster_id()}",
                    "-c",
                    str(props),
                ],  # "=": an id may start with "-"
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if fmt.returncode != 0:
                raise ServiceUnavailable(
                    f"formatting Kafka's log folder failed:\n{fmt.stdout[-3000:]}{fmt.stderr[-3000:]}"
                )
        self._proc = spawn([*java, "kafka.Kafka", str(props)], self.log_file, cwd=self.workdir)
        try:
            self._wait_ready(began + timeout)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        log.info("embedded Apache Kafka pid=%s on %s (%.1fs)", self.pid, self.bootstrap, self.started_in_s)
        return self.bootstrap

    def _wait_ready(self, deadline: float) -> None:
        assert self._proc is not None
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                raise ServiceUnavailable(f"Kafka exited with code {code} during start:\n{tail(self.log_file)}")
            if port_open(self.port) and asyncio.run(_serves_metadata(self.bootstrap)):
                return
            if time.monotonic() >= deadline:
                raise ServiceUnavailable(
                    f"Kafka at {self.bootstrap} not ready in time; {self.log_file}:\n{tail(self.log_file)}"
                )
            time.sleep(0.5)
