"""Ports: the small protocols the core depends on. Adapters implement them; tests use in-memory fakes."""

from mnemoflow.ports.clock import Clock, SystemClock
from mnemoflow.ports.files import FileStore

__all__ = ["Clock", "FileStore", "SystemClock"]
