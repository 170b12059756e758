"""bench/model_engine.py's sample and replay helpers on made-up data: which questions a cut conversation keeps, where
the trajectory is compacted, and the per-stage latency quantiles."""

from __future__ import annotations

from bench.model_engine import compaction_points, latencies, sample
from mnemoflow.llm.usage import CallRecord, LLMUsage


def test_a_sample_keeps_the_questions_its_turns_answer_for_the_first_speaker() -> None:
    turns = [{"dia_id": f"D1:{i}", "speaker": "Ann" if i % 2 else "Bob"} for i in range(1, 7)]
    qa = [
        {"question": "kept", "category": 1, "evidence": ["D1:1", "D1:2"]},
        {"question": "evidence past the cut", "category": 4, "evidence": ["D1:1", "D1:5"]},
        {"question": "only the other speaker's turn", "category": 2, "evidence": ["D1:2"]},
        {"question": "adversarial", "category": 5, "evidence": ["D1:1"]},
        {"question": "no evidence", "category": 3, "evidence": []},
    ]
    cut = sample({"speaker_a": "Ann", "speaker_b": "Bob", "turns": turns, "qa": qa}, 4)
    assert [t["dia_id"] for t in cut["turns"]] == ["D1:1", "D1:2", "D1:3", "D1:4"]
    assert [q["question"] for q in cut["qa"]] == ["kept"]


def test_compactions_come_before_each_answer_to_a_user_and_after_the_last_counted_tool_result() -> None:
    session = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "a"}]},
        {"role": "tool", "tool_call_id": "a", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "b"}]},
        {"role": "tool", "tool_call_id": "b", "content": "y"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "tool_call_id": "c", "content": "z"},
    ]
    assert compaction_points(session, 2) == [2, 4, 6]
    assert compaction_points(session, 3) == [2, 4, 6, 8]


def test_latency_quantiles_are_per_stage_and_leave_fallbacks_out() -> None:
    usage = LLMUsage()
    for s in (1.0, 2.0, 3.0, 10.0):
        usage.record(CallRecord("l1-extraction", 10, 5, s, 1, ok=True))
    usage.record(CallRecord("l3_persona", 10, 5, 4.0, 2, ok=True))
    usage.fallback("l3_persona", ValueError("invalid"))
    assert latencies(usage) == {
        "l1-extraction": {"p50_s": 3.0, "p99_s": 10.0, "calls": 4},
        "l3_persona": {"p50_s": 4.0, "p99_s": 4.0, "calls": 1},
    }
