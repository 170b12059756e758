"""Ports: the small protocols the core depends on. Adapters implement them; tests use in-memory fakes."""

from mnemoflow.ports.clock import Clock, SystemClock
from mnemoflow.ports.embedder import Embedder
from mnemoflow.ports.files import FileStore
from mnemoflow.ports.llm import LLM, ChatMessage

__all__ = ["LLM", "ChatMessage", "Clock", "Embedder", "FileStore", "SystemClock"]
