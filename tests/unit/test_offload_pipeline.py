"""Summaries, the boundary judge, canvas updates and the session turn, on a real LocalFileStore."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mnemoflow.events import ToolResultEvent
from mnemoflow.offload.annotations import annotated_entries, drill_down
from mnemoflow.offload.boundary import heuristic_judge
from mnemoflow.offload.canvas import validate_mermaid
from mnemoflow.offload.canvas_update import canvas_path
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.offload.messages import ToolPair
from mnemoflow.offload.session import compact_session
from mnemoflow.offload.session_state import load_state
from mnemoflow.offload.summarize import heuristic_summary, llm_summaries
from mnemoflow.prompts.offload_summary import ItemSummary, SummaryReply
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedLLM
from mnemoflow.tokens import count_tokens, estimate_tokens

BIG = "\n".join(
    [f"line {i}: value = {i * 7}" for i in range(300)]
    + ["Traceback (most recent call last):", "ValueError: bad input", "FAILED 3 tests"]
)


def test_tokens_exact_and_estimate_close() -> None:
    assert count_tokens("hello world") == 2
    text = "def f(x):\n    return x + 1  # comment\n" * 50
    assert abs(estimate_tokens(text) - count_tokens(text)) / count_tokens(text) < 0.4


def test_heuristic_summary_keeps_errors_and_is_bounded() -> None:
    s = heuristic_summary(ToolPair("a", "bash", '{"cmd": "pytest"}', BIG), OffloadConfig())
    assert "ValueError: bad input" in s.summary and len(s.summary) <= 400 and 0 <= s.score <= 10
    small = heuristic_summary(ToolPair("b", "bash", "{}", "ok"), OffloadConfig())
    assert small.summary == "ok" and small.score == 10


def test_heuristic_summary_keeps_the_identifiers_the_output_introduced() -> None:
    view = "\n".join(f"{i:6}\tvalue = pkg.lexer.split_quoted(line{i})  # pkg/lexer.py" for i in range(300))
    cfg = OffloadConfig()
    s = heuristic_summary(ToolPair("v", "editor", '{"command": "view", "path": "/repo/pkg/parser.py"}', view), cfg)
    assert "pkg.lexer.split_quoted" in s.summary and "pkg/lexer.py" in s.summary and s.error is None
    assert "/repo/pkg/parser.py" not in s.summary  # the call names it already
    assert len(s.summary) <= cfg.summary_max_chars + cfg.summary_ids_chars
    failed = heuristic_summary(ToolPair("f", "bash", "{}", BIG + "\n[Command finished with exit code 1]"), cfg)
    assert failed.error == "exit 1: ValueError: bad input" and "FAILED exit 1: ValueError: bad input" in failed.summary
    no_ids = heuristic_summary(ToolPair("n", "bash", "{}", BIG), cfg.model_copy(update={"summary_ids_chars": 0}))
    assert "ids:" not in no_ids.summary and len(no_ids.summary) <= cfg.summary_max_chars


def test_llm_summaries_batch_and_fall_back_per_missing_id() -> None:
    pairs = [ToolPair(f"c{i}", "bash", "{}", BIG) for i in range(7)]
    llm = ScriptedLLM(
        [
            SummaryReply(items=[ItemSummary(tool_call_id=f"c{i}", summary=f"s{i}", score=8) for i in range(4)]),
            SummaryReply(items=[ItemSummary(tool_call_id="c5", summary="s5", score=3)]),
        ]
    )
    out = asyncio.run(llm_summaries(pairs, llm, OffloadConfig(summary_batch=5)))
    assert [s.summary for s in out[:4]] == ["s0", "s1", "s2", "s3"] and out[5].summary == "s5"
    assert "ValueError" in out[4].summary and len(llm.calls) == 2  # c4 and c6 fell back to the heuristic


def test_heuristic_judge() -> None:
    assert heuristic_judge("Please fix the failing parser test in the repository " * 3, None).decision == "new_long"
    assert heuristic_judge("continue", "001-x.mmd").decision == "continue"
    assert heuristic_judge("what time is it?", None).decision == "short"


def test_heuristic_judge_in_chinese() -> None:
    task = "请修复仓库里失败的解析器测试：嵌套的引号里的词被丢掉了，跑一下测试看看是哪一步出的错。"  # 44 characters
    assert heuristic_judge(task, None).decision == "new_long"
    long_request = "我们的服务在高峰期间响应很慢，" * 8  # no cue word, 120 characters: a long request
    assert heuristic_judge(long_request, None).decision == "new_long"
    assert heuristic_judge("继续", "001-x.mmd").decision == "continue"
    assert heuristic_judge("好的，再试一次", "001-x.mmd").decision == "continue"
    assert heuristic_judge("现在几点了？", None).decision == "short"


def _turn(n: int, task: str) -> list[dict]:
    msgs: list[dict] = [{"role": "user", "content": task}]
    for i in range(n):
        cid = f"{task[:3]}_{i}"
        msgs += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": ["view", "edit", "bash"][i % 3], "arguments": '{"path": "a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": cid, "content": BIG},
        ]
    return msgs


def test_session_turns_persist_boundaries_canvases_and_drill_down(tmp_path: Path) -> None:
    files, clock = LocalFileStore(tmp_path), ManualClock()
    system = [{"role": "system", "content": "You are a coding agent."}]
    task1 = "Fix the failing parser test in the repository: the tokenizer drops quotes " * 3
    task2 = "Implement a new caching layer for the HTTP client with an eviction policy " * 3
    history = system + _turn(8, task1)
    asyncio.run(compact_session(files, "t", "s", history, 50_000, clock=clock, writer=OffloadWriter(files)))
    # a restart: new writer, state from files only
    history += _turn(4, task2)
    out = asyncio.run(compact_session(files, "t", "s", history, 50_000, clock=clock, writer=OffloadWriter(files)))
    state = load_state(files, "t", "s")
    assert [b.decision for b in state.boundaries] == ["new_long", "new_long"]
    assert state.active_canvas and state.active_canvas.startswith("002-")
    for name in (b.canvas for b in state.boundaries):
        assert name is not None
        assert validate_mermaid((files.read_bytes(canvas_path("t", "s", name)) or b"").decode()) == []
    entries = annotated_entries(files, "t", "s")
    assert all(e.node_id and e.summary and e.score is not None for e in entries)
    removed = {r.tool_call_id for r in out.removed}
    assert removed >= {f"Fix_{i}" for i in range(8)}  # the finished task was folded
    for e in entries:
        assert any(r == BIG.encode() for _, r in drill_down(files, "t", "s", e.node_id or ""))
    assert state.reclaim.cut is not None


def test_a_turn_answers_from_what_it_annotated_and_the_same_array_again_writes_nothing(tmp_path: Path) -> None:
    """The stream worker stored the task's tool results before its first compaction: they still land on the task's
    canvas (its boundary starts at the first of them, not after them), the answer carries the node ids the turn
    wrote (applied in memory, not read back), and the same array again answers the same and touches no file."""
    files, clock = LocalFileStore(tmp_path), ManualClock()
    task = "Fix the failing parser test in the repository: the tokenizer drops quotes " * 3
    history = [{"role": "system", "content": "You are a coding agent."}, *_turn(8, task)]
    OffloadWriter(files).write(_events_of(history, clock))  # as the stream worker does before the shard compacts
    first = asyncio.run(compact_session(files, "t", "s", history, 20_000, clock=clock))
    on_disk = {e.tool_call_id: e.node_id for e in annotated_entries(files, "t", "s")}
    assert first.removed and all(r.node_id and r.node_id == on_disk[r.tool_call_id] for r in first.removed)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()}
    again = asyncio.run(compact_session(files, "t", "s", history, 20_000, clock=clock))
    assert (again.messages, again.removed) == (first.messages, first.removed)  # its level: nothing new to reclaim
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in tmp_path.rglob("*") if p.is_file()} == before


def _events_of(messages: list[dict], clock: ManualClock) -> list[ToolResultEvent]:
    calls = {c["id"]: c["function"] for m in messages for c in m.get("tool_calls") or ()}
    return [
        ToolResultEvent(
            tenant="t",
            session="s",
            tool_call_id=m["tool_call_id"],
            tool_name=calls[m["tool_call_id"]]["name"],
            arguments=calls[m["tool_call_id"]]["arguments"],
            content=m["content"],
            ts=clock.now(),
        )
        for m in messages
        if m["role"] == "tool"
    ]
