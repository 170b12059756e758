"""The recall benchmarks' scoring helpers on made-up data: the token budget, user ids, LongMemEval's history and
the record file a long LongMemEval run resumes from."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.locomo_recall import named_speakers, raw_rows, uid, within
from bench.longmemeval_recall import measure, turns_of, when
from mnemoflow.tokens import count_tokens


def test_the_budget_keeps_ranked_items_while_they_fit() -> None:
    items = [("short one", ["a"]), ("a much longer item " * 20, ["b"]), ("tiny", ["c"])]
    budget = count_tokens("short one") + 5
    assert within(items, budget) == [("short one", ["a"])]  # the long one ends the list, no skipping ahead
    assert within(items, 10_000) == items
    assert within(items, 0) == []


def test_speakers_with_non_ascii_names_get_distinct_user_ids() -> None:
    assert uid("zh-1", "李娜") != uid("zh-1", "王磊")
    assert uid("conv-26", "Caroline") == "conv-26.Caroline"


def test_a_question_is_routed_to_the_one_speaker_it_names() -> None:
    conv = {"speaker_a": "Jon", "speaker_b": "李娜"}
    assert named_speakers(conv, "What did Jon paint?") == ["Jon"]
    assert named_speakers(conv, "What did Jonathan paint?") == []  # a whole word, not a prefix
    assert named_speakers(conv, "李娜上周去了哪里？") == ["李娜"]
    assert named_speakers(conv, "Did Jon meet 李娜?") == ["Jon", "李娜"]


def test_raw_turns_are_indexed_for_the_conversation_and_for_their_speaker() -> None:
    from mnemoflow.embedding import HashingEmbedder

    turns = [
        {"dia_id": "D1:1", "speaker": "Jon", "text": "I paint.", "timestamp": "", "turn_index": 0, "session": 1},
        {"dia_id": "D1:2", "speaker": "Ana", "text": "I row.", "timestamp": "", "turn_index": 1, "session": 1},
    ]
    conv = {"sample_id": "c1", "speaker_a": "Jon", "speaker_b": "Ana", "turns": turns}
    rows, own = raw_rows(conv, HashingEmbedder(16))
    assert [(r.user, r.id) for r in rows] == [("c1", "D1:1"), ("c1", "D1:2")]
    assert [(r.user, r.id) for r in own] == [("c1.Jon", "D1:1"), ("c1.Ana", "D1:2")]
    assert rows[0].vector == own[0].vector and own[0].text == rows[0].text == "Jon: I paint."


def test_a_longmemeval_history_flattens_with_times_and_evidence() -> None:
    item = {
        "haystack_session_ids": ["s/1", "s2"],
        "haystack_dates": ["2023/05/30 (Tue) 23:40", "2023/06/01 (Thu) 08:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "hi", "has_answer": True}, {"role": "assistant", "content": "hello"}],
            [{"role": "user", "content": "bye"}],
        ],
    }
    turns = turns_of(item)
    assert [t["id"] for t in turns] == ["s_1-0", "s_1-1", "s2-0"]
    assert [t["evidence"] for t in turns] == [True, False, False]
    assert turns[1]["ts"] == datetime(2023, 5, 30, 23, 40, 30, tzinfo=UTC)
    assert when("2023/06/01 (Thu) 08:00") == datetime(2023, 6, 1, 8, 0, tzinfo=UTC)


def test_a_raw_turn_longer_than_a_row_becomes_rows_that_all_cite_it() -> None:
    from bench.longmemeval_recall import RAW_CHARS, raw_rows
    from mnemoflow.embedding import HashingEmbedder

    ts = datetime(2023, 1, 1, tzinfo=UTC)
    turns = [{"id": "s-0", "text": "x" * (2 * RAW_CHARS + 5), "ts": ts}, {"id": "s-1", "text": "", "ts": ts}]
    rows = raw_rows("u", turns, HashingEmbedder(16))
    assert [(r.id, r.source_message_ids) for r in rows] == [
        ("s-0.0", ["s-0"]),
        ("s-0.1", ["s-0"]),
        ("s-0.2", ["s-0"]),
        ("s-1.0", ["s-1"]),
    ]
    assert rows[-1].text == "(empty)"


MADE_UP_QUESTION = {
    "question_id": "q1",
    "question_type": "single-session-user",
    "question": "Where did I go hiking last week?",
    "question_date": "2023/06/08 (Thu) 10:00",
    "answer_session_ids": ["s1"],
    "haystack_session_ids": ["s1", "s2"],
    "haystack_dates": ["2023/06/01 (Thu) 08:00", "2023/06/02 (Fri) 09:00"],
    "haystack_sessions": [
        [
            {"role": "user", "content": "I went hiking on Mount Tam with my sister.", "has_answer": True},
            {"role": "assistant", "content": "That sounds lovely! How was the view?"},
        ],
        [{"role": "user", "content": "Can you suggest a pasta recipe?"}, {"role": "assistant", "content": "Sure."}],
    ],
}


def test_a_longmemeval_record_is_fingerprinted_with_all_the_code_that_scored_it(tmp_path: Path) -> None:
    """In a fresh interpreter (this one has loaded the whole package): one question measured, then every module of
    mnemoflow it loaded must be under the fingerprint, or a resumed run could mix records of different code."""
    root = Path(__file__).resolve().parents[2]
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "import bench.longmemeval_recall as b; from mnemoflow.embedding import HashingEmbedder;"
        "r = b.measure_one(json.loads(sys.argv[2]), Path(sys.argv[3]), HashingEmbedder(16), b.code_fingerprint());"
        "b.check_fingerprinted(); print(json.dumps(r))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root), json.dumps(MADE_UP_QUESTION), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    record = json.loads(out.stdout)
    assert record["turns"] == 4 and record["has_evidence"] and len(record["code"]) == 16
    assert set(record["hits"]["turn10"]) == {"hybrid", "bm25_raw", "dense_raw", "hybrid_raw"}


def test_a_run_refuses_to_resume_from_records_of_other_code(tmp_path: Path) -> None:
    from mnemoflow.embedding import HashingEmbedder

    embedder = HashingEmbedder(16)
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"question_id": "q1", "embedder": embedder.model_id, "code": "0" * 16}) + "\n")
    with pytest.raises(SystemExit, match="move it away"):
        measure([MADE_UP_QUESTION], records, embedder)


def test_an_evidence_turn_that_yields_no_atom_is_counted_in_its_speakers_memory(tmp_path: Path) -> None:
    from bench.evidence_atoms import locomo
    from mnemoflow.storage import LocalFileStore

    said = [
        ("Ana", "Did you ever adopt that dog you talked about?"),
        ("Jon", "Yes!"),  # the answer is the evidence, and it says nothing an atom could hold
        ("Ana", "What's his name?"),
        ("Jon", "We named him Biscuit, after my grandmother's dog."),
    ]
    turns = [
        {
            "dia_id": f"D1:{i}",
            "speaker": who,
            "text": text,
            "timestamp": "2023-05-01T10:00:00",
            "turn_index": i,
            "session": 1,
        }
        for i, (who, text) in enumerate(said)
    ]
    conv = {
        "sample_id": "c1",
        "speaker_a": "Ana",
        "speaker_b": "Jon",
        "turns": turns,
        "qa": [
            {"category": 1, "evidence": ["D1:1", "D1:3"]},
            {"category": 5, "evidence": ["D1:0"]},  # adversarial: not counted
        ],
    }
    out = locomo([conv], LocalFileStore(tmp_path))
    assert (out["evidence_turns"], out["missed"]) == (2, ["c1:D1:1"])
    assert out["share_without_atom"] == 0.5
