"""Compaction, injector and message validation: the named error cases and the position rules."""

from __future__ import annotations

import pytest

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.compact import CompactContext, compact
from mnemoflow.offload.decisions import ReclaimDecisions
from mnemoflow.offload.injector import CanvasText, insertion_point
from mnemoflow.offload.messages import validate
from mnemoflow.offload.reclaim import EntryInfo


def call(i: str, name: str = "bash") -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def result(i: str, n: int = 300) -> dict:
    return {"role": "tool", "tool_call_id": i, "content": "output line\n" * n}


def session(k: int = 12, n: int = 300) -> tuple[list[dict], dict[str, EntryInfo]]:
    msgs: list[dict] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix the bug"}]
    entries = {}
    for i in range(k):
        msgs += [call(f"c{i}"), result(f"c{i}", n)]
        entries[f"c{i}"] = EntryInfo(f"c{i}", f"step {i} ok", 6, f"refs/c{i}.md", "001-N1")
    return msgs, entries


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "tool", "tool_call_id": "x", "content": "a"}], "does not follow its tool call"),
        ([{"role": "robot", "content": "a"}], "unknown role"),
        ([call("a"), {"role": "user", "content": "hi"}], "have no result"),
        ([call("a"), result("a"), call("a"), result("a")], "duplicate tool_call id"),
    ],
)
def test_malformed_arrays_are_refused_by_name(messages: list[dict], problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        compact(messages, 1000, CompactContext())


def test_window_too_small_for_last_user_message() -> None:
    with pytest.raises(InvalidInput, match="too small for the system messages and the last user message"):
        compact([{"role": "user", "content": "word " * 500}], 50, CompactContext())


def test_no_pressure_means_no_change() -> None:
    msgs, entries = session(2, 10)
    out = compact(msgs, 100_000, CompactContext(entries=entries))
    assert out.messages == msgs and out.removed == [] and out.level == "none"


def test_mild_replaces_old_results_with_stubs_and_is_reapplied_identically() -> None:
    msgs, entries = session()
    first = compact(msgs, 12_000, CompactContext(entries=entries))
    assert first.level in ("mild", "aggressive") and first.decisions.replaced
    assert all(r.ref == f"refs/{r.tool_call_id}.md" for r in first.removed)
    stub = first.decisions.replaced["c0"]
    assert "Summary: step 0 ok" in stub and "result_ref: refs/c0.md" in stub
    grown = [*msgs, call("c99"), result("c99", 5)]
    second = compact(grown, 12_000, CompactContext(entries=entries, decisions=first.decisions))
    n = len(first.messages)
    assert second.messages[: n - 1] == first.messages[: n - 1]  # stable prefix


def test_aggressive_cut_keeps_last_user_and_records_a_cut() -> None:
    msgs, entries = session(6)
    msgs += [{"role": "user", "content": "now the next thing"}, call("d1"), result("d1", 20)]
    out = compact(msgs, 3_000, CompactContext(entries=entries))
    assert {"role": "user", "content": "now the next thing"} in out.messages
    assert out.decisions.cut is not None and out.decisions.deleted
    validate(out.messages)


def test_fold_drops_finished_task_and_injects_history_canvas() -> None:
    msgs, entries = session(3, 20)
    start = {"role": "user", "content": "second task"}
    msgs += [start, call("d1"), result("d1", 5)]
    from mnemoflow.offload.messages import fingerprint

    hist = {"001": CanvasText("001-fix.mmd", "flowchart TD\n    001-N1[\"a: b\"]\n", "fix")}
    ctx = CompactContext(entries=entries, history=hist, task_start=fingerprint(start),
                         active=CanvasText("002-next.mmd", "flowchart TD\n", "next"))
    out = compact(msgs, 100_000, ctx)
    texts = [m["content"] for m in out.messages if m["role"] == "user"]
    assert any(t.startswith('<history_task_context file="001-fix.mmd"') for t in texts)
    assert any(t.startswith('<current_task_context file="002-next.mmd"') for t in texts)
    assert {r.tool_call_id for r in out.removed} == {"c0", "c1", "c2"}
    assert out.decisions.cut is not None


def test_insertion_after_latest_user_in_second_half() -> None:
    msgs = [{"role": "system", "content": "s"}, call("a"), result("a"), {"role": "user", "content": "u"}]
    assert insertion_point(msgs) == 4


def test_insertion_never_splits_a_call_from_its_results() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for i in range(40):
        msgs += [call(f"c{i}"), result(f"c{i}", 1)]
    idx = insertion_point(msgs)
    assert msgs[idx]["role"] == "assistant" and len(msgs) - idx <= 31


def test_decisions_round_trip_as_json() -> None:
    d = ReclaimDecisions(replaced={"a": "stub"}, deleted=("b",), cut="f")
    assert ReclaimDecisions.model_validate_json(d.model_dump_json()) == d
