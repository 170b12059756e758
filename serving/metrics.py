"""Prometheus metrics of the API, in their own registry (no globals shared across apps in one process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class ApiMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "mnemoflow_api_requests", "HTTP requests by route and status", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram("mnemoflow_api_latency_seconds", "Request latency", ["route"], registry=self.registry)
        self.events = Counter(
            "mnemoflow_events_submitted", "Events acknowledged by Kafka", ["kind"], registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
