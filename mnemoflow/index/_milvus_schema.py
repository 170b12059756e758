"""Milvus layout of the atom index, and the translation of pymilvus errors.

One collection (docs/DESIGN.md §5): a primary key derived from (tenant, user, atom id) so ids only need to be unique
per user, a 384-d (configurable) dense vector with a FLAT index, and a sparse vector that Milvus fills itself
with its BM25 full-text function from ``terms``: the text's lexical terms (:func:`mnemoflow.lexical.analysed`,
Chinese segmented) split on whitespace, so Milvus ranks the same terms the SQLite index and the in-memory
reference do. (Milvus' own ``chinese`` analyzer would segment differently from the query side of the others.)
A collection made before ``terms``, ``context`` or ``scope`` existed is rebuilt from its rows on open
(:func:`field_names`): Milvus 2.5 and Lite cannot add a field to a collection. ``scope`` (docs/concepts/scopes.md) has
an INVERTED index like tenant and user, and every search filters on it with ``scope in [...]``.
Tenant and user are plain VARCHAR fields with INVERTED indexes:
``is_partition_key`` is broken in Milvus Lite 2.5.1 (every filter fails), and HNSW/IVF_FLAT were rejected or
returned wrong neighbours there, so FLAT it is. Lite cannot alter collection properties, so the embedding
model lives in a tiny side collection ``<name>_meta``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mnemoflow.errors import InvalidInput, StorageError

_INSTALL_HINT = (
    "the Milvus vector store needs pymilvus 2.5 (and milvus-lite for a local file): pip install mnemoflow[milvus]"
)
SCALARS = [
    "pk",
    "atom_id",
    "tenant",
    "user",
    "type",
    "priority",
    "text",
    "context",
    "created_us",
    "updated_us",
    "sources",
    "scope",
]
TERMS_ANALYZER = {"tokenizer": "whitespace"}


def vendor() -> Any:
    """Import pymilvus lazily so the core never needs it."""
    try:
        import pymilvus
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL_HINT) from exc
    return pymilvus


@contextmanager
def translate() -> Iterator[None]:
    """Map pymilvus and gRPC failures to StorageError at the adapter boundary (docs/STYLE.md, item 14)."""
    pymilvus = vendor()
    import grpc

    try:
        yield
    except (pymilvus.MilvusException, grpc.RpcError) as exc:
        raise StorageError(f"milvus vector store: {exc}") from exc


def lit(value: str) -> str:
    """A Milvus filter string literal: double-quoted, backslash and quote escaped. Control characters are
    refused: the parser has no portable escape for them, and a parse error makes pymilvus retry until timeout."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise InvalidInput(f"id or scope contains a control character: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scope_filter(tenant: str, user: str) -> str:
    return f"tenant == {lit(tenant)} and user == {lit(user)}"


def primary_key(tenant: str, user: str, atom_id: str) -> str:
    """A hex key: unique per (tenant, user, id) and never in need of escaping."""
    return hashlib.sha256(f"{tenant}\x1f{user}\x1f{atom_id}".encode()).hexdigest()


def create_atoms(client: Any, name: str, dim: int, timeout: float) -> None:
    pymilvus = vendor()
    DataType, Function, FunctionType = pymilvus.DataType, pymilvus.Function, pymilvus.FunctionType
    s = client.create_schema(auto_id=False, enable_dynamic_field=False)
    s.add_field("pk", DataType.VARCHAR, max_length=64, is_primary=True)
    s.add_field("atom_id", DataType.VARCHAR, max_length=512)
    s.add_field("tenant", DataType.VARCHAR, max_length=512)
    s.add_field("user", DataType.VARCHAR, max_length=512)
    s.add_field("type", DataType.VARCHAR, max_length=16)
    s.add_field("priority", DataType.INT64)
    s.add_field("text", DataType.VARCHAR, max_length=65535)
    s.add_field("context", DataType.VARCHAR, max_length=65535)
    s.add_field("terms", DataType.VARCHAR, max_length=65535, enable_analyzer=True, analyzer_params=TERMS_ANALYZER)
    s.add_field("created_us", DataType.INT64)
    s.add_field("updated_us", DataType.INT64)
    s.add_field("sources", DataType.VARCHAR, max_length=65535)
    s.add_field("scope", DataType.VARCHAR, max_length=512)
    s.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    s.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
    s.add_function(
        Function(
            name="text_bm25",
            function_type=FunctionType.BM25,
            input_field_names=["terms"],
            output_field_names=["sparse"],
        )
    )
    ip = client.prepare_index_params()
    ip.add_index("dense", index_type="FLAT", metric_type="COSINE")
    ip.add_index("sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    ip.add_index("tenant", index_type="INVERTED")
    ip.add_index("user", index_type="INVERTED")
    ip.add_index("scope", index_type="INVERTED")
    client.create_collection(name, schema=s, index_params=ip, consistency_level="Strong", timeout=timeout)


def field_names(client: Any, name: str, timeout: float) -> set[str]:
    """The collection's fields: one of an older layout lacks ``terms`` (BM25 read the raw text), ``context`` or
    ``scope``."""
    return {f["name"] for f in client.describe_collection(name, timeout=timeout)["fields"]}


def recorded_model(client: Any, name: str, timeout: float) -> str | None:
    """The embedding model the collection ``name`` was built with; None before its side collection exists."""
    if not client.has_collection(f"{name}_meta", timeout=timeout):
        return None
    rows = client.query(f"{name}_meta", filter='key == "embedding_model"', output_fields=["value"], timeout=timeout)
    return str(rows[0]["value"]) if rows else None


def ensure_meta(client: Any, name: str, embedding_model: str, dim: int, timeout: float) -> tuple[str, int]:
    """Create the side collection on first open; return the (model, dim) the index was built with."""
    pymilvus = vendor()
    meta = f"{name}_meta"
    if not client.has_collection(meta, timeout=timeout):
        s = client.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("key", pymilvus.DataType.VARCHAR, max_length=64, is_primary=True)
        s.add_field("value", pymilvus.DataType.VARCHAR, max_length=1024)
        s.add_field("v", pymilvus.DataType.FLOAT_VECTOR, dim=2)  # Milvus requires one vector field
        ip = client.prepare_index_params()
        ip.add_index("v", index_type="FLAT", metric_type="L2")
        client.create_collection(meta, schema=s, index_params=ip, consistency_level="Strong", timeout=timeout)
        write_meta(client, name, embedding_model, dim, timeout)
    got = {
        r["key"]: r["value"]
        for r in client.query(meta, filter='key != ""', output_fields=["key", "value"], timeout=timeout)
    }
    return got["embedding_model"], int(got["dim"])


def write_meta(client: Any, name: str, embedding_model: str, dim: int, timeout: float) -> None:
    rows = [
        {"key": "embedding_model", "value": embedding_model, "v": [0.0, 0.0]},
        {"key": "dim", "value": str(dim), "v": [0.0, 0.0]},
    ]
    client.upsert(f"{name}_meta", rows, timeout=timeout)
