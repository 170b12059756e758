"""The model's offload work off the agent's path (issue 28): a compaction runs the heuristics only, and the
background pass (:mod:`mnemoflow.offload.refine`) puts the model's judgement, summaries and canvas in their place
when the session has not moved on, on a real LocalFileStore."""

from __future__ import annotations

import asyncio
import time
from contextlib import nullcontext
from pathlib import Path

from actors.shard import SessionShard
from mnemoflow.offload.annotations import annotated_entries, drill_down
from mnemoflow.offload.canvas import validate_mermaid
from mnemoflow.offload.canvas_update import canvas_names, canvas_path, load_canvas
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.offload.refine import RefineReport, refine_due, refine_session
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session import compact_session
from mnemoflow.offload.session_state import load_state
from mnemoflow.prompts import offload_canvas
from mnemoflow.prompts.offload_boundary import BoundaryReply
from mnemoflow.prompts.offload_summary import ItemSummary, SummaryReply
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedLLM
from tests.unit.test_offload_pipeline import _turn

TASK = "Fix the failing parser test in the repository: the tokenizer drops quotes " * 3
PLAIN = "\n".join(f"line {i}: value = {i * 7}" for i in range(300))
"""A long tool output that did not fail (the model's canvas then needs no tombstones)."""
SYSTEM = {"role": "system", "content": "You are a coding agent."}


def _compact(files: LocalFileStore, history: list[dict], clock: ManualClock) -> None:
    asyncio.run(
        compact_session(files, "t", "s", history, 50_000, clock=clock, writer=OffloadWriter(files), judge_later=True)
    )


def _refine(files: LocalFileStore, llm: ScriptedLLM, stages: set, clock: ManualClock, **cfg: int) -> RefineReport:
    return asyncio.run(
        refine_session(
            files,
            "t",
            "s",
            llm,
            stages,
            clock=clock,
            locked=nullcontext,
            config=OffloadConfig(**cfg),
        )
    )


def test_a_compaction_runs_the_heuristics_and_keeps_the_turn_for_the_model(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    _compact(files, [SYSTEM, *_turn(6, TASK)], clock)
    state = load_state(files, "t", "s")
    assert (
        state.pending_turn is not None and state.pending_turn.text == TASK and state.pending_turn.active_before is None
    )
    assert [b.source for b in state.boundaries] == ["heuristic"] and state.active_canvas
    assert all(e.node_id and e.summary for e in annotated_entries(files, "t", "s"))
    assert refine_due(state, {"boundary"}) and refine_due(state, {"canvas"}) and not refine_due(state, ())


def test_only_the_model_stages_call_the_model_and_an_agreeing_judge_marks_the_boundary(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    _compact(files, [SYSTEM, *_turn(6, TASK)], clock)
    llm = ScriptedLLM([BoundaryReply(decision="new_long", label="fix-parser", goal="Fix the parser test")])
    report = _refine(files, llm, {"boundary"}, clock)
    assert [c.stage for c in llm.calls] == ["offload_boundary"] and report.counts == {("boundary", "applied"): 1}
    state = load_state(files, "t", "s")
    assert state.pending_turn is None and [b.source for b in state.boundaries] == ["llm"]
    assert state.model_summary_seq == state.model_canvas_seq == -1  # the stages not on the model keep their cursors
    assert not refine_due(state, {"boundary"})


def test_a_judge_that_disagrees_in_time_replaces_the_heuristic_boundary_and_its_empty_canvas(tmp_path: Path) -> None:
    """The heuristic opened a second task for a long message; the model says it continues the first. No tool
    call has been folded under the heuristic's decision yet, so the empty canvas goes and the calls that follow
    land on the first task's canvas."""
    files, clock = LocalFileStore(tmp_path), ManualClock()
    history = [SYSTEM, *_turn(3, TASK)]
    _compact(files, history, clock)
    asyncio.run(
        refine_session(
            files,
            "t",
            "s",
            ScriptedLLM([BoundaryReply(decision="new_long")]),
            {"boundary"},
            clock=clock,
            locked=nullcontext,
        )
    )
    follow_up = "Now also make the tokenizer keep escaped quotes inside nested strings and update the tests " * 2
    history.append({"role": "user", "content": follow_up})
    _compact(files, history, clock)
    assert load_state(files, "t", "s").active_canvas.startswith("002-")  # type: ignore[union-attr]
    report = _refine(files, ScriptedLLM([BoundaryReply(decision="continue")]), {"boundary"}, clock)
    assert report.counts == {("boundary", "applied"): 1}
    state = load_state(files, "t", "s")
    first = state.boundaries[0].canvas
    assert first is not None
    assert state.active_canvas == first and state.canvas_counter == 1
    assert [b.decision for b in state.boundaries] == ["new_long", "continue"]
    assert canvas_names(files, "t", "s") == [first]
    history += _turn(2, "Now also")[1:]
    _compact(files, history, clock)
    assert {e.node_id and e.node_id.split("-")[0] for e in annotated_entries(files, "t", "s")} == {first[:3]}


def test_a_judge_that_answers_after_the_calls_were_folded_is_late(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    history = [SYSTEM, *_turn(3, TASK)]
    _compact(files, history, clock)
    history += _turn(2, "Implement a new caching layer for the HTTP client with an eviction policy " * 3)
    _compact(files, history, clock)  # the calls after the message are folded under the heuristic's new task
    before = load_state(files, "t", "s")
    report = _refine(files, ScriptedLLM([BoundaryReply(decision="continue")]), {"boundary"}, clock)
    after = load_state(files, "t", "s")
    assert report.counts == {("boundary", "late"): 1}
    assert after.boundaries == before.boundaries and after.pending_turn is None


def test_model_summaries_replace_the_heuristic_ones_and_a_session_too_far_behind_is_skipped(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    _compact(files, [SYSTEM, *_turn(6, TASK)], clock)
    ids = [e.tool_call_id for e in annotated_entries(files, "t", "s")]
    llm = ScriptedLLM(
        [SummaryReply(items=[ItemSummary(tool_call_id=i, summary=f"model {i}", score=7) for i in ids[2:]])]
    )
    report = _refine(files, llm, {"summaries"}, clock, refine_max_entries=4)
    assert report.counts == {("summaries", "skipped"): 2, ("summaries", "applied"): 4}
    by_id = {e.tool_call_id: e for e in annotated_entries(files, "t", "s")}
    assert [by_id[i].summary for i in ids[2:]] == [f"model {i}" for i in ids[2:]]
    assert all("ValueError" in (by_id[i].summary or "") for i in ids[:2])  # the heuristic's stays
    state = load_state(files, "t", "s")
    assert state.model_summary_seq == state.last_seq and not refine_due(state, {"summaries"})


def test_the_model_redraws_the_canvas_and_superseded_node_ids_still_drill_down(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    history = [{**m, "content": PLAIN} if m["role"] == "tool" else m for m in [SYSTEM, *_turn(6, TASK)]]
    _compact(files, history, clock)
    old = {e.tool_call_id: e.node_id for e in annotated_entries(files, "t", "s")}
    name = load_state(files, "t", "s").active_canvas
    assert name is not None and len(set(old.values())) > 1
    reply = offload_canvas.Reply.model_validate(
        {
            "ops": [
                {
                    "op": "add_node",
                    "stage": "Fix",
                    "action": "read, edit and test the tokenizer",
                    "status": "done",
                    "summary": "tokenizer fixed",
                    "tool_call_ids": list(old),
                }
            ]
        }
    )
    report = _refine(files, ScriptedLLM([reply]), {"canvas"}, clock)
    assert report.counts == {("canvas", "applied"): 6}
    canvas = load_canvas(files, "t", "s", name)
    assert canvas is not None and [n.action for n in canvas.nodes] == ["read, edit and test the tokenizer"]
    new = {e.tool_call_id: e.node_id for e in annotated_entries(files, "t", "s")}
    assert len(set(new.values())) == 1 and set(new) == set(old)
    assert validate_mermaid((files.read_bytes(canvas_path("t", "s", name)) or b"").decode()) == []
    for node in set(old.values()):  # an id an agent saw before the model redrew the canvas still leads to the bytes
        assert node is not None and all(raw == PLAIN.encode() for _, raw in drill_down(files, "t", "s", node))
        assert drill_down(files, "t", "s", node)
    state = load_state(files, "t", "s")
    assert state.model_canvas_seq == state.canvas_seq and not refine_due(state, {"canvas"})


def test_invalid_model_replies_fall_back_per_stage_and_break_nothing(tmp_path: Path) -> None:
    """The judge, the summaries and the canvas each get one repair try, then the heuristic's output stays; every
    entry still has a node and a summary, and the fallbacks are counted per stage."""
    files, clock = LocalFileStore(tmp_path), ManualClock()
    _compact(files, [SYSTEM, *_turn(6, TASK)], clock)
    llm = ScriptedLLM(["not json"] * 40)
    report = _refine(files, llm, {"boundary", "summaries", "canvas"}, clock)
    assert {c.stage for c in llm.calls} == {"offload_boundary", "offload_summary", "offload_canvas"}
    assert all(llm.usage.stage(s).fallbacks >= 1 for s in ("offload_boundary", "offload_summary", "offload_canvas"))
    assert report.counts[("boundary", "fallback")] == 1
    state = load_state(files, "t", "s")
    assert state.active_canvas is not None and not refine_due(state, {"boundary", "summaries", "canvas"})
    entries = annotated_entries(files, "t", "s")
    assert len(entries) == 6 and all(e.node_id and e.summary for e in entries)


def test_the_shard_refines_in_the_background_and_says_so_in_its_stats(tmp_path: Path) -> None:
    """The shard answers the compaction with the heuristic's work, then its worker runs the model's pass."""
    llm = ScriptedLLM([BoundaryReply(decision="new_long", label="fix-parser")])
    shard = SessionShard(0, str(tmp_path), 60.0, 10, llm_factory=lambda: llm, model_stages={"boundary"})

    async def run() -> dict:
        reply = await shard.compact("t", "s", [SYSTEM, *_turn(3, TASK)], 50_000)
        assert isinstance(reply, CompactReply)
        deadline = time.monotonic() + 10
        while shard.stats()["refine"] == {} and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return shard.stats()

    stats = asyncio.run(run())
    assert stats["refine"] == {"boundary/applied": 1} and stats["refine_queued"] == stats["refine_dropped"] == 0
    assert [b.source for b in load_state(LocalFileStore(tmp_path), "t", "s").boundaries] == ["llm"]
