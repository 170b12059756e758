"""Embedders behind the :class:`~mnemoflow.ports.embedder.Embedder` port.

``HashingEmbedder`` needs nothing; ``MiniLMEmbedder`` (the default for real use) needs the ``embed`` extra and is
imported from :mod:`mnemoflow.embedding.onnx_minilm` only when asked for, so the core imports no model runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mnemoflow.embedding.hashing import HashingEmbedder

if TYPE_CHECKING:
    from mnemoflow.embedding.onnx_minilm import MiniLMEmbedder, resolve_minilm

__all__ = ["HashingEmbedder", "MiniLMEmbedder", "resolve_minilm"]


def __getattr__(name: str) -> Any:
    if name in ("MiniLMEmbedder", "resolve_minilm"):
        from mnemoflow.embedding import onnx_minilm

        return getattr(onnx_minilm, name)
    raise AttributeError(name)
