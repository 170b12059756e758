"""In-memory VectorStore: brute-force cosine and a small BM25, the reference the other adapters are tested against.

Why pure Python: it is the fake the unit tests of every other package use (docs/STYLE.md, item 16), so it must import
with no optional dependency and be obviously correct rather than fast. Rows live in an
:class:`InMemoryIndex`; two stores opened on the same index behave like two opens of one file, which is how
the contract tests check the embedding-model guard.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemoflow.errors import StorageError
from mnemoflow.index._common import (
    StoreIdentity,
    check_k,
    check_rows,
    check_scope,
    check_types,
    check_vector,
    check_visible,
    with_vector,
)
from mnemoflow.lexical import bm25_scores
from mnemoflow.ports.vectors import AtomRow, AtomType, EmbedFn, Hit


@dataclass
class InMemoryIndex:
    """The 'file' behind an in-memory store: rows per (tenant, user) plus the index metadata."""

    dim: int | None = None
    embedding_model: str | None = None
    rows: dict[tuple[str, str], dict[str, AtomRow]] = field(default_factory=dict)


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class InMemoryVectorStore(StoreIdentity):
    """Reference :class:`~mnemoflow.ports.vectors.VectorStore`. Sync, single process, not persistent."""

    def __init__(
        self, *, dim: int, embedding_model: str, index: InMemoryIndex | None = None, candidates: int = 50
    ) -> None:
        self._dim = dim
        self._model = embedding_model
        self._index = index if index is not None else InMemoryIndex()
        self._candidates = candidates
        self._closed = False
        if self._index.embedding_model is None:
            self._index.embedding_model, self._index.dim = embedding_model, dim

    def _live(self) -> None:
        if self._closed:
            raise StorageError("store is closed")

    @property
    def _stored(self) -> tuple[str | None, int | None]:  # type: ignore[override]  # a property for the base's field
        return self._index.embedding_model, self._index.dim

    def _fresh(self) -> None:
        self._live()
        super()._fresh()

    def _scope(self, tenant: str, user: str) -> dict[str, AtomRow]:
        check_scope(tenant, user)
        return self._index.rows.get((tenant, user), {})

    def upsert(self, rows: Sequence[AtomRow]) -> None:
        self._fresh()
        for row in check_rows(rows, self._dim):
            self._index.rows.setdefault((row.tenant, row.user), {})[row.id] = row

    def delete(self, tenant: str, user: str, ids: Sequence[str]) -> int:
        self._live()
        scope = self._scope(tenant, user)
        return sum(scope.pop(i, None) is not None for i in set(ids))

    def get(self, tenant: str, user: str, ids: Sequence[str]) -> list[AtomRow]:
        self._live()
        scope = self._scope(tenant, user)
        return [scope[i] for i in ids if i in scope]

    def _candidates_of(
        self, tenant: str, user: str, types: Sequence[AtomType] | None, visible: Sequence[str] | None
    ) -> list[AtomRow]:
        wanted, seen = check_types(types), check_visible(visible)
        rows = self._scope(tenant, user).values()
        return [r for r in rows if (wanted is None or r.type in wanted) and (seen is None or r.scope in seen)]

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
        check_k(k)
        q = check_vector(query_vector, self._dim)
        scored = [(_cosine(q, r.vector), r) for r in self._candidates_of(tenant, user, types, visible)]
        scored.sort(key=lambda sr: (-sr[0], sr[1].id))
        return [Hit(id=r.id, score=s, dense_rank=i, row=r) for i, (s, r) in enumerate(scored[:k], start=1)]

    def bm25_search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        self._live()
        check_k(k)
        wanted, seen = check_types(types), check_visible(visible)
        # Collection statistics are per user, over every scope and type: the population a query ranks within, as in
        # SQLite; a filter chooses the hits, not the statistics (Milvus' span its whole collection).
        rows = list(self._scope(tenant, user).values())
        scored = [
            (s, r)
            for s, r in zip(bm25_scores(query_text, [r.search_text for r in rows]), rows, strict=True)
            if s > 0 and (wanted is None or r.type in wanted) and (seen is None or r.scope in seen)
        ]
        scored.sort(key=lambda sr: (-sr[0], sr[1].id))
        return [Hit(id=r.id, score=s, bm25_rank=i, row=r) for i, (s, r) in enumerate(scored[:k], start=1)]

    def count(self, tenant: str, user: str | None = None) -> int:
        self._live()
        check_scope(tenant, user)
        return sum(len(rows) for (t, u), rows in self._index.rows.items() if t == tenant and user in (None, u))

    def reembed(self, embed_fn: EmbedFn, batch_size: int = 256) -> int:
        self._live()
        done = 0
        for scope in self._index.rows.values():
            rows = list(scope.values())
            for start in range(0, len(rows), batch_size):
                batch = rows[start : start + batch_size]
                vectors = embed_fn([r.search_text for r in batch])
                for row, vec in zip(batch, vectors, strict=True):
                    check_vector(vec, self._dim)
                    scope[row.id] = with_vector(row, vec)
                done += len(batch)
        self._index.embedding_model, self._index.dim = self._model, self._dim
        return done

    def close(self) -> None:
        self._closed = True
