"""Embedders behind the :class:`~mnemoflow.ports.embedder.Embedder` port.

``HashingEmbedder`` needs nothing; ``E5Embedder`` (the default for real use, multilingual) and ``MiniLMEmbedder``
(English) need the ``embed`` extra and are imported from their modules only when asked for, so the core imports
no model runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemoflow.embedding.hashing import HashingEmbedder

if TYPE_CHECKING:
    from mnemoflow.embedding.e5 import E5Embedder
    from mnemoflow.embedding.onnx_minilm import MiniLMEmbedder, resolve_minilm

__all__ = ["E5Embedder", "HashingEmbedder", "MiniLMEmbedder", "resolve_minilm"]


def __getattr__(name: str) -> Any:
    if name == "E5Embedder":
        from mnemoflow.embedding import e5

        return e5.E5Embedder
    if name in ("MiniLMEmbedder", "resolve_minilm"):
        from mnemoflow.embedding import onnx_minilm

        return getattr(onnx_minilm, name)
    raise AttributeError(name)
