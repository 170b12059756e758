"""SQLite layout of the atom index: one file, three tables kept in step, and the metadata row.

* ``atoms``      the rows (scalar fields, the vector as a float32 blob), unique on (tenant, user, atom_id).
* ``atoms_terms`` each atom's lexical terms (:func:`mnemoflow.lexical.analysed`: Chinese and Japanese segmented;
                 one space before, between and after them, so that ``instr(terms, ' term ')`` finds a whole term)
                 and their count, with its id, type and scope, keyed, and so stored, by (tenant, user): a user's
                 rows sit side by side, and BM25 reads the user's statistics from them and scores the rows holding
                 a query term (``SqliteVectorStore._bm25`` says why not FTS5).
* ``atoms_vec``  sqlite-vec ``vec0`` with the user key as its partition key: a KNN query reads only that
                 user's chunks (found through an index of ours, :func:`index_partitions`); type and scope are
                 metadata columns filtered inside the KNN. ``chunk_size`` is small because every partition allocates
                 whole chunks; with the default (1024) and ~100 atoms per user the file is mostly empty float slots.
* ``meta``       embedding model and dimension, so that opening with another model is detected.

Why apsw: the stdlib ``sqlite3`` of this Python cannot load extensions. WAL lets several processes share it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mnemoflow.errors import StorageError
from mnemoflow.index._common import user_key
from mnemoflow.lexical import terms
from mnemoflow.ports.vectors import search_text

SCHEMA_VERSION = "5"
"""2: the FTS body holds lexical terms (segmented CJK) instead of the raw text. 3: atoms have a ``context`` (searched,
not shown: :func:`~mnemoflow.ports.vectors.search_text`), and the FTS body is the terms of text and context. 4: atoms
have a ``scope`` (docs/concepts/scopes.md), a column of the FTS and vec tables too. 5: ``atoms_terms`` in place of the
FTS table (BM25 per user). An index of an older version gains the missing columns (context empty, scope shared: what
every atom was), loses its FTS table, and has ``atoms_terms``, and before 4 its vec table, rebuilt from ``atoms`` when
opened, in one transaction; the vectors are in ``atoms.vec``, so nothing is embedded again."""
log = logging.getLogger(__name__)
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
create table if not exists atoms_terms(
    tenant text not null, user text not null, rid integer not null,
    atom_id text not null, type text not null, scope text not null, terms text not null, nterms integer not null,
    primary key (tenant, user, rid)
) without rowid;
"""
_PARTITION_COLUMN = "partition00"
"""sqlite-vec's name for the first partition key column of a vec0 table's ``_chunks`` shadow table."""


def create_vec(conn: Any, dim: int, chunk_size: int) -> None:
    """The vec0 table, if missing, and the index on its partition column (:func:`index_partitions`)."""
    conn.execute(
        "create virtual table if not exists atoms_vec using vec0("
        "rid integer primary key, ukey text partition key, atype text, scope text, "
        f"embedding float[{int(dim)}] distance_metric=cosine, chunk_size={int(chunk_size)})"
    )
    index_partitions(conn)


def index_partitions(conn: Any) -> None:
    """Index the vec0 shadow table ``atoms_vec_chunks`` on its partition column (idempotent).

    Why: sqlite-vec 0.1.9 finds a partition's chunks with ``where partition00 = ?`` on that table, which has no
    index, so every KNN query and every insert scanned all its rows (~70,000 chunks at 10^6 atoms, a user per 100):
    21 of a KNN query's 22 ms. With the index it takes 0.18 ms. The table and column are sqlite-vec's internals, not
    its API: a version that names them otherwise is logged and left as it is (slow, still correct)."""
    columns = {col[1] for col in conn.execute("pragma table_info(atoms_vec_chunks)")}
    if _PARTITION_COLUMN not in columns:
        log.warning(
            "sqlite-vec's atoms_vec_chunks has no %s column (columns: %s); its partition lookups stay unindexed",
            _PARTITION_COLUMN,
            sorted(columns) or "no such table",
        )
        return
    conn.execute(f"create index if not exists atoms_vec_chunks_partition on atoms_vec_chunks({_PARTITION_COLUMN})")


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
        create_vec(conn, dim, chunk_size)
        for key, value in (("schema_version", SCHEMA_VERSION), ("embedding_model", embedding_model), ("dim", dim)):
            conn.execute("insert or ignore into meta(key, value) values (?, ?)", (key, str(value)))
        meta = dict(conn.execute("select key, value from meta"))
        if meta["schema_version"] != SCHEMA_VERSION:
            _migrate(conn, int(meta["schema_version"]), int(meta["dim"]), chunk_size)
    return meta["embedding_model"], int(meta["dim"])


def _migrate(conn: Any, version: int, dim: int, chunk_size: int) -> None:
    """Bring an index of an older schema version to this one (in the caller's transaction): add the columns it
    lacks, then rebuild from ``atoms`` the derived tables whose layouts changed since ``version``."""
    columns = {col[1] for col in conn.execute("pragma table_info(atoms)")}
    if "context" not in columns:
        conn.execute("alter table atoms add column context text not null default ''")
    if "scope" not in columns:
        conn.execute("alter table atoms add column scope text not null default 'shared'")
    conn.execute("drop table if exists atoms_fts")  # before 5
    conn.execute("delete from atoms_terms")
    vectors = version < 4  # the vec table's layout is version 4's
    if vectors:
        conn.execute("drop table if exists atoms_vec")
        create_vec(conn, dim, chunk_size)
    rows = conn.execute("select rid, atom_id, tenant, user, type, scope, text, context, vec from atoms")
    for rid, atom_id, tenant, user, type_, scope, text, context, vec in list(rows):
        insert_terms(conn, rid, atom_id, (tenant, user, type_, scope), search_text(text, context))
        if vectors:
            insert_vec(conn, rid, (tenant, user, type_, scope), vec)
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


def insert_terms(conn: Any, rid: int, atom_id: str, keys: Keys, searched: str) -> None:
    """The terms row of an atom; ``searched``: its text with its context."""
    tenant, user, type_, scope = keys
    words = terms(searched)
    conn.execute(
        "insert into atoms_terms(tenant, user, rid, atom_id, type, scope, terms, nterms)"
        " values (?, ?, ?, ?, ?, ?, ?, ?)",
        (tenant, user, rid, atom_id, type_, scope, f" {' '.join(words)} ", len(words)),
    )


def insert_derived(conn: Any, rid: int, atom_id: str, keys: Keys, searched: str, vec: bytes) -> None:
    """The terms and vec0 rows of an atom; ``searched``: its text with its context."""
    insert_terms(conn, rid, atom_id, keys, searched)
    insert_vec(conn, rid, keys, vec)


def delete_derived(conn: Any, tenant: str, user: str, rids: Sequence[int]) -> None:
    """Remove the terms and vec0 rows of the user's atoms ``rids``."""
    for rid in rids:
        conn.execute("delete from atoms_terms where tenant = ? and user = ? and rid = ?", (tenant, user, rid))
        conn.execute("delete from atoms_vec where rid = ?", (rid,))


def record_model(conn: Any, embedding_model: str, dim: int) -> None:
    conn.execute("update meta set value = ? where key = 'embedding_model'", (embedding_model,))
    conn.execute("update meta set value = ? where key = 'dim'", (str(dim),))
