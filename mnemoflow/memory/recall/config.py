"""Recall strategies as declarative config plus named recipes (docs/STYLE.md, item 12), so benchmarks compare configs.

A :class:`RecallConfig` says which retrievers run, how they fuse, how many hits, and the character and time
budgets of the injected context. :data:`RECIPES` names the configurations the bench reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.ports.vectors import AtomType, Hit, VectorStore

Method = Literal["bm25", "vector"]


class RecallConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    methods: tuple[Method, ...] = Field(("bm25", "vector"), min_length=1)
    fusion: Literal["rrf"] = "rrf"
    k: int = Field(5, ge=1, le=100)
    types: tuple[AtomType, ...] | None = None
    min_query_chars: int = 2
    min_vector_score: float = Field(0.0, ge=-1, le=1)
    """Cosine floor for the vector-only strategy (the spec uses 0.3); fused results have no floor."""
    max_line_chars: int = Field(400, ge=40)
    max_prepend_chars: int = Field(2400, ge=0)
    max_persona_chars: int = Field(2000, ge=0)
    max_navigation_chars: int = Field(1500, ge=0)
    timeout_s: float = Field(1.0, gt=0)
    """Search budget; on timeout recall returns no hits but persona and navigation are still injected."""


RECIPES: dict[str, RecallConfig] = {
    "hybrid_rrf": RecallConfig(),
    "bm25": RecallConfig(methods=("bm25",)),
    "vector": RecallConfig(methods=("vector",), min_vector_score=0.3),
}


def search_hits(
    store: VectorStore,
    tenant: str,
    user: str,
    query: str,
    vector: Sequence[float] | None,
    config: RecallConfig,
    k: int | None = None,
) -> list[Hit]:
    """Run the configured retrievers for one user and return fused hits, best first."""
    k = k or config.k
    if vector is not None and "vector" in config.methods:
        if "bm25" in config.methods:
            return store.search(tenant, user, query, vector, k, config.types)
        hits = store.dense_search(tenant, user, vector, k, config.types)
        return [h for h in hits if h.score >= config.min_vector_score]
    return store.bm25_search(tenant, user, query, k, config.types)
