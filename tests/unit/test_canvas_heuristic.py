"""The model-free canvas: stages by intent, tombstones for failed calls, loops and data edges, one node per call."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from mnemoflow.offload.boundary import apply_judgement, heuristic_judge
from mnemoflow.offload.canvas import Canvas, apply_ops, from_mermaid, to_mermaid, validate_mermaid
from mnemoflow.offload.canvas_heuristic import call_ops, heuristic_canvas, merge_action, short_path
from mnemoflow.offload.canvas_update import load_canvas, update_canvases
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.messages import ToolPair
from mnemoflow.offload.session_state import SessionState
from mnemoflow.offload.summarize import heuristic_summary
from mnemoflow.prompts.offload_canvas import FirstReply, Reply, reply_model
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ScriptedLLM

T0 = datetime(2025, 1, 31, 9, 0, tzinfo=UTC)
OK = "\n[Command finished with exit code 0]"
VIEW = "Here's the result of running `cat -n` on /repo/pkg/parser.py:\n" + "\n".join(
    f"{i:6}\tvalue = tokens.split_quoted(line)  # uses pkg.lexer.Lexer" for i in range(1, 80)
)
TRACE = (
    'Traceback (most recent call last):\n  File "/repo/pkg/parser.py", line 12, in parse\n'
    "    return split_quoted(x)\npkg.lexer.LexError: unterminated quote\n[Command finished with exit code 1]"
)
PYTEST_FAIL = (
    "FAILED tests/test_parser.py::test_nested_quotes - AssertionError: assert ['a'] == ['a', 'b']\n"
    "=== 1 failed, 12 passed in 0.31s ===\n[Command finished with exit code 1]"
)
STEPS = [  # (tool, arguments, output): an agent fixing a parser
    ("str_replace_editor", {"command": "view", "path": "/repo/pkg/parser.py"}, VIEW),
    ("str_replace_editor", {"command": "create", "path": "/repo/reproduce_bug.py"}, "File created successfully"),
    ("execute_bash", {"command": "cd /repo && python reproduce_bug.py"}, TRACE),
    ("str_replace_editor", {"command": "str_replace", "path": "/repo/reproduce_bug.py"}, "The file was edited."),
    ("execute_bash", {"command": "cd /repo && python reproduce_bug.py"}, "['a']" + OK),
    ("str_replace_editor", {"command": "str_replace", "path": "/repo/pkg/parser.py"}, "The file was edited."),
    ("execute_bash", {"command": "cd /repo && python reproduce_bug.py"}, "['a', 'b'" + OK),
    ("str_replace_editor", {"command": "str_replace", "path": "/repo/pkg/parser.py"}, "The file was edited."),
    ("execute_bash", {"command": "cd /repo && python reproduce_bug.py"}, "['a', 'b']" + OK),
    ("execute_bash", {"command": "cd /repo && python -m pytest tests/test_parser.py | tail"}, PYTEST_FAIL),
    ("execute_bash", {"command": "cd /repo && python -m pytest tests/test_parser.py | tail"}, "13 passed" + OK),
]


def entries() -> list[OffloadEntry]:
    out = []
    for seq, (tool, args, output) in enumerate(STEPS):
        arguments = json.dumps(args)
        summary = heuristic_summary(ToolPair(f"c{seq}", tool, arguments, output))
        out.append(
            OffloadEntry(
                seq=seq,
                tool_call_id=f"c{seq}",
                tool_name=tool,
                arguments=arguments,
                summary=summary.summary,
                score=summary.score,
                error=summary.error,
                ref=f"refs/c{seq}.md",
                result_bytes=len(output),
                result_tokens=len(output) // 4,
                ts=T0 + timedelta(seconds=10 * (seq + 1)),
            )
        )
    return out


def empty() -> Canvas:
    return Canvas(task_goal="Parser drops quoted tokens", created=T0, updated=T0, prefix="001")


def drawn() -> Canvas:
    return heuristic_canvas(empty(), entries(), T0 + timedelta(minutes=5))


def test_a_canvas_a_person_would_draw() -> None:
    canvas = drawn()
    live = [(n.stage, n.status) for n in canvas.nodes if n.status != "blocked"]
    assert live == [("Explore", "done"), ("Reproduce", "done"), ("Edit", "done"), ("Verify", "done"), ("Test", "doing")]
    blocked = {n.stage: n for n in canvas.nodes if n.status == "blocked"}
    assert set(blocked) == {"Reproduce", "Test"}
    assert blocked["Reproduce"].summary == "exit 1: pkg.lexer.LexError: unterminated quote"
    assert blocked["Reproduce"].tool_call_ids == ("c2",)
    assert "tests/test_parser.py::test_nested_quotes" in blocked["Test"].summary
    edit = next(n for n in canvas.nodes if n.stage == "Edit")
    assert edit.tool_call_ids == ("c5", "c7")  # the fix-and-check loop is one Edit node and one Verify node
    assert "pkg.lexer.Lexer" in canvas.nodes[0].summary  # what the exploration found stays on its node
    labels = {(canvas.node(e.src).stage, canvas.node(e.dst).stage, e.label) for e in canvas.edges}  # type: ignore[union-attr]
    assert ("Explore", "Edit", "uses") in labels  # the edit uses what the exploration read
    assert ("Reproduce", "Verify", "uses") in labels  # the verification runs the reproduction's script
    assert ("Verify", "Edit", "again") in labels
    assert ("Test", "Test", "retry") in labels  # from the failed run to the passing one
    assert ("Reproduce", "Reproduce", "retry") in labels


def test_every_call_on_exactly_one_node_and_the_rendering_parses() -> None:
    canvas = drawn()
    calls = [c for n in canvas.nodes for c in n.tool_call_ids]
    assert sorted(calls) == sorted(e.tool_call_id for e in entries())
    text = to_mermaid(canvas)
    assert validate_mermaid(text) == [] and from_mermaid(text) == canvas
    assert "#59;" not in text  # calls and notes are joined by " · ", not ";"


def test_the_heuristic_speaks_the_models_operations_and_folds_a_full_batch() -> None:
    """Each call is a few typed operations, applied by the same ``apply_ops`` as a model's; a batch of 30 calls
    (more operations than one model reply may hold) still folds, every call on its own node or a shared one."""
    canvas = empty()
    for entry in entries():
        ops = call_ops(canvas, entry)
        assert 1 <= len(ops) <= 6
        canvas = apply_ops(canvas, ops, T0 + timedelta(minutes=5))
    assert canvas == drawn()
    many = [e.model_copy(update={"seq": k, "tool_call_id": f"m{k}"}) for k, e in enumerate(entries() * 3)][:30]
    folded = heuristic_canvas(empty(), many, T0 + timedelta(minutes=5))
    assert sorted(c for n in folded.nodes for c in n.tool_call_ids) == sorted(e.tool_call_id for e in many)


def test_actions_stay_short_and_count_what_does_not_fit() -> None:
    assert short_path("/workspace/repo__1.0/pkg/sub/mod.py") == "…/pkg/sub/mod.py"
    assert short_path("pkg/sub/mod.py") == "pkg/sub/mod.py"
    action = "view a.py"
    for i in range(40):
        action = merge_action(action, f"grep -n symbol_{i} pkg/module_{i}.py")
    assert len(action) <= 120 and action.endswith("more)")
    assert merge_action("view a.py", "view a.py") == "view a.py"


def test_a_model_canvas_gets_tombstones_for_the_failures_it_left_live(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    judgement = heuristic_judge("Fix the parser so that nested quoted tokens are kept, see the failing test " * 2, None)
    state, canvas = apply_judgement(SessionState(tenant="t", session="s"), judgement, "u1", T0, start=0)
    assert canvas is not None and state.active_canvas is not None
    batch = entries()[:3]
    reply = Reply.model_validate(
        {
            "ops": [
                {
                    "op": "add_node",
                    "stage": "Reproduce",
                    "action": "write and run the script",
                    "status": "done",
                    "tool_call_ids": ["c0", "c1", "c2"],
                },
            ]
        }
    )
    name = state.active_canvas
    llm = ScriptedLLM([reply])
    asyncio.run(update_canvases(files, state, batch, T0 + timedelta(minutes=1), llm))
    assert issubclass(llm.calls[0].output_model, FirstReply)  # an empty canvas: the grammar allows new nodes only
    saved = load_canvas(files, "t", "s", name)
    assert saved is not None
    node = saved.node_for_tool_call("c2")
    assert node is not None and node.status == "blocked" and "LexError" in node.summary
    assert saved.node_for_tool_call("c0") == saved.node_for_tool_call("c1") != node


def test_an_empty_canvas_takes_new_nodes_only() -> None:
    """On an empty canvas every other operation would name a node that does not exist (Qwen2.5 0.5B did)."""
    empty = Canvas(task_goal="fix the parser", created=T0, updated=T0, prefix="001")
    assert issubclass(reply_model(empty), FirstReply) and reply_model(drawn()) is Reply
    three = reply_model(empty, calls=3)  # at most a node a tool call: the 0.5B added nodes until max_tokens
    node = {"op": "add_node", "stage": "a", "action": "b"}
    steps = [{**node, "action": f"b{i}"} for i in range(4)]
    assert len(three.model_validate({"ops": steps[:3]}).ops) == 3
    with pytest.raises(ValidationError):
        three.model_validate({"ops": steps})
    for model in (three, Reply):  # one step drawn twice: the 0.5B drew eight alike nodes
        with pytest.raises(ValidationError, match="same step"):
            model.model_validate({"ops": [node, node]})
    with pytest.raises(ValidationError):
        FirstReply.model_validate({"ops": [{"op": "update_node", "id": "001-N2", "summary": "s"}]})
    with pytest.raises(ValidationError):
        FirstReply.model_validate({"ops": []})
