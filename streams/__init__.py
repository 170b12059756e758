"""Faust wiring: topics, the embedded broker, and the agents that write L0 and offload entries."""

from streams.broker import Broker, open_broker
from streams.topics import ensure_topics

__all__ = ["Broker", "ensure_topics", "open_broker"]
