"""SQLite layout of the atom index: one file, three tables kept in step, and the metadata row.

* ``atoms``      the rows (scalar fields, the vector as a float32 blob), unique on (tenant, user, atom_id).
* ``atoms_fts``  FTS5 over the text's lexical terms (:func:`mnemoflow.lexical.analysed`: Chinese and Japanese
                 segmented, words space-separated), with the user key and the type as columns so that the user and
                 the type filter sit inside the MATCH and BM25 never ranks another user's rows.
* ``atoms_vec``  sqlite-vec ``vec0`` with the user key as its partition key: a KNN query reads only that
                 user's chunks. ``chunk_size`` is small because every partition allocates whole chunks; with the
                 default (1024) and ~100 atoms per user the file is mostly empty float slots.
* ``meta``       embedding model and dimension, so that opening with another model is detected.

Why apsw: the stdlib ``sqlite3`` of this Python cannot load extensions. WAL lets several processes share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mnemoflow.errors import StorageError
from mnemoflow.index._common import user_key
from mnemoflow.lexical import analysed
from mnemoflow.ports.vectors import search_text

SCHEMA_VERSION = "3"
"""2: the FTS body holds lexical terms (segmented CJK) instead of the raw text. 3: atoms have a ``context`` (searched,
not shown: :func:`~mnemoflow.ports.vectors.search_text`), and the FTS body is the terms of text and context. An
index of an older version gains the column (empty) and has its FTS table rebuilt from ``atoms`` when opened."""
_INSTALL_HINT = "the SQLite vector store needs apsw and sqlite-vec: pip install mnemoflow[sqlite]"

_DDL = """
create table if not exists meta(key text primary key, value text not null);
create table if not exists atoms(
    rid integer primary key,
    tenant text not null, user text not null, atom_id text not null,
    type text not null, priority integer not null, text text not null, context text not null default '',
    created text not null, updated text not null, source_ids text not null,
    vec blob not null,
    unique(tenant, user, atom_id)
);
create virtual table if not exists atoms_fts using fts5(ukey, atype, body, tokenize='unicode61 remove_diacritics 2');
"""


def vec_ddl(dim: int, chunk_size: int) -> str:
    return (
        "create virtual table if not exists atoms_vec using vec0("
        "rid integer primary key, ukey text partition key, atype text, "
        f"embedding float[{int(dim)}] distance_metric=cosine, chunk_size={int(chunk_size)})"
    )


def _vendor() -> tuple[Any, Any]:
    try:
        import apsw
        import sqlite_vec
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(_INSTALL_HINT) from exc
    return apsw, sqlite_vec


@contextmanager
def translate() -> Iterator[None]:
    """Map apsw errors to StorageError at the adapter boundary (docs/STYLE.md, item 14)."""
    apsw, _ = _vendor()
    try:
        yield
    except apsw.Error as exc:
        raise StorageError(f"sqlite vector store: {type(exc).__name__}: {exc}") from exc


def connect(path: str, busy_timeout_ms: int) -> Any:
    """Open the file with sqlite-vec loaded, WAL on, and a busy timeout so concurrent writers wait, not fail."""
    apsw, sqlite_vec = _vendor()
    with translate():
        conn = apsw.Connection(path)
        conn.enable_load_extension(True)
        conn.load_extension(sqlite_vec.loadable_path())
        conn.enable_load_extension(False)
        conn.set_busy_timeout(busy_timeout_ms)
        conn.execute("pragma journal_mode=wal")
        conn.execute("pragma synchronous=normal")
    return conn


def ensure_schema(conn: Any, dim: int, embedding_model: str, chunk_size: int) -> tuple[str, int]:
    """Create missing tables; record model and dim on first open. Returns what the index holds."""
    with translate(), conn:
        conn.execute(_DDL)
        conn.execute(vec_ddl(dim, chunk_size))
        for key, value in (("schema_version", SCHEMA_VERSION), ("embedding_model", embedding_model), ("dim", dim)):
            conn.execute("insert or ignore into meta(key, value) values (?, ?)", (key, str(value)))
        meta = dict(conn.execute("select key, value from meta"))
        if meta["schema_version"] != SCHEMA_VERSION:
            if "context" not in {col[1] for col in conn.execute("pragma table_info(atoms)")}:
                conn.execute("alter table atoms add column context text not null default ''")
            _rebuild_fts(conn)
            conn.execute("update meta set value = ? where key = 'schema_version'", (SCHEMA_VERSION,))
    return meta["embedding_model"], int(meta["dim"])


def _rebuild_fts(conn: Any) -> None:
    """Re-analyse every atom's text and context into the FTS table (one transaction, with the caller's)."""
    conn.execute("delete from atoms_fts")
    rows = list(conn.execute("select rid, tenant, user, type, text, context from atoms"))
    for rid, tenant, user, type_, text, context in rows:
        conn.execute(
            "insert into atoms_fts(rowid, ukey, atype, body) values (?, ?, ?, ?)",
            (rid, user_key(tenant, user), type_, analysed(search_text(text, context))),
        )


def record_model(conn: Any, embedding_model: str, dim: int) -> None:
    conn.execute("update meta set value = ? where key = 'embedding_model'", (embedding_model,))
    conn.execute("update meta set value = ? where key = 'dim'", (str(dim),))
