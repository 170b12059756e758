"""SQLite VectorStore: sqlite-vec KNN + per-user BM25 in one WAL file, fused with RRF in Python.

Why this adapter exists next to Milvus: it is one file that several processes (Faust workers, Serve
replicas) can open at once, and it measured ~5x faster than Milvus Lite per-user at 10^5 atoms (docs/DESIGN.md §5).
Layout and the reasons for it are in :mod:`mnemoflow.index._sqlite_schema`.
"""

from __future__ import annotations

import functools
import json
import threading
from array import array
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from mnemoflow.errors import StorageError
from mnemoflow.index import _sqlite_schema as schema
from mnemoflow.index._common import (
    StoreIdentity,
    candidate_depth,
    check_k,
    check_rows,
    check_scope,
    check_types,
    check_vector,
    check_visible,
    rrf_ranks,
    user_key,
)
from mnemoflow.lexical import bm25_postings, terms
from mnemoflow.ports.vectors import AtomRow, AtomType, EmbedFn, Hit, search_text

_COLUMNS = "rid, atom_id, tenant, user, type, priority, text, context, created, updated, source_ids, vec, scope"
_UPSERT = """
insert into atoms(tenant, user, atom_id, type, priority, text, context, created, updated, source_ids, vec, scope)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
on conflict(tenant, user, atom_id) do update set
    type = excluded.type, priority = excluded.priority, text = excluded.text, context = excluded.context,
    created = excluded.created, updated = excluded.updated, source_ids = excluded.source_ids, vec = excluded.vec,
    scope = excluded.scope
returning rid
"""
_USER_STATS = "select uid, docs, length from lex_users where tenant = ? and user = ?"
_POSTINGS = (
    "select term, group_concat(rid || ',' || tf || ',' || dl) from lex_postings"
    " where uid = ? and term in (select value from json_each(?)) group by term"
)
"""The user's postings of the query's terms (a JSON list: a query of a thousand terms is one parameter, not a
thousand ``or``, which would pass SQLite's expression depth limit), each term's as one string of numbers: a common
term of a heavy user has thousands of postings, which SQLite joins in C 2x faster than Python reads them as rows."""
_LEX_ATOMS = "select rid, atom_id, type, scope from lex_atoms where rid in (select value from json_each(?))"
Visible = tuple[str, ...] | None


def _blob(vector: Sequence[float]) -> bytes:
    return array("f", vector).tobytes()


def _row(rec: Sequence[Any]) -> AtomRow:
    _, atom_id, tenant, user, type_, priority, text, context, created, updated, sources, vec, scope = rec
    vector = array("f")
    vector.frombytes(vec)
    # Trusted: written by upsert after validation, so skip re-validating 384 floats per hit.
    return AtomRow.model_construct(
        id=atom_id,
        tenant=tenant,
        user=user,
        type=type_,
        priority=priority,
        text=text,
        context=context,
        vector=vector.tolist(),
        created=datetime.fromisoformat(created),
        updated=datetime.fromisoformat(updated),
        source_message_ids=json.loads(sources),
        scope=scope,
    )


def _marks(n: int) -> str:
    return ",".join("?" * n)


F = TypeVar("F", bound=Callable[..., Any])


def _one_at_a_time(method: F) -> F:
    """Hold the store's lock for the call. Why: one apsw connection may be used from several threads but never by
    two at once ("Connection is busy in another thread"), and the API runs searches on worker threads: concurrent
    recalls failed with a 500 in bench/agents.py. A search takes about a millisecond, so they queue briefly."""

    @functools.wraps(method)
    def locked(self: SqliteVectorStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(F, locked)


class SqliteVectorStore(StoreIdentity):
    """:class:`~mnemoflow.ports.vectors.VectorStore` over one SQLite file. Sync, safe to call from several threads
    (one at a time); open with :meth:`open`."""

    def __init__(self, conn: Any, *, dim: int, embedding_model: str, chunk_size: int, candidates: int) -> None:
        """Wrap an open connection; prefer :meth:`open`, which creates the schema and checks the model."""
        self._conn = conn
        self._lock = threading.RLock()  # search calls dense and BM25 search: reentrant
        self._dim = dim
        self._model = embedding_model
        self._chunk_size = chunk_size
        self._candidates = candidates
        self._stored: tuple[str | None, int | None] = (embedding_model, dim)

    @staticmethod
    def recorded_model(path: str) -> str | None:
        """The embedding model the file was built with (None: no file yet), read without creating anything, before
        choosing the embedder that :meth:`open` must be given."""
        return schema.recorded_model(path)

    @classmethod
    def open(
        cls,
        path: str,
        *,
        dim: int,
        embedding_model: str,
        chunk_size: int = 16,
        candidates: int = 50,
        busy_timeout_ms: int = 10_000,
    ) -> SqliteVectorStore:
        """Open (creating if needed) the index at ``path``. ``chunk_size`` must be a multiple of 8."""
        conn = schema.connect(path, busy_timeout_ms)
        store = cls(conn, dim=dim, embedding_model=embedding_model, chunk_size=chunk_size, candidates=candidates)
        store._stored = schema.ensure_schema(conn, dim, embedding_model, chunk_size)
        return store

    @_one_at_a_time
    def upsert(self, rows: Sequence[AtomRow]) -> None:
        self._fresh()
        rows = check_rows(rows, self._dim)
        with schema.translate(), self._conn:
            for row in rows:
                params = (
                    row.tenant,
                    row.user,
                    row.id,
                    row.type,
                    row.priority,
                    row.text,
                    row.context,
                    row.created.isoformat(),
                    row.updated.isoformat(),
                    json.dumps(row.source_message_ids),
                    blob := _blob(row.vector),
                    row.scope,
                )
                (rid,) = self._conn.execute(_UPSERT, params).fetchone()
                schema.delete_derived(self._conn, [rid])
                keys = (row.tenant, row.user, row.type, row.scope)
                schema.insert_derived(self._conn, rid, row.id, keys, row.search_text, blob)

    def _rids(self, tenant: str, user: str, ids: Sequence[str]) -> list[int]:
        ids = list(dict.fromkeys(ids))
        sql = f"select rid from atoms where tenant = ? and user = ? and atom_id in ({_marks(len(ids))})"
        return [r for (r,) in self._conn.execute(sql, (tenant, user, *ids))] if ids else []

    @_one_at_a_time
    def delete(self, tenant: str, user: str, ids: Sequence[str]) -> int:
        check_scope(tenant, user)
        with schema.translate(), self._conn:
            rids = self._rids(tenant, user, ids)
            schema.delete_derived(self._conn, rids)
            self._conn.execute(f"delete from atoms where rid in ({_marks(len(rids))})", rids)
        return len(rids)

    @_one_at_a_time
    def get(self, tenant: str, user: str, ids: Sequence[str]) -> list[AtomRow]:
        check_scope(tenant, user)
        if not ids:
            return []
        sql = f"select {_COLUMNS} from atoms where tenant = ? and user = ? and atom_id in ({_marks(len(set(ids)))})"
        with schema.translate():
            found = {rec[1]: _row(rec) for rec in self._conn.execute(sql, (tenant, user, *set(ids)))}
        return [found[i] for i in ids if i in found]

    def _rows_by_rid(self, tenant: str, user: str, rids: Sequence[int], visible: Visible) -> dict[int, AtomRow]:
        """Fetch rows, re-checking tenant, user and scope: the keys in the derived tables are hashes, this check is
        exact."""
        if not rids:
            return {}
        sql = f"select {_COLUMNS} from atoms where tenant = ? and user = ? and rid in ({_marks(len(rids))})"
        params: list[Any] = [tenant, user, *rids]
        if visible is not None:
            sql += f" and scope in ({_marks(len(visible))})"
            params += visible
        return {rec[0]: _row(rec) for rec in self._conn.execute(sql, params)}

    def _dense(
        self, tenant: str, user: str, vector: Sequence[float], k: int, types: Sequence[str] | None, visible: Visible
    ) -> list[tuple[int, float]]:
        sql = "select rid, distance from atoms_vec where embedding match ? and k = ? and ukey = ?"
        params: list[Any] = [_blob(check_vector(vector, self._dim)), k, user_key(tenant, user)]
        if types is not None:
            sql += f" and atype in ({_marks(len(types))})"
            params += types
        if visible is not None:
            sql += f" and scope in ({_marks(len(visible))})"
            params += visible
        return [(rid, 1.0 - dist) for rid, dist in self._conn.execute(sql + " order by distance", params)]

    def _bm25(
        self, tenant: str, user: str, text: str, k: int, types: Sequence[str] | None, visible: Visible
    ) -> list[tuple[int, float]]:
        """BM25 within the user's atoms with the user's statistics (how many atoms, how many hold each query term,
        their mean length in terms), over every type and scope (a filter chooses hits, not the population): how
        :mod:`mnemoflow.index.memory` ranks, from the same terms and :mod:`mnemoflow.lexical`'s formula.

        Why not FTS5 (schema 4): ``bm25()`` took its statistics from the whole file, so a user's ranking moved with
        other users' atoms, and read every row of the file holding a query term to count them (at 10^6 atoms a
        four-word query's terms are in 30,000 rows, median: 72 ms). Matched unranked within the user's rows, FTS5
        still seeks through those terms' file-wide lists (3 ms at 10^6, 9 ms on pages not yet cached). Why not a
        scan of the user's rows (schema 5, never released): it matched every atom of the user, 48 ms p50 for a user
        of 10^4 atoms. The postings of the query's terms within the user (schema 6) are all the scores need; they
        are scored on arrays (:func:`~mnemoflow.lexical.bm25_postings`), and only the best atoms are looked up
        (:meth:`_best`)."""
        wanted = list(dict.fromkeys(terms(text)))
        if not wanted:
            return []
        with self._conn:  # one snapshot: the statistics of the postings scored, and their atoms
            stats = self._conn.execute(_USER_STATS, (tenant, user)).fetchone()
            if stats is None:
                return []
            uid, docs, length = stats
            found = {
                term: np.fromstring(numbers, dtype=np.int64, sep=",").reshape(-1, 3)
                for term, numbers in self._conn.execute(_POSTINGS, (uid, json.dumps(wanted)))
            }
            if not found:
                return []
            rids, scores = bm25_postings(found, wanted, docs, length)
            return self._best(rids, scores, k, types, visible)

    def _best(
        self,
        rids: npt.NDArray[np.int64],
        scores: npt.NDArray[np.float64],
        k: int,
        types: Sequence[str] | None,
        visible: Visible,
    ) -> list[tuple[int, float]]:
        """The ``k`` best of the scored atoms that pass the filters, ties by atom id (the in-memory store's order).
        Atoms are looked up best first, a few times ``k`` at a time, with every atom tied with the last one: what
        is left scores below every atom looked up, so it cannot enter once ``k`` have passed."""
        order = np.argsort(-scores, kind="stable")
        ranked = -scores[order]  # ascending
        kept: list[tuple[float, str, int]] = []
        start, step = 0, max(2 * k, 64)
        while start < len(order) and len(kept) < k:
            end = int(np.searchsorted(ranked, ranked[min(start + step, len(order)) - 1], side="right"))
            top = order[start:end]
            top = top[scores[top] > 0]
            chunk = dict(zip(rids[top].tolist(), scores[top].tolist(), strict=True))
            atoms = self._conn.execute(_LEX_ATOMS, (json.dumps(list(chunk)),))
            kept += [
                (-chunk[rid], atom_id, rid)
                for rid, atom_id, type_, scope in atoms
                if (types is None or type_ in types) and (visible is None or scope in visible)
            ]
            start, step = end, step * 4
        kept.sort()
        return [(rid, -score) for score, _, rid in kept[:k]]

    def _hits(
        self, tenant: str, user: str, ranked: list[tuple[int, float]], dense: bool, visible: Visible
    ) -> list[Hit]:
        rows = self._rows_by_rid(tenant, user, [rid for rid, _ in ranked], visible)
        hits: list[Hit] = []
        for rid, score in ranked:
            if rid in rows:
                rank = len(hits) + 1
                hits.append(
                    Hit(
                        id=rows[rid].id,
                        score=score,
                        row=rows[rid],
                        dense_rank=rank if dense else None,
                        bm25_rank=None if dense else rank,
                    )
                )
        return hits

    @_one_at_a_time
    def dense_search(
        self,
        tenant: str,
        user: str,
        query_vector: Sequence[float],
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        self._fresh()
        check_scope(tenant, user)
        check_k(k)
        seen = check_visible(visible)
        with schema.translate():
            ranked = self._dense(tenant, user, query_vector, k, check_types(types), seen)
            return self._hits(tenant, user, ranked, True, seen)

    @_one_at_a_time
    def bm25_search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        check_scope(tenant, user)
        check_k(k)
        seen = check_visible(visible)
        with schema.translate():
            return self._hits(
                tenant, user, self._bm25(tenant, user, query_text, k, check_types(types), seen), False, seen
            )

    @_one_at_a_time
    def search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        query_vector: Sequence[float],
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        self._fresh()
        check_scope(tenant, user)
        check_k(k)
        depth, wanted, seen = candidate_depth(k, self._candidates), check_types(types), check_visible(visible)
        with schema.translate():
            dense = [rid for rid, _ in self._dense(tenant, user, query_vector, depth, wanted, seen)]
            lexical = [rid for rid, _ in self._bm25(tenant, user, query_text, depth, wanted, seen)]
            fused = rrf_ranks(dense, lexical, k)
            rows = self._rows_by_rid(tenant, user, [rid for rid, *_ in fused], seen)  # only the k winners
        return [
            Hit(id=rows[rid].id, score=s, dense_rank=d, bm25_rank=b, row=rows[rid])
            for rid, s, d, b in fused
            if rid in rows
        ]

    @_one_at_a_time
    def count(self, tenant: str, user: str | None = None) -> int:
        check_scope(tenant, user)
        sql, params = "select count(*) from atoms where tenant = ?", [tenant]
        if user is not None:
            sql, params = sql + " and user = ?", [tenant, user]
        with schema.translate():
            return int(self._conn.execute(sql, params).fetchone()[0])

    @_one_at_a_time
    def reembed(self, embed_fn: EmbedFn, batch_size: int = 256) -> int:
        """Recompute every vector in one transaction: readers see either the old index or the new one."""
        done, last = 0, 0
        with schema.translate(), self._conn:
            self._conn.execute("drop table if exists atoms_vec")
            schema.create_vec(self._conn, self._dim, self._chunk_size)
            while batch := list(
                self._conn.execute(
                    "select rid, tenant, user, type, scope, text, context from atoms "
                    "where rid > ? order by rid limit ?",
                    (last, batch_size),
                )
            ):
                vectors = embed_fn([search_text(rec[5], rec[6]) for rec in batch])
                for (rid, tenant, user, type_, scope, _, _), vec in zip(batch, vectors, strict=True):
                    blob = _blob(check_vector(vec, self._dim))
                    self._conn.execute("update atoms set vec = ? where rid = ?", (blob, rid))
                    schema.insert_vec(self._conn, rid, (tenant, user, type_, scope), blob)
                done, last = done + len(batch), batch[-1][0]
            schema.record_model(self._conn, self._model, self._dim)
        self._stored = (self._model, self._dim)
        return done

    @_one_at_a_time
    def close(self) -> None:
        try:
            self._conn.close()
        except Exception as exc:  # apsw raises its own types; the caller only needs to know it failed
            raise StorageError(f"closing sqlite vector store: {exc}") from exc
