"""Compaction, injector and message validation: the named error cases and the position rules."""

from __future__ import annotations

import pytest

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.compact import CompactContext, compact
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.decisions import ReclaimDecisions
from mnemoflow.offload.injector import CanvasText, insertion_point
from mnemoflow.offload.messages import validate
from mnemoflow.offload.reclaim import EntryInfo


def call(i: str, name: str = "bash") -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": name, "arguments": "{}"}}],
    }


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
    out = compact(msgs, 3_000, CompactContext(entries=entries, config=OffloadConfig.spec()))
    assert {"role": "user", "content": "now the next thing"} in out.messages
    assert out.decisions.cut is not None and out.decisions.deleted
    validate(out.messages)


def test_fold_drops_finished_task_and_injects_history_canvas() -> None:
    msgs, entries = session(3, 20)
    start = {"role": "user", "content": "second task"}
    msgs += [start, call("d1"), result("d1", 5)]
    from mnemoflow.offload.messages import fingerprint

    hist = {"001": CanvasText("001-fix.mmd", 'flowchart TD\n    001-N1["a: b"]\n', "fix")}
    ctx = CompactContext(
        entries=entries,
        history=hist,
        task_start=fingerprint(start),
        active=CanvasText("002-next.mmd", "flowchart TD\n", "next"),
    )
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


def test_age_rule_stubs_in_batches_and_keeps_recent_results_raw() -> None:
    cfg = OffloadConfig(stub_keep_recent=2, stub_batch=4, stub_batch_tokens=None)
    msgs, entries = session(5)  # 3 results past the last 2: below the batch, nothing changes
    out = compact(msgs, 1_000_000, CompactContext(entries=entries, config=cfg))
    assert out.messages == msgs and not out.decisions.replaced
    msgs, entries = session(6)  # 4 due: all stubbed at once, the last 2 stay raw
    out = compact(msgs, 1_000_000, CompactContext(entries=entries, config=cfg))
    assert set(out.decisions.replaced) == {"c0", "c1", "c2", "c3"}
    tools = [m for m in out.messages if m["role"] == "tool"]
    raw = [x for x in msgs if x["role"] == "tool"]
    assert [m["content"] == r["content"] for m, r in zip(tools, raw, strict=True)] == [False] * 4 + [True] * 2
    assert all(r.how == "summarized" and r.ref == f"refs/{r.tool_call_id}.md" for r in out.removed)


def test_spec_config_keeps_the_spec_ladder() -> None:
    cfg = OffloadConfig.spec()
    assert (cfg.mild_ratio, cfg.aggressive_ratio, cfg.emergency_ratio, cfg.emergency_target_ratio) == (
        0.5,
        0.85,
        0.95,
        0.6,
    )
    assert cfg.stub_keep_recent is None and not cfg.freeze_injection and cfg.history_canvas_full
    msgs, entries = session(12)
    assert compact(msgs, 1_000_000, CompactContext(entries=entries, config=cfg)).messages == msgs


def test_compact_arguments_are_final_and_recoverable_from_the_entry() -> None:
    cfg = OffloadConfig(stub_keep_recent=1, stub_batch=1)
    msgs, entries = session(3)
    big = '{"command": "create", "path": "/a.py", "file_text": "' + "x = 1\\n" * 200 + '"}'
    msgs[2] = {**msgs[2], "tool_calls": [{**msgs[2]["tool_calls"][0], "function": {"name": "edit", "arguments": big}}]}
    out = compact(msgs, 1_000_000, CompactContext(entries=entries, config=cfg))
    short = out.decisions.calls["c0"]
    assert '"_offloaded": true' in short and len(short) < len(big) and '"node_id": "001-N1"' in short
    # re-applied byte-identical next turn, even if the entry's node id changed meanwhile
    moved = {**entries, "c0": EntryInfo("c0", "step 0 ok", 6, "refs/c0.md", "001-N9")}
    again = compact(
        [*msgs, call("c9"), result("c9", 5)],
        1_000_000,
        CompactContext(entries=moved, decisions=out.decisions, config=cfg),
    )
    assert again.messages[2]["tool_calls"][0]["function"]["arguments"] == short


def test_prefix_is_stable_across_calls_after_a_reclaim() -> None:
    """After a batch (and the canvas refresh it causes), appended calls keep the earlier output as a prefix."""
    cfg = OffloadConfig(stub_keep_recent=2, stub_batch=4, stub_batch_tokens=None)
    canvas = CanvasText("001-fix.mmd", 'flowchart TD\n    001-N1["Edit: x<br/>status: doing"]\n', "fix")
    msgs, entries = session(6)
    first = compact(msgs, 1_000_000, CompactContext(entries=entries, active=canvas, config=cfg))
    assert first.decisions.replaced and first.canvas == canvas
    prev, decisions = first.messages, first.decisions
    for k in range(6, 9):  # 1, 2, 3 due: below the batch, append only
        msgs = [*msgs, call(f"c{k}"), result(f"c{k}")]
        entries = {**entries, f"c{k}": EntryInfo(f"c{k}", f"step {k} ok", 6, f"refs/c{k}.md", "001-N1")}
        # the canvas file changed meanwhile: the injected copy stays byte-identical until the next reclaim
        newer = CanvasText("001-fix.mmd", canvas.mermaid + f'    001-N{k}["Run: y<br/>status: doing"]\n', "fix")
        out = compact(msgs, 1_000_000, CompactContext(entries=entries, active=newer, decisions=decisions, config=cfg))
        assert out.messages[: len(prev)] == prev
        validate(out.messages)
        prev, decisions = out.messages, out.decisions
    msgs = [*msgs, call("c9"), result("c9")]
    entries = {**entries, "c9": EntryInfo("c9", "step 9 ok", 6, "refs/c9.md", "001-N1")}
    out = compact(msgs, 1_000_000, CompactContext(entries=entries, active=newer, decisions=decisions, config=cfg))
    # the next batch rewrites from the oldest raw result on; everything before the old canvas stays
    at = decisions.inject_at or 0
    assert out.messages[:at] == prev[:at] and "001-N8" in out.decisions.injected[-1]
    validate(out.messages)


def test_history_canvas_meta_only_is_a_node_index() -> None:
    from mnemoflow.offload.injector import history_message

    canvas = CanvasText(
        "001-fix.mmd",
        'flowchart TD\n    001-N1["Edit: x<br/>status: done<br/>summary: long"]\n    %% tools: 001-N1 ["c0"]\n',
        "fix",
    )
    text = history_message(canvas, meta_only=True)["content"]
    assert "001-N1: Edit: x (done)" in text and "summary: long" not in text and 'mode="meta-only"' in text


def test_active_canvas_over_its_budget_becomes_a_node_index() -> None:
    from mnemoflow.offload.injector import active_message

    nodes = "".join(f'    001-N{i}["Edit: x<br/>status: done<br/>summary: {"long " * 40}"]\n' for i in range(30))
    canvas = CanvasText("001-fix.mmd", "flowchart TD\n" + nodes, "fix")
    full = active_message(canvas)["content"]
    small = active_message(canvas, budget=500)["content"]
    assert "```mermaid" in full and 'mode="meta-only"' not in full
    assert 'mode="meta-only"' in small and "001-N29: Edit: x (done)" in small and "long long" not in small
    assert active_message(canvas, budget=1_000_000)["content"] == full
