"""Recall's subject boost: hits about the person the query names move up, none are dropped.

Why: atoms name whom they are about (``Caroline: I went to a support group``, ``Assistant: The GR-90 trail ...``,
issue 14), but retrieval ranks by topic: for "What has Melanie painted?" every atom about painting competes,
Caroline's remarks on Melanie's paintings among them. When recall runs over several people's memories (the two
speakers of a LoCoMo conversation, merged by fused score), or over one memory whose atoms have different
subjects (the user and the assistant), the person the query names is the strongest clue of which atoms it asks
about. Measured on LoCoMo dev (both speakers' memories, merged): hybrid recall@10 0.788 without the boost, 0.824
with it; in 96 of the 173 questions it missed, the question named one speaker, the evidence was that speaker's,
and most of the top 10 were the other speaker's atoms. Within one memory whose atoms all have the same subject the
boost moves every hit alike and changes nothing.

Like the time boost (:mod:`mnemoflow.memory.recall.time_boost`) it is a Reciprocal Rank Fusion list added with a
weight, so a hit first in both retrievers can still outrank a boosted hit found by one. The subject is the leading
name L1 writes (:mod:`mnemoflow.memory.l1.subject`); a capitalised label such as ``Note:`` counts as one and
moves its atoms only for a query that says "note".
"""

from __future__ import annotations

import re

from mnemoflow.memory.l1.subject import subject
from mnemoflow.ports.vectors import RRF_K, Hit


def names(query: str, name: str) -> bool:
    """Whether ``query`` names ``name``: as a whole word in spaced scripts, as written in Chinese."""
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", query, re.IGNORECASE) is not None or (
        not name.isascii() and name in query
    )


def boost_named_subjects(hits: list[Hit], query: str, weight: float) -> list[Hit]:
    """``hits`` (fused, best first) with ``weight / (RRF_K + n)`` added to the n-th hit whose subject the query
    names, re-sorted. Ties keep the fused order (a stable sort), so a query naming nobody changes nothing."""
    boosted, n, seen = [], 0, {}
    for h in hits:
        who = subject(h.row.text)
        if who is not None:
            if who not in seen:
                seen[who] = names(query, who)
            if seen[who]:
                n += 1
                h = h.model_copy(update={"score": h.score + weight / (RRF_K + n)})
        boosted.append(h)
    return sorted(boosted, key=lambda h: -h.score)
