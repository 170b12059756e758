"""SQLite layout of the atom index: one file, three tables kept in step, and the metadata row.

* ``atoms``      the rows (scalar fields, the vector as a float32 blob), unique on (tenant, user, atom_id).
* ``atoms_fts``  FTS5 over the text's lexical terms (:func:`mnemoflow.lexical.analysed`: Chinese and Japanese
                 segmented, words space-separated), with the user key, the type and the scope key as columns so that
                 the user, type and visibility filters sit inside the MATCH and BM25 never ranks a row the caller
                 may not see.
* ``atoms_vec``  sqlite-vec ``vec0`` with the user key as its partition key: a KNN query reads only that
                 user's chunks; type and scope are metadata columns filtered inside the KNN. ``chunk_size`` is small
                 because every partition allocates whole chunks; with the default (1024) and ~100 atoms per user the
                 file is mostly empty float slots.
* ``meta``       embedding model and dimension, so that opening with another model is detected.

Why apsw: the stdlib ``sqlite3`` of this Python cannot load extensions. WAL lets several processes share it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mnemoflow.errors import StorageError
from mnemoflow.index._common import scope_key, user_key
from mnemoflow.lexical import analysed
from mnemoflow.ports.vectors import search_text

SCHEMA_VERSION = "4"
"""2: the FTS body holds lexical terms (segmented CJK) instead of the raw text. 3: atoms have a ``context`` (searched,
not shown: :func:`~mnemoflow.ports.vectors.search_text`), and the FTS body is the terms of text and context. 4: atoms
have a ``scope`` (docs/concepts/scopes.md), a column of the FTS and vec tables too. An index of an older version gains
the missing columns (context empty, scope shared: what every atom was) and has its FTS and vec tables rebuilt from
``atoms`` when opened, in one transaction; the vectors are in ``atoms.vec``, so nothing is embedded again."""
_INSTALL_HINT = "the SQLite vector store needs apsw and sqlite-vec: pip install mnemoflow[sqlite]"

_DDL = """
create table if not exists meta(key text primary key, value text not null);
create table if not exists atoms(
    rid integer primary key,
    tenant text not null, user text not null, atom_id text not null,
    type text not null, priority integer not null, text text not null, context text not null default '',
    created text not null, updated text not null, source_ids text not null,
    vec blob not null, scope text not null default 'shared',
    unique(tenant, user, atom_id)
);
"""
_FTS_DDL = (
    "create virtual table if not exists atoms_fts using fts5("
    "ukey, atype, skey, body, tokenize='unicode61 remove_diacritics 2')"
)
BM25 = "bm25(atoms_fts, 0.0, 0.0, 0.0, 1.0)"
"""BM25 over the body alone: the key columns are filters, not text."""


def vec_ddl(dim: int, chunk_size: int) -> str:
    return (
        "create virtual table if not exists atoms_vec using vec0("
        "rid integer primary key, ukey text partition key, atype text, scope text, "
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
    """Create missing tables; record model and dim on first open; migrate an older layout. Returns what the index
    holds."""
    with translate(), conn:
        conn.execute(_DDL)
        conn.execute(_FTS_DDL)
        conn.execute(vec_ddl(dim, chunk_size))
        for key, value in (("schema_version", SCHEMA_VERSION), ("embedding_model", embedding_model), ("dim", dim)):
            conn.execute("insert or ignore into meta(key, value) values (?, ?)", (key, str(value)))
        meta = dict(conn.execute("select key, value from meta"))
        if meta["schema_version"] != SCHEMA_VERSION:
            _migrate(conn, int(meta["dim"]), chunk_size)
    return meta["embedding_model"], int(meta["dim"])


def _migrate(conn: Any, dim: int, chunk_size: int) -> None:
    """Bring an index of an older schema version to this one (in the caller's transaction): add the columns it
    lacks, then rebuild both derived tables from ``atoms``, whose layouts changed with the version."""
    columns = {col[1] for col in conn.execute("pragma table_info(atoms)")}
    if "context" not in columns:
        conn.execute("alter table atoms add column context text not null default ''")
    if "scope" not in columns:
        conn.execute("alter table atoms add column scope text not null default 'shared'")
    conn.execute("drop table if exists atoms_fts")
    conn.execute(_FTS_DDL)
    conn.execute("drop table if exists atoms_vec")
    conn.execute(vec_ddl(dim, chunk_size))
    rows = conn.execute("select rid, tenant, user, type, scope, text, context, vec from atoms")
    for rid, tenant, user, type_, scope, text, context, vec in list(rows):
        insert_derived(conn, rid, (tenant, user, type_, scope), search_text(text, context), vec)
    conn.execute("update meta set value = ? where key = 'schema_version'", (SCHEMA_VERSION,))


Keys = tuple[str, str, str, str]
"""What the derived tables filter an atom by: tenant, user, type, scope."""


def insert_vec(conn: Any, rid: int, keys: Keys, vec: bytes) -> None:
    """The vec0 row of an atom; ``vec`` is the float32 blob."""
    tenant, user, type_, scope = keys
    conn.execute(
        "insert into atoms_vec(rid, ukey, atype, scope, embedding) values (?, ?, ?, ?, ?)",
        (rid, user_key(tenant, user), type_, scope, vec),
    )


def insert_derived(conn: Any, rid: int, keys: Keys, searched: str, vec: bytes) -> None:
    """The FTS and vec0 rows of an atom; ``searched``: its text with its context."""
    tenant, user, type_, scope = keys
    conn.execute(
        "insert into atoms_fts(rowid, ukey, atype, skey, body) values (?, ?, ?, ?, ?)",
        (rid, user_key(tenant, user), type_, scope_key(tenant, user, scope), analysed(searched)),
    )
    insert_vec(conn, rid, keys, vec)


def record_model(conn: Any, embedding_model: str, dim: int) -> None:
    conn.execute("update meta set value = ? where key = 'embedding_model'", (embedding_model,))
    conn.execute("update meta set value = ? where key = 'dim'", (str(dim),))
