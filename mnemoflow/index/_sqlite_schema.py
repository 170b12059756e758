"""SQLite layout of the atom index: one file, the atom rows, the tables derived from them (kept in step) and the
metadata row.

* ``atoms``      the rows (scalar fields, the vector as a float32 blob), unique on (tenant, user, atom_id).
* ``lex_users``  one row a (tenant, user) holding atoms: a small integer ``uid`` that keys the user's postings, and
                 the BM25 statistics of the user's atoms (how many, their total length in terms), kept in step by
                 every insert and delete; the row goes with the user's last atom.
* ``lex_atoms``  one row an atom (by ``rid``): its uid, id, type, scope, length in terms, and its distinct terms
                 (:func:`mnemoflow.lexical.terms`: Chinese and Japanese segmented), so that a delete finds its
                 postings without analysing the text again. Type and scope are here, not read from ``atoms``,
                 whose row puts ``scope`` after the vector's overflow pages.
* ``lex_postings`` (uid, term, rid), the term's count in that atom and the atom's length (so scoring reads
                 nothing else): the primary key of a table without rowid, so stored in that order. A query reads,
                 for each of its terms, that term's postings within the user and nothing else
                 (``SqliteVectorStore._bm25`` says why not FTS5, nor a scan of the user's rows).
* ``atoms_vec``  sqlite-vec ``vec0`` with the user key as its partition key: a KNN query reads only that
                 user's chunks (found through an index of ours, :func:`index_partitions`); type and scope are
                 metadata columns filtered inside the KNN. ``chunk_size`` is small because every partition allocates
                 whole chunks; with the default (1024) and ~100 atoms per user the file is mostly empty float slots.
* ``meta``       embedding model and dimension, so that opening with another model is detected.

Why apsw: the stdlib ``sqlite3`` of this Python cannot load extensions. WAL lets several processes share it.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from mnemoflow.errors import StorageError
from mnemoflow.index._common import user_key
from mnemoflow.lexical import terms
from mnemoflow.ports.vectors import search_text

SCHEMA_VERSION = "6"
"""2: the FTS body holds lexical terms (segmented CJK) instead of the raw text. 3: atoms have a ``context`` (searched,
not shown: :func:`~mnemoflow.ports.vectors.search_text`), and the FTS body is the terms of text and context. 4: atoms
have a ``scope`` (docs/concepts/scopes.md), a column of the FTS and vec tables too. 5 (never released): a table of each
atom's terms scanned per user, in place of the FTS table (BM25 per user). 6: the ``lex_*`` tables (postings keyed by
user and term). An index of an older version gains the missing columns (context empty, scope shared: what every atom
was), loses its FTS or terms table, and has its ``lex_*`` tables, and before 4 its vec table, rebuilt from ``atoms``
when opened, in one transaction; the vectors are in ``atoms.vec``, so nothing is embedded again."""
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
create table if not exists lex_users(
    uid integer primary key, tenant text not null, user text not null,
    docs integer not null, length integer not null,
    unique(tenant, user)
);
create table if not exists lex_atoms(
    rid integer primary key, uid integer not null, atom_id text not null, type text not null, scope text not null,
    nterms integer not null, terms text not null
);
create table if not exists lex_postings(
    uid integer not null, term text not null, rid integer not null, tf integer not null, dl integer not null,
    primary key (uid, term, rid)
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


def recorded_model(path: str) -> str | None:
    """The embedding model the index file at ``path`` was built with; None when there is no file or no record yet.
    Read without creating anything: deciding which model to load comes before the index is opened for it."""
    if not os.path.exists(path):
        return None
    apsw, _ = _vendor()
    with translate():
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE)
        conn.set_busy_timeout(10_000)
        try:
            if not conn.execute("select 1 from sqlite_master where type = 'table' and name = 'meta'").fetchone():
                return None
            row = conn.execute("select value from meta where key = 'embedding_model'").fetchone()
        finally:
            conn.close()
    return str(row[0]) if row else None


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
    conn.execute("drop table if exists atoms_terms")  # 5
    for table in ("lex_postings", "lex_atoms", "lex_users"):
        conn.execute(f"delete from {table}")
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
    """The lexical rows of an atom (its postings, its ``lex_atoms`` row, its user's statistics); ``searched``: its
    text with its context."""
    tenant, user, type_, scope = keys
    words = terms(searched)
    counts = Counter(words)
    (uid,) = conn.execute(
        "insert into lex_users(tenant, user, docs, length) values (?, ?, 1, ?) on conflict(tenant, user)"
        " do update set docs = docs + 1, length = length + excluded.length returning uid",
        (tenant, user, len(words)),
    ).fetchone()
    conn.execute(
        "insert into lex_atoms(rid, uid, atom_id, type, scope, nterms, terms) values (?, ?, ?, ?, ?, ?, ?)",
        (rid, uid, atom_id, type_, scope, len(words), " ".join(counts)),
    )
    conn.executemany(
        "insert into lex_postings(uid, term, rid, tf, dl) values (?, ?, ?, ?, ?)",
        [(uid, term, rid, tf, len(words)) for term, tf in counts.items()],
    )


def delete_terms(conn: Any, rid: int) -> None:
    """Remove the lexical rows of atom ``rid`` (if it has them), and its user's statistics row with the user's last
    atom: an erased user's name leaves the file."""
    found = conn.execute("select uid, nterms, terms from lex_atoms where rid = ?", (rid,)).fetchone()
    if found is None:
        return
    uid, nterms, distinct = found
    conn.executemany(
        "delete from lex_postings where uid = ? and term = ? and rid = ?", [(uid, t, rid) for t in distinct.split()]
    )
    conn.execute("delete from lex_atoms where rid = ?", (rid,))
    conn.execute("update lex_users set docs = docs - 1, length = length - ? where uid = ?", (nterms, uid))
    conn.execute("delete from lex_users where uid = ? and docs = 0", (uid,))


def insert_derived(conn: Any, rid: int, atom_id: str, keys: Keys, searched: str, vec: bytes) -> None:
    """The lexical and vec0 rows of an atom; ``searched``: its text with its context."""
    insert_terms(conn, rid, atom_id, keys, searched)
    insert_vec(conn, rid, keys, vec)


def delete_derived(conn: Any, rids: Sequence[int]) -> None:
    """Remove the lexical and vec0 rows of the atoms ``rids``."""
    for rid in rids:
        delete_terms(conn, rid)
        conn.execute("delete from atoms_vec where rid = ?", (rid,))


def record_model(conn: Any, embedding_model: str, dim: int) -> None:
    conn.execute("update meta set value = ? where key = 'embedding_model'", (embedding_model,))
    conn.execute("update meta set value = ? where key = 'dim'", (str(dim),))
