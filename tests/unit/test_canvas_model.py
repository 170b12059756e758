"""Canvas model and operations: invariants, deterministic ids, rejections, tombstones, purity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.canvas import (
    MAX_OPS,
    AddEdge,
    AddNode,
    AssignToolCalls,
    Canvas,
    CanvasOps,
    SetStatus,
    UpdateNode,
    apply_ops,
    fingerprint,
    to_mermaid,
    validate_mermaid,
)

T0 = datetime(2025, 1, 31, 9, 0, tzinfo=UTC)


def empty(prefix: str | None = "001") -> Canvas:
    return Canvas(task_goal="fix the flaky test", created=T0, updated=T0, prefix=prefix)


def three() -> Canvas:
    ops = [
        AddNode(stage="Explore", action="read test", status="done", tool_call_ids=("c1", "c2")),
        AddNode(stage="Fix", action="patch setup", after="N1", tool_call_ids=("c3",)),
        AddNode(stage="Verify", action="run tests", status="paused", after="N2"),
    ]
    return apply_ops(empty(), ops, T0 + timedelta(minutes=1))


def test_auto_ids_are_sequential_and_carry_the_prefix() -> None:
    canvas = three()
    assert [n.id for n in canvas.nodes] == ["001-N1", "001-N2", "001-N3"]
    assert [(e.src, e.dst) for e in canvas.edges] == [("001-N1", "001-N2"), ("001-N2", "001-N3")]
    bare = apply_ops(empty(None), [AddNode(stage="a", action="b")] * 2, T0)
    assert [n.id for n in bare.nodes] == ["N1", "N2"]


def test_ids_after_an_explicit_id_continue_from_the_highest() -> None:
    canvas = apply_ops(empty(), [AddNode(id="N7", stage="a", action="b"), AddNode(stage="c", action="d")], T0)
    assert [n.id for n in canvas.nodes] == ["001-N7", "001-N8"]


def test_apply_is_pure_and_sets_updated() -> None:
    before = empty()
    after = apply_ops(before, [AddNode(stage="a", action="b")], T0 + timedelta(hours=1))
    assert before.nodes == () and before.updated == T0
    assert after.updated == T0 + timedelta(hours=1) and after.created == T0


def test_ops_parse_from_model_json() -> None:
    payload = {
        "ops": [
            {"op": "add_node", "stage": "Explore", "action": "grep", "tool_call_ids": ["c1"]},
            {"op": "set_status", "id": "N1", "status": "done"},
            {"op": "add_node", "stage": "Fix", "action": "edit"},
            {"op": "add_edge", "src": "N2", "dst": "N1", "label": "again"},
            {"op": "update_node", "id": "N1", "summary": "found it"},
            {"op": "assign_tool_calls", "id": "N1", "tool_call_ids": ["c2"]},
        ]
    }
    canvas = apply_ops(empty(), CanvasOps.model_validate(payload), T0)
    node = canvas.nodes[0]
    assert (node.status, node.summary, node.tool_call_ids) == ("done", "found it", ("c1", "c2"))


@pytest.mark.parametrize(
    "payload",
    [
        {"ops": [{"op": "delete_node", "id": "N1"}]},
        {"ops": [{"op": "set_status", "id": "N1", "status": "todo"}]},
        {"ops": [{"op": "add_node", "id": "end", "stage": "a", "action": "b"}]},
        {"ops": [{"op": "add_node", "stage": "a", "action": "b", "tool_call_ids": ["../etc"]}]},
        {"ops": [{"op": "add_node", "stage": " \n ", "action": "b"}]},
        {"ops": [{"op": "add_node", "stage": "a", "action": "b"}] * (MAX_OPS + 1)},
    ],
)
def test_malformed_ops_are_rejected_by_the_schema(payload: dict) -> None:
    with pytest.raises(ValidationError):
        CanvasOps.model_validate(payload)


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (AddNode(id="N2", stage="a", action="b"), "already exists"),
        (UpdateNode(id="N9", summary="x"), "unknown node"),
        (SetStatus(id="N9", status="done"), "unknown node"),
        (AddEdge(src="N1", dst="N9"), "unknown node"),
        (AssignToolCalls(id="N9", tool_call_ids=("c1",)), "unknown node"),
        (AddNode(stage="a", action="b", after="N9"), "unknown node"),
    ],
)
def test_ops_breaking_invariants_raise_invalid_input_naming_the_op(op: object, message: str) -> None:
    ops = [SetStatus(id="N1", status="done"), op]
    with pytest.raises(InvalidInput, match=rf"canvas op 1 \({op.op}\): .*{message}"):  # type: ignore[attr-defined]
        apply_ops(three(), ops, T0)  # type: ignore[list-item]


def test_reassigning_a_tool_call_moves_it() -> None:
    canvas = apply_ops(three(), [AssignToolCalls(id="N3", tool_call_ids=("c2", "c9"))], T0)
    owners = {call: node.id for node in canvas.nodes for call in node.tool_call_ids}
    assert owners == {"c1": "001-N1", "c2": "001-N3", "c3": "001-N2", "c9": "001-N3"}
    assert canvas.node_for_tool_call("c2") == canvas.node("001-N3")
    moved_by_add = apply_ops(canvas, [AddNode(stage="x", action="y", tool_call_ids=("c1",))], T0)
    assert moved_by_add.node_for_tool_call("c1").id == "001-N4"  # type: ignore[union-attr]


def test_blocked_nodes_are_frozen_tombstones() -> None:
    canvas = apply_ops(three(), [SetStatus(id="N2", status="blocked")], T0)
    for op in (
        UpdateNode(id="N2", summary="retry"),
        SetStatus(id="N2", status="doing"),
        AssignToolCalls(id="N2", tool_call_ids=("c1",)),
        AssignToolCalls(id="N1", tool_call_ids=("c3",)),  # c3 lives on the tombstone
    ):
        with pytest.raises(InvalidInput, match="blocked|tombstone"):
            apply_ops(canvas, [op], T0)
    retry = apply_ops(
        canvas,
        [SetStatus(id="N2", status="blocked"), AddNode(stage="Fix", action="other approach", after="N2")],
        T0,
    )
    assert retry.node("001-N2").status == "blocked"  # type: ignore[union-attr]
    assert len(retry.nodes) == 4 and retry.edges[-1].src == "001-N2"


def test_duplicate_edges_are_a_no_op() -> None:
    canvas = apply_ops(three(), [AddEdge(src="N1", dst="N2", label="again")], T0)
    assert len(canvas.edges) == 2


def test_failed_batch_changes_nothing() -> None:
    base = three()
    with pytest.raises(InvalidInput):
        apply_ops(base, [AddNode(stage="a", action="b"), SetStatus(id="N99", status="done")], T0)
    assert base == three()


def test_now_must_be_aware() -> None:
    with pytest.raises(InvalidInput, match="timezone-aware"):
        apply_ops(empty(), [], datetime(2025, 1, 1))


def test_canvas_invariants() -> None:
    node = {"stage": "a", "action": "b", "status": "done", "timestamp": T0}
    base = {"task_goal": "g", "created": T0, "updated": T0}
    with pytest.raises(ValidationError, match="duplicate node ids"):
        Canvas(**base, nodes=[{**node, "id": "N1"}, {**node, "id": "N1"}])
    with pytest.raises(ValidationError, match="unknown node"):
        Canvas(**base, nodes=[{**node, "id": "N1"}], edges=[{"src": "N1", "dst": "N2"}])
    with pytest.raises(ValidationError, match="more than one node"):
        Canvas(**base, nodes=[{**node, "id": f"N{i}", "tool_call_ids": ["c1"]} for i in (1, 2)])
    with pytest.raises(ValidationError, match="prefix"):
        Canvas(**base, prefix="002", nodes=[{**node, "id": "001-N1"}])
    with pytest.raises(ValidationError, match="timezone"):
        Canvas(task_goal="g", created=datetime(2025, 1, 1), updated=T0)


def test_progress_ignores_tombstones() -> None:
    canvas = apply_ops(three(), [AddNode(stage="x", action="dead end", status="blocked")], T0)
    assert canvas.progress == 33  # 1 done of 3 live nodes
    assert empty().progress == 0


def test_text_and_time_are_normalised() -> None:
    plus2 = timezone(timedelta(hours=2))
    canvas = apply_ops(
        empty(),
        [AddNode(stage="a", action="b\nc", summary="x" * 500, timestamp=datetime(2025, 1, 1, 12, 0, 0, 999, plus2))],
        T0,
    )
    node = canvas.nodes[0]
    assert node.action == "b c"
    assert len(node.summary) == 200 and node.summary.endswith("…")
    assert node.timestamp == datetime(2025, 1, 1, 10, 0, tzinfo=UTC) and node.timestamp.tzinfo is UTC


def test_fingerprint_sees_same_length_edits_late_in_the_text() -> None:
    a = three()
    b = apply_ops(a, [UpdateNode(id="N3", action="run testz")], a.updated)
    assert len(to_mermaid(a)) == len(to_mermaid(b))
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) == fingerprint(three())


_NODE_IDS = st.sampled_from(["N1", "N2", "N3", "N4", "001-N2", "N9"])
_CALLS = st.lists(st.sampled_from(["c1", "c2", "c3", "c4"]), min_size=1, max_size=3).map(tuple)
_OPS = st.one_of(
    st.builds(
        AddNode,
        stage=st.just("s"),
        action=st.text().map(lambda s: "a" + s),
        tool_call_ids=_CALLS,
        after=st.none() | _NODE_IDS,
        status=st.sampled_from(["done", "doing", "paused", "blocked"]),
    ),
    st.builds(UpdateNode, id=_NODE_IDS, summary=st.text()),
    st.builds(AddEdge, src=_NODE_IDS, dst=_NODE_IDS),
    st.builds(SetStatus, id=_NODE_IDS, status=st.sampled_from(["done", "doing", "paused", "blocked"])),
    st.builds(AssignToolCalls, id=_NODE_IDS, tool_call_ids=_CALLS),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_OPS, max_size=6), max_size=5))
def test_random_batches_keep_invariants_and_tombstones(batches: list[list[object]]) -> None:
    canvas = empty()
    for batch in batches:
        try:
            new = apply_ops(canvas, batch, T0)  # type: ignore[arg-type]
        except InvalidInput:
            continue
        old_ids = [n.id for n in canvas.nodes]
        assert [n.id for n in new.nodes][: len(old_ids)] == old_ids  # nodes are never deleted
        for node in canvas.nodes:
            if node.status == "blocked":
                assert new.node(node.id) == node  # tombstones never change
        assert validate_mermaid(to_mermaid(new)) == []
        canvas = new


def test_no_node_leads_to_itself() -> None:
    """Qwen2.5 0.5B added its first node "after" itself: that adds no edge; an explicit self-edge is refused."""
    canvas = apply_ops(empty(), [AddNode(id="001-N1", stage="Explore", action="ls", after="001-N1")], T0)
    assert canvas.edges == ()
    with pytest.raises(InvalidInput, match="to itself"):
        apply_ops(canvas, [AddEdge(src="N1", dst="001-N1")], T0)
