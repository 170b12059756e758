"""Recall prefers the person the query names: hits whose subject is named move up, none is dropped."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l1.subject import subject
from mnemoflow.memory.recall.config import RecallConfig
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.memory.recall.subject_boost import boost_named_subjects, names
from mnemoflow.ports.vectors import RRF_K, AtomRow, Hit
from mnemoflow.storage import LocalFileStore

T0 = datetime(2023, 5, 1, 12, tzinfo=UTC)
EMB = HashingEmbedder(64)


def row(i: int, text: str, user: str = "u") -> AtomRow:
    return AtomRow(
        id=f"a{i}",
        tenant="t",
        user=user,
        type="episodic",
        priority=60,
        text=text,
        vector=EMB.embed([text])[0],
        created=T0,
        updated=T0,
        source_message_ids=[f"m{i}"],
    )


def fused(*rows: AtomRow) -> list[Hit]:
    return [Hit(id=r.id, score=2 / (RRF_K + 1 + n), row=r) for n, r in enumerate(rows)]


@pytest.mark.parametrize(
    ("text", "who"),
    [
        ("Caroline: I went to a support group.", "Caroline"),
        ("Mary Ann Lee: I moved to Leeds.", "Mary Ann Lee"),
        ("Assistant: The GR-90 trail crosses the park.", "Assistant"),
        ("李娜: 我下周六去杭州。", "李娜"),
        ("Note: always answer briefly", "Note"),
        ("note: lower case is no name", None),
        ("https://example.com: a link", None),
        ("I went hiking: it was great", None),
        ("Caroline said: hello", None),  # "Caroline said" is not a capitalised name
    ],
)
def test_the_subject_is_a_leading_name(text: str, who: str | None) -> None:
    assert subject(text) == who


def test_a_query_names_a_person_as_a_whole_word_or_as_written_in_chinese() -> None:
    assert names("What has Melanie painted?", "Melanie")
    assert not names("What has Melanies painted?", "Melanie")
    assert names("李娜下周去哪里？", "李娜")
    assert not names("Where did Mel go?", "Melanie")


def test_hits_about_the_named_person_move_up_and_none_is_dropped() -> None:
    other = [row(1, "Caroline: Wow, Melanie, your painting is lovely."), row(2, "Caroline: I paint on Sundays.")]
    hers = row(3, "Melanie: I painted a horse last month.")
    out = boost_named_subjects(fused(*other, hers), "What has Melanie painted?", 1.0)
    assert [h.id for h in out] == ["a3", "a1", "a2"]
    assert boost_named_subjects(fused(*other, hers), "What was painted?", 1.0) == fused(*other, hers)
    same = fused(row(4, "Melanie: I run."), row(5, "Melanie: I swim."))  # one subject: every hit alike
    assert [h.id for h in boost_named_subjects(same, "What does Melanie do?", 1.0)] == ["a4", "a5"]


def test_recall_prefers_the_named_persons_memory_when_two_are_merged(tmp_path: Path) -> None:
    """Two people's memories searched apart and merged by fused score, as LoCoMo's bench does."""
    store = InMemoryVectorStore(dim=64, embedding_model=EMB.model_id)
    store.upsert([row(1, "Caroline: Melanie showed me her painting of a sunset.", "caroline")])
    store.upsert([row(2, "Melanie: I finished a painting of a horse.", "melanie")])
    rec = Recaller(store=store, embedder=EMB, files=LocalFileStore(tmp_path))

    def merged(cfg: RecallConfig) -> dict[str, float]:
        query = "What painting did Melanie make?"
        return {h.id: h.score for u in ("caroline", "melanie") for h in rec.hits("t", u, query, None, cfg)}

    on, off = merged(RecallConfig()), merged(RecallConfig(subject_weight=0.0))
    assert on["a2"] > on["a1"]
    assert off["a2"] == off["a1"]  # without the boost each is first in its own memory: a tie
