"""Faust wiring: topics, the embedded broker, and the agents that write L0 and offload entries."""

from streams.broker import EmbeddedBroker
from streams.topics import ensure_topics

__all__ = ["EmbeddedBroker", "ensure_topics"]
