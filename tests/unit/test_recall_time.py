"""Recall orders by time: hits in the span the query names move up, superseded facts go after the current one."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l1.event_time import Span
from mnemoflow.memory.recall.config import RecallConfig
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.memory.recall.supersession import newest_first
from mnemoflow.memory.recall.time_boost import atom_span, boost_in_span
from mnemoflow.ports.vectors import RRF_K, AtomRow, AtomType, Hit
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

T0 = datetime(2023, 5, 1, 12, tzinfo=UTC)
EMB = HashingEmbedder(64)
MAY = Span(date(2023, 5, 1), date(2023, 5, 31))


def row(
    i: int, text: str, created: datetime = T0, vector: list[float] | None = None, kind: AtomType = "episodic"
) -> AtomRow:
    return AtomRow(
        id=f"a{i}",
        tenant="t",
        user="u",
        type=kind,
        priority=60,
        text=text,
        vector=vector or EMB.embed([text])[0],
        created=created,
        updated=created,
        source_message_ids=[f"m{i}"],
    )


def fused(*rows: AtomRow) -> list[Hit]:
    """Hits as hybrid search ranks them: RRF scores of a hit first in both lists, second in both, ..."""
    return [Hit(id=r.id, score=2 / (RRF_K + 1 + n), row=r) for n, r in enumerate(rows)]


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def test_an_atom_is_dated_by_its_event_label_else_by_its_creation_day() -> None:
    assert atom_span(row(1, "Ana ran a race (event: week of 2023-04-24)")) == Span(date(2023, 4, 24), date(2023, 4, 30))
    assert atom_span(row(2, "Ana ran a race (event: nonsense)")) == Span(date(2023, 5, 1), date(2023, 5, 1))


def test_hits_in_the_span_move_up_and_none_is_dropped() -> None:
    april, may = row(1, "Ana ran a race", T0 - timedelta(days=20)), row(2, "Ana ran a marathon")
    tagged = row(3, "Ana ran a relay (event: 2023-05-06)", T0 - timedelta(days=40))
    out = boost_in_span(fused(april, may, tagged), MAY, 1.0)
    assert ids(out) == ["a2", "a3", "a1"]
    assert out[0].score > out[1].score > out[2].score


def test_a_span_no_hit_falls_in_leaves_the_order() -> None:
    hits = fused(row(1, "Ana ran a race"), row(2, "Ana ran a marathon"))
    assert boost_in_span(hits, Span(date(2020, 1, 1), date(2020, 12, 31)), 1.0) == hits


def test_the_boost_is_one_fused_list_not_a_filter() -> None:
    """Hits high in both retrievers keep their places against an in-span hit found by one retriever only, which
    still passes the hits found by one retriever above it."""
    top, second = fused(*(row(i, f"fact {i}", T0 - timedelta(days=60)) for i in range(2)))
    weak = Hit(id="a2", score=1 / (RRF_K + 5), row=row(2, "fact two", T0 - timedelta(days=60)))
    late = Hit(id="a99", score=1 / (RRF_K + 30), row=row(99, "fact in may"))
    assert ids(boost_in_span([top, second, weak, late], MAY, 1.0)) == ["a0", "a1", "a99", "a2"]


def test_recall_boosts_the_time_the_query_names_against_the_clock(tmp_path: Path) -> None:
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert(
        [
            row(1, "Ana went hiking in the hills", T0 - timedelta(days=40)),
            row(2, "Ana went hiking with Bo (event: 2023-04-26)", T0 - timedelta(days=60)),
        ]
    )
    rec = Recaller(store=store, embedder=EMB, files=LocalFileStore(tmp_path), clock=ManualClock(T0 + timedelta(days=3)))
    plain = RecallConfig(supersede=False)
    assert ids(rec.hits("t", "u", "Ana went hiking in the hills", config=plain))[0] == "a1"
    assert ids(rec.hits("t", "u", "Ana went hiking in the hills last week", config=plain))[0] == "a2"
    asked_later = T0 + timedelta(days=400)  # a caller's now: "last week" is then another week
    assert ids(rec.hits("t", "u", "Ana went hiking in the hills last week", config=plain, now=asked_later))[0] == "a1"
    off = plain.model_copy(update={"time_weight": 0.0})
    assert ids(rec.hits("t", "u", "Ana went hiking in the hills last week", config=off))[0] == "a1"


def test_the_newer_of_two_hits_about_the_same_thing_takes_the_better_place() -> None:
    base = EMB.embed(["sneakers"])[0]
    old = row(1, "I keep my old sneakers under the bed", T0, base)
    other = row(2, "I like tea", T0 + timedelta(days=5))
    new = row(3, "I moved my old sneakers to the closet rack", T0 + timedelta(days=9), [x * 0.9 for x in base])
    hits = fused(old, other, new)
    out = newest_first(hits, 0.75)
    assert ids(out) == ["a3", "a2", "a1"]
    assert [h.score for h in out] == [h.score for h in hits]  # the group keeps its places and scores
    persona = row(3, "I moved my old sneakers to the closet rack", new.updated, base, kind="persona")
    assert newest_first(fused(old, other, persona), 0.75) == fused(old, other, persona)  # another type
    assert newest_first(hits, 1.01) == hits  # nothing that close


def test_recall_puts_the_current_fact_first(tmp_path: Path) -> None:
    base = EMB.embed(["sneakers"])[0]
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert(
        [
            row(1, "I keep my old sneakers under the bed", T0, base),
            row(2, "Sneakers now sit on the closet rack", T0 + timedelta(days=9), base),
        ]
    )
    rec = Recaller(store=store, embedder=EMB, files=LocalFileStore(tmp_path))
    query = "where do I keep my old sneakers"
    assert ids(rec.hits("t", "u", query, config=RecallConfig(supersede=False))) == ["a1", "a2"]
    assert ids(rec.hits("t", "u", query)) == ["a2", "a1"]
