"""Recall's answer to superseded facts: among hits about the same thing, the newest takes the best place.

Why here and not only in dedup: dedup replaces an atom when the judge says the new one updates it, but a fact that
changed in other words ("my sneakers are under the bed", later "I moved my sneakers to the closet rack") is often
judged a separate memory, so both stay in the index and the old one can outrank the current one (LongMemEval's
knowledge-update questions). Recall cannot know which fact is current, but it can order what dedup left:

* "the same thing" is the same type and a cosine in the upper half of the band dedup sends to its judge (at or
  above the middle of ``store_below`` and ``skip_similarity``, calibrated per embedding model by
  :meth:`~mnemoflow.memory.l1.dedup.DedupConfig.for_model`), joined transitively among the hits. The band's lower
  edge is too loose: on LoCoMo conv-26 with e5 (0.93) it reordered distinct events of one person and recall@10
  fell from 0.600 to 0.580; at the middle (0.954) it changed no LoCoMo question;
* within such a group the members keep the group's places and scores, reassigned newest first (by ``updated``,
  the last time the fact was written), so nothing else in the list moves and no hit is dropped.
"""

from __future__ import annotations

import math
from operator import mul

from mnemoflow.memory.l1.dedup import DedupConfig
from mnemoflow.ports.vectors import Hit


def same_thing_similarity(embedding_model: str) -> float:
    """The cosine from which two hits are taken to be about the same thing, for this embedding model."""
    gate = DedupConfig.for_model(embedding_model)
    return (gate.store_below + gate.skip_similarity) / 2


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(map(mul, vector, vector))) or 1.0
    return [x / norm for x in vector]


def _groups(hits: list[Hit], similarity: float) -> list[list[int]]:
    """Positions of ``hits`` joined by same type and cosine ≥ ``similarity`` (connected components).

    Each vector is normalised once and pairs cost a dot product: a full cosine per pair (norms included) took
    0.4 ms in pure Python on a busy machine, and a list of k hits has k(k-1)/2 pairs."""
    parent = list(range(len(hits)))
    units = [_unit(h.row.vector) for h in hits]

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, a in enumerate(hits):
        for j in range(i + 1, len(hits)):
            b = hits[j]
            if a.row.type == b.row.type and sum(map(mul, units[i], units[j])) >= similarity:
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(len(hits)):
        groups.setdefault(root(i), []).append(i)
    return [g for g in groups.values() if len(g) > 1]


def newest_first(hits: list[Hit], similarity: float) -> list[Hit]:
    """``hits`` (best first) with each group of same-thing hits reordered newest first in the group's places."""
    out = list(hits)
    for places in _groups(hits, similarity):
        members = sorted((hits[i] for i in places), key=lambda h: h.row.updated, reverse=True)
        for place, member in zip(places, members, strict=True):
            out[place] = member.model_copy(update={"score": hits[place].score})
    return out
