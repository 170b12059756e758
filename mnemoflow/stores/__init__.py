"""VectorStore adapters. Only the in-memory store is imported eagerly; the others need optional extras.

``from mnemoflow.stores import SqliteVectorStore`` works too: the vendor module is imported on first use,
so ``import mnemoflow.stores`` never needs apsw or pymilvus.
"""

from __future__ import annotations

from typing import Any

from mnemoflow.stores.memory import InMemoryIndex, InMemoryVectorStore

__all__ = ["InMemoryIndex", "InMemoryVectorStore", "MilvusVectorStore", "SqliteVectorStore"]


def __getattr__(name: str) -> Any:
    if name == "SqliteVectorStore":
        from mnemoflow.stores.sqlite import SqliteVectorStore

        return SqliteVectorStore
    if name == "MilvusVectorStore":
        from mnemoflow.stores.milvus import MilvusVectorStore

        return MilvusVectorStore
    raise AttributeError(f"module 'mnemoflow.stores' has no attribute {name!r}")
