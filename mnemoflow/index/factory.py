"""Open the configured atom index: Milvus when ``milvus_uri`` is set, else SQLite in the data directory.

SQLite is the embedded default because several processes (the extractor replica, the API replica) open the same
file in WAL mode, and because it meets the recall latency target with room to spare (docs/DESIGN.md §5); Milvus Lite
allows one process per file.
"""

from __future__ import annotations

from mnemoflow.config import Settings
from mnemoflow.ports.embedder import Embedder
from mnemoflow.ports.vectors import VectorStore


def index_path(settings: Settings) -> str:
    return str(settings.data_dir / "index" / "atoms.sqlite")


def open_store(settings: Settings, *, dim: int, embedding_model: str) -> VectorStore:
    if settings.milvus_uri:
        from mnemoflow.index.milvus import MilvusVectorStore

        return MilvusVectorStore.open(settings.milvus_uri, dim=dim, embedding_model=embedding_model)
    from mnemoflow.index.sqlite import SqliteVectorStore

    (settings.data_dir / "index").mkdir(parents=True, exist_ok=True)
    return SqliteVectorStore.open(index_path(settings), dim=dim, embedding_model=embedding_model)


def recorded_model(settings: Settings) -> str | None:
    """The embedding model the configured index was built with; None for an index not built yet."""
    if settings.milvus_uri:
        from mnemoflow.index.milvus import MilvusVectorStore

        return MilvusVectorStore.recorded_model(settings.milvus_uri)
    from mnemoflow.index.sqlite import SqliteVectorStore

    return SqliteVectorStore.recorded_model(index_path(settings))


def open_index(settings: Settings) -> tuple[Embedder, VectorStore]:
    """The configured embedder and the atom index opened for its model: what extraction and recall both need."""
    from mnemoflow.embedding.factory import build_embedder

    embedder = build_embedder(settings)
    return embedder, open_store(settings, dim=embedder.dim, embedding_model=embedder.model_id)
