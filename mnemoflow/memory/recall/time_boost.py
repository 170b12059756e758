"""Recall's time boost: hits whose time falls in the span the query asks about move up, none are dropped.

Why a boost and not a filter: the query's time expression is parsed by rules and the atom's time is often only the
day it was said, so either can be wrong; a filter would then return nothing, a boost only reorders. The boost is a
third Reciprocal Rank Fusion list (the in-span hits, in their fused order) added with a weight, so it is on the
scale of the fused score and a hit first in both retrievers can still outrank an in-span hit found by one.

An atom's time is the event label L1 wrote into its text (``(event: 2023-05-07)``,
:func:`mnemoflow.memory.l1.event_time.tagged`), else the day it was stored. The label is read from the text rather
than from an index column because the row schema is shared by the SQLite and Milvus adapters and their existing
indexes (a column would mean a migration of both for a value the text already holds); for the heuristic engine,
which runs in step with the conversation, the stored day is the day it was said.
"""

from __future__ import annotations

from datetime import UTC

from mnemoflow.memory.l1.event_time import Span, span, tagged
from mnemoflow.ports.vectors import RRF_K, AtomRow, Hit


def atom_span(row: AtomRow) -> Span:
    """The days an atom is about: its event label's span, else the day it was created."""
    label = tagged(row.text)
    found = span(label) if label else None
    if found:
        return found
    day = row.created.astimezone(UTC).date()
    return Span(day, day)


def boost_in_span(hits: list[Hit], wanted: Span, weight: float) -> list[Hit]:
    """``hits`` (fused, best first) with ``weight / (RRF_K + n)`` added to the n-th hit in ``wanted``, re-sorted.

    Ties keep the fused order (a stable sort), so with no hit in the span the list is unchanged."""
    boosted, n = [], 0
    for h in hits:
        if atom_span(h.row).overlaps(wanted):
            n += 1
            h = h.model_copy(update={"score": h.score + weight / (RRF_K + n)})
        boosted.append(h)
    return sorted(boosted, key=lambda h: -h.score)
