"""VectorStore adapters. Only the in-memory store is imported eagerly; the others need optional extras.

``from mnemoflow.index import SqliteVectorStore`` works too: the vendor module is imported on first use,
so ``import mnemoflow.index`` never needs apsw or pymilvus.
"""

from __future__ import annotations

from typing import Any

from mnemoflow.index.memory import InMemoryIndex, InMemoryVectorStore

__all__ = ["InMemoryIndex", "InMemoryVectorStore", "MilvusVectorStore", "SqliteVectorStore"]


def __getattr__(name: str) -> Any:
    if name == "SqliteVectorStore":
        from mnemoflow.index.sqlite import SqliteVectorStore

        return SqliteVectorStore
    if name == "MilvusVectorStore":
        from mnemoflow.index.milvus import MilvusVectorStore

        return MilvusVectorStore
    raise AttributeError(f"module 'mnemoflow.index' has no attribute {name!r}")
