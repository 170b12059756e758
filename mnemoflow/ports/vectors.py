"""Vector store port: the L1 atom index (docs/DESIGN.md §5), dense + BM25, always scoped to one tenant and one user.

Why a port: the index has two adapters that must behave the same (Milvus for the cluster shape, SQLite for
one file shared by several processes), plus an in-memory reference used by unit tests. The contract below
is checked by ``tests/unit/test_store_contract.py`` against every backend.

Contract (every adapter):

* **Sync.** Every method blocks. The stores are embedded (sqlite-vec, Milvus Lite) or a short gRPC call;
  callers in async code run them in a worker thread explicitly rather than through fake ``async`` twins.
* **Scoped.** Every read and write names ``tenant`` and ``user``; an atom id is unique only inside that pair.
  There is no call that searches, reads or deletes across users: the scope is part of every query, not an
  optional filter.
* **Visible.** Inside a user, each row has a :data:`~mnemoflow.scopes.Scope` (``shared``, ``team:<id>``,
  ``agent:<id>``; docs/concepts/scopes.md). The searches take ``visible``, the scopes the caller may see
  (:meth:`~mnemoflow.scopes.Viewer.scopes`), and apply it inside the engine's query, before ranking and the cut at
  ``k``, as they apply the user: no hit of another scope is returned, and none takes a place in the top k. None is
  every scope of the user (an admin, or a fleet with no named agent); an empty list is refused.
* **Fixed dimension and embedding model.** A store is opened with ``dim`` and ``embedding_model``; both are
  stored in the index metadata. A row of the wrong dimension raises :class:`~mnemoflow.errors.InvalidInput`.
  Opening an index built with another model does not fail, but every search or upsert then raises
  :class:`EmbeddingModelMismatch` until ``reembed(embed_fn)`` has recomputed all vectors: vectors of two models
  are never mixed or silently dropped.
* **Idempotent upsert.** Upserting the same row twice leaves one row; upserting a known id replaces it.
* **Hybrid search** fuses a dense (cosine) list and a BM25 list with Reciprocal Rank Fusion,
  ``score = sum(1 / (60 + rank))`` over the lists an atom appears in (ranks are 1-based).
* **Errors** are :class:`~mnemoflow.errors.MnemoflowError` subclasses; vendor exceptions are translated at the
  adapter boundary (``StorageError`` for I/O and engine failures).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from mnemoflow.errors import ConfigError
from mnemoflow.scopes import SHARED, Scope

AtomType = Literal["persona", "episodic", "instruction"]
ATOM_TYPES: tuple[AtomType, ...] = ("persona", "episodic", "instruction")
RRF_K = 10
"""The RRF constant (Cormack et al. 2009 used 60, Milvus' ``RRFRanker`` defaults to it). Why 10: each list is cut
at 50 candidates and recall keeps 10, so with 60 an atom found by one retriever near the top (dense rank 2, no BM25
term in common) lost to any atom both lists found in their middle (ranks 30 and 30); on LoCoMo dev the hybrid's
recall@10 was 0.772 with 60, 0.779 with 20, 0.788 with 10, 0.781 with 5 (the Chinese set 0.970 at 10 to 60)."""

EmbedFn = Callable[[Sequence[str]], Sequence[Sequence[float]]]
"""Embeds a batch of texts; used by ``reembed``. Must return one vector of the store's dimension per text."""
MAX_CONTEXT = 1000


def search_text(text: str, context: str) -> str:
    """What an atom is found by: its text, then the context it was said in (empty for most model atoms).

    Why apart from the text: a statement such as "Yes, twice, it was great!" means something only after the turn
    it answers. Embedding and BM25 over text plus context find it by the question's words (on LoCoMo's raw turns,
    adding the turn before raised hybrid recall@10 from 0.672 to 0.727, the two turns before to 0.770), while
    recall shows the text alone, so an atom costs the prompt no more tokens than before."""
    return f"{text}\n{context}" if context else text


def _check_scope_part(value: str) -> str:
    """Tenant and user ids end up inside SQL parameters and Milvus filter literals; refuse control characters."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("must not contain control characters")
    return value


ScopeId = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_check_scope_part)]


class EmbeddingModelMismatch(ConfigError):
    """The index was built with another embedding model (or dimension) than the one configured.

    Vectors from two models are not comparable. Call ``store.reembed(embed_fn)`` with the configured model to
    recompute every vector, or configure the model the index was built with.
    """


class AtomRow(BaseModel):
    """One L1 atom as the index stores it. Vectors are kept at float32 precision, as every backend stores them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: ScopeId
    tenant: ScopeId
    user: ScopeId
    type: AtomType
    priority: int = Field(ge=-1, le=100)
    text: str = Field(min_length=1, max_length=8000)
    context: str = Field(default="", max_length=MAX_CONTEXT)
    """Searched, not shown (:func:`search_text`): the turn the statement followed."""
    vector: list[float] = Field(min_length=1)
    created: datetime
    updated: datetime
    source_message_ids: list[str] = Field(default_factory=list)
    scope: Scope = SHARED
    """Who may find it (docs/concepts/scopes.md); a row from before scopes is shared."""

    @property
    def search_text(self) -> str:
        return search_text(self.text, self.context)

    @field_validator("vector")
    @classmethod
    def _float32(cls, v: list[float]) -> list[float]:
        # Round once here so that a row read back from any backend compares equal to the row written.
        return array("f", v).tolist()

    @field_validator("created", "updated")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None or v.utcoffset() is None:
            raise ValueError("timestamps must be timezone-aware")
        return v


class Hit(BaseModel):
    """A search result. ``score`` is the RRF score for hybrid search, cosine similarity for dense search and
    the (positive, larger is better) BM25 score for BM25 search. Ranks are 1-based positions in each list, None
    when the atom was not in that list or when the backend fused server-side and does not report them."""

    model_config = ConfigDict(frozen=True)

    id: str
    score: float
    dense_rank: int | None = None
    bm25_rank: int | None = None
    row: AtomRow


@runtime_checkable
class VectorStore(Protocol):
    """The L1 atom index. Sync; every call is scoped to one (tenant, user). See the module docstring."""

    @property
    def dim(self) -> int:
        """Dimension of every vector in this store."""
        ...

    @property
    def embedding_model(self) -> str:
        """Name of the embedding model the caller configured (and, after ``reembed``, the index holds)."""
        ...

    def upsert(self, rows: Sequence[AtomRow]) -> None:
        """Insert or replace rows keyed by (tenant, user, id). Raises InvalidInput on a wrong dimension."""
        ...

    def delete(self, tenant: str, user: str, ids: Sequence[str]) -> int:
        """Delete these ids of this user; unknown ids are ignored. Returns how many rows were removed."""
        ...

    def get(self, tenant: str, user: str, ids: Sequence[str]) -> list[AtomRow]:
        """Rows of this user with these ids, in the order asked, unknown ids skipped."""
        ...

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
        """Hybrid search: dense and BM25 candidates of this user in ``visible`` scopes fused with RRF, best first,
        at most k."""
        ...

    def dense_search(
        self,
        tenant: str,
        user: str,
        query_vector: Sequence[float],
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Cosine nearest neighbours of this user only (for benchmarks and the dedup similarity gate)."""
        ...

    def bm25_search(
        self,
        tenant: str,
        user: str,
        query_text: str,
        k: int,
        types: Sequence[AtomType] | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[Hit]:
        """BM25 over atom text of this user only; a query with no word characters returns []."""
        ...

    def count(self, tenant: str, user: str | None = None) -> int:
        """Number of rows of a tenant, or of one user of it."""
        ...

    def reembed(self, embed_fn: EmbedFn, batch_size: int = 256) -> int:
        """Recompute every vector with ``embed_fn`` and record ``embedding_model`` in the index. Returns rows done."""
        ...

    def close(self) -> None:
        """Release files and connections. The store is unusable afterwards."""
        ...
