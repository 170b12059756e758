"""The developer's Docker Compose file for Kafka listens where the embedded shape does: on loopback only."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.kafka.yml"


def test_every_published_port_is_bound_to_loopback() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert published, "the broker must be reachable from the host"
    assert all(str(port).startswith("127.0.0.1:") for port in published), published
