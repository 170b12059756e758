"""Recall strategies as declarative config plus named recipes (docs/STYLE.md, item 12), so benchmarks compare configs.

A :class:`RecallConfig` says which retrievers run, how they fuse, how many hits, how time and supersession reorder
them, and the character and time budgets of the injected context. :data:`RECIPES` names the configurations the
bench reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.memory.recall.query_time import query_span
from mnemoflow.memory.recall.subject_boost import boost_named_subjects
from mnemoflow.memory.recall.supersession import newest_first, same_thing_similarity
from mnemoflow.memory.recall.time_boost import boost_in_span
from mnemoflow.ports.vectors import AtomType, Hit, VectorStore

Method = Literal["bm25", "vector"]


class RecallConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    methods: tuple[Method, ...] = Field(("bm25", "vector"), min_length=1)
    fusion: Literal["rrf"] = "rrf"
    k: int = Field(5, ge=1, le=100)
    types: tuple[AtomType, ...] | None = None
    min_query_chars: int = 2
    max_query_chars: int = Field(500, ge=1)
    """Recall searches with the query's head: embedding costs ~1.3 ms of CPU per token here, so the 3.6k-character
    task description an agent opens with took 1.0-1.4 s to embed, past ``timeout_s`` (no hits at all); its first
    500 characters take ~150 ms. Longer than any LoCoMo, LongMemEval or Chinese-set question (287 at most)."""
    min_vector_score: float = Field(0.0, ge=-1, le=1)
    """Cosine floor for the vector-only strategy (the spec uses 0.3); fused results have no floor."""
    max_line_chars: int = Field(400, ge=40)
    max_prepend_chars: int = Field(2400, ge=0)
    max_persona_chars: int = Field(2000, ge=0)
    max_navigation_chars: int = Field(1500, ge=0)
    timeout_s: float = Field(1.0, gt=0)
    """Search budget; on timeout recall returns no hits but persona and navigation are still injected."""
    embed_deadline_s: float = Field(0.5, gt=0)
    """The query embedding's share of ``timeout_s``: missed, recall answers from BM25 alone and says so
    (``RecallResult.degraded``) rather than wait, since an embedder queued behind extraction on two busy cores
    must not cost the agent its hits. The embedding still finishes in the background and a query cache keeps it
    for the next recall of the same message."""
    time_weight: float = Field(1.0, ge=0)
    """Weight of the time boost (:mod:`~mnemoflow.memory.recall.time_boost`) when the query names a time; 0 turns
    it off. Fused search only: it is an RRF term."""
    time_slack_days: int = Field(3, ge=0)
    """The query's span is widened by this many days each side: an atom is often dated by the day it was said."""
    subject_weight: float = Field(1.0, ge=0)
    """Weight of the subject boost (:mod:`~mnemoflow.memory.recall.subject_boost`): hits whose subject the query
    names move up; 0 turns it off. Fused search only."""
    boost_depth: int = Field(30, ge=1, le=100)
    """Fused hits searched when a boost may apply, so a boosted hit from below the top k can move up."""
    supersede: bool = True
    """Order hits about the same thing newest first (:mod:`~mnemoflow.memory.recall.supersession`)."""


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
    now: datetime | None = None,
    visible: Sequence[str] | None = None,
) -> list[Hit]:
    """Run the configured retrievers for one user and return fused hits, best first: boosted towards the time
    the query names (resolved against ``now``; none without it) and towards the people it names, with superseded
    facts after current ones. ``visible``: the scopes the caller may see (:meth:`~mnemoflow.scopes.Viewer.scopes`),
    applied inside the store's query; None is every scope."""
    k = k or config.k
    fused = vector is not None and set(config.methods) == {"bm25", "vector"}
    wanted = query_span(query, now) if fused and now is not None and config.time_weight > 0 else None
    subjects = fused and config.subject_weight > 0
    depth = max(k, config.boost_depth) if wanted or subjects else k
    hits = _retrieve(store, tenant, user, query, vector, config, depth, visible)
    if wanted:
        hits = boost_in_span(hits, wanted.widened(config.time_slack_days), config.time_weight)
    if subjects:
        hits = boost_named_subjects(hits, query, config.subject_weight)
    hits = hits[:k]
    if config.supersede:
        hits = newest_first(hits, same_thing_similarity(store.embedding_model))
    return hits


def _retrieve(
    store: VectorStore,
    tenant: str,
    user: str,
    query: str,
    vector: Sequence[float] | None,
    config: RecallConfig,
    k: int,
    visible: Sequence[str] | None,
) -> list[Hit]:
    if vector is not None and "vector" in config.methods:
        if "bm25" in config.methods:
            return store.search(tenant, user, query, vector, k, config.types, visible)
        hits = store.dense_search(tenant, user, vector, k, config.types, visible)
        return [h for h in hits if h.score >= config.min_vector_score]
    return store.bm25_search(tenant, user, query, k, config.types, visible)
