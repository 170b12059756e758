"""Helpers every store adapter shares: argument checks and Reciprocal Rank Fusion (terms: :mod:`mnemoflow.lexical`).

Why shared: the contract tests compare backends, so the checks and the fusion must be the same code,
not three copies that drift.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Hashable, Sequence
from typing import Any

from mnemoflow.errors import InvalidInput
from mnemoflow.ports.vectors import ATOM_TYPES, RRF_K, AtomRow, AtomType, EmbeddingModelMismatch, Hit
from mnemoflow.scopes import SCOPE_PATTERN

MAX_K = 1000


def user_key(tenant: str, user: str) -> str:
    """One alphanumeric token naming (tenant, user): the vec0 partition key."""
    return "u" + hashlib.sha256(f"{tenant}\x1f{user}".encode()).hexdigest()[:32]


def check_scope(tenant: str, user: str | None) -> None:
    """Refuse empty scopes, so no call can mean 'every user'."""
    if not isinstance(tenant, str) or not tenant:
        raise InvalidInput("tenant must be a non-empty string")
    if user is not None and (not isinstance(user, str) or not user):
        raise InvalidInput("user must be a non-empty string")


def check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise InvalidInput(f"k must be an int in 1..{MAX_K}, got {k!r}")


def check_types(types: Sequence[AtomType] | None) -> tuple[AtomType, ...] | None:
    """None means every type; an empty list is refused (it would silently match nothing)."""
    if types is None:
        return None
    out = tuple(types)
    bad = [t for t in out if t not in ATOM_TYPES]
    if bad or not out:
        raise InvalidInput(f"types must be a non-empty subset of {ATOM_TYPES}, got {list(types)!r}")
    return out


_SCOPE_RE = re.compile(SCOPE_PATTERN)


def check_visible(visible: Sequence[str] | None) -> tuple[str, ...] | None:
    """None means every scope of the user; an empty list is refused (it would silently match nothing), and so is a
    malformed scope (it could only come from a bug upstream, and must never reach a filter expression)."""
    if visible is None:
        return None
    out = tuple(dict.fromkeys(visible))
    bad = [s for s in out if not isinstance(s, str) or not _SCOPE_RE.match(s)]
    if bad or not out:
        raise InvalidInput(f"visible must be a non-empty list of scopes (shared, team:<id>, agent:<id>): {visible!r}")
    return out


def check_vector(vector: Sequence[float], dim: int) -> list[float]:
    if len(vector) != dim:
        raise InvalidInput(f"vector has dimension {len(vector)}, this store holds {dim}")
    return [float(x) for x in vector]


def check_rows(rows: Sequence[AtomRow], dim: int) -> list[AtomRow]:
    """Validate dimensions and keep the last row per key, so a batch with a repeated id behaves like two upserts."""
    out: dict[tuple[str, str, str], AtomRow] = {}
    for row in rows:
        if not isinstance(row, AtomRow):
            raise InvalidInput(f"expected AtomRow, got {type(row).__name__}")
        if len(row.vector) != dim:
            raise InvalidInput(f"atom {row.id!r} has dimension {len(row.vector)}, this store holds {dim}")
        out[(row.tenant, row.user, row.id)] = row
    return list(out.values())


def rrf_ranks(
    dense: Sequence[Hashable], bm25: Sequence[Hashable], k: int
) -> list[tuple[Any, float, int | None, int | None]]:
    """RRF over two ranked key lists: ``(key, score, dense_rank, bm25_rank)``, best first, ties by key.

    Works on keys so an adapter can fuse before it fetches rows, and fetch only the k winners."""
    score: dict[Any, float] = {}
    ranks: tuple[dict[Any, int], dict[Any, int]] = ({}, {})
    for seen, keys in zip(ranks, (dense, bm25), strict=True):
        for pos, key in enumerate(keys, start=1):
            seen[key] = pos
            score[key] = score.get(key, 0.0) + 1.0 / (RRF_K + pos)
    order = sorted(score, key=lambda key: (-score[key], key))[:k]
    return [(key, score[key], ranks[0].get(key), ranks[1].get(key)) for key in order]


def rrf_fuse(dense: Sequence[Hit], bm25: Sequence[Hit], k: int) -> list[Hit]:
    """Reciprocal Rank Fusion of two hit lists; ties broken by id so results are deterministic."""
    rows = {h.id: h.row for h in [*dense, *bm25]}
    fused = rrf_ranks([h.id for h in dense], [h.id for h in bm25], k)
    return [Hit(id=i, score=s, dense_rank=d, bm25_rank=b, row=rows[i]) for i, s, d, b in fused]


def with_vector(row: AtomRow, vector: Sequence[float]) -> AtomRow:
    """A copy of ``row`` with a new vector, validated (and float32-rounded) like any other row."""
    return AtomRow.model_validate({**row.model_dump(), "vector": list(vector)})


def candidate_depth(k: int, candidates: int) -> int:
    """How deep each list is searched before fusion: at least k, at least ``candidates``."""
    return max(k, candidates)


class StoreIdentity:
    """What every adapter shares: its configured dimension and embedding model, the pair the index was built with
    (``_stored``), and the check that refuses to compare vectors of two models."""

    _dim: int
    _model: str
    _candidates: int
    _stored: tuple[str | None, int | None]

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def embedding_model(self) -> str:
        return self._model

    def _fresh(self) -> None:
        if self._stored != (self._model, self._dim):
            raise EmbeddingModelMismatch(
                f"index holds {self._stored[0]!r} (dim {self._stored[1]}), store is configured for "
                f"{self._model!r} (dim {self._dim}); call reembed(embed_fn)"
            )

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
        """Hybrid search fused in Python: dense and BM25 lists of ``candidate_depth`` each, then RRF. Adapters
        that fuse inside their engine override it."""
        check_k(k)
        depth = candidate_depth(k, self._candidates)
        # The adapter class that mixes this in defines both searches (a stub here would shadow them in the MRO).
        dense = self.dense_search(tenant, user, query_vector, depth, types, visible)  # type: ignore[attr-defined]
        lexical = self.bm25_search(tenant, user, query_text, depth, types, visible)  # type: ignore[attr-defined]
        return rrf_fuse(dense, lexical, k)
