"""Rendering: deterministic output, render -> parse round trip and the subset check, over hostile text."""

from __future__ import annotations

import re
import sys
import unicodedata
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.canvas import Canvas, CanvasEdge, CanvasNode, from_mermaid, to_mermaid, validate_mermaid
from mnemoflow.offload.canvas._text import BREAKING_RE, clean

HOSTILE = [
    '"',
    "'",
    "[",
    "]",
    "(",
    ")",
    "{",
    "}",
    "<br>",
    "<br/>",
    "</br>",
    '<b x="1">',
    "#",
    "#quot;",
    "#35;",
    "&amp;",
    "&",
    ";",
    "%%",
    "%%{init: {}}%%",
    "}%%",
    "end",
    "END",
    " end ",
    "`",
    "```",
    "|",
    "-->",
    "---",
    "\\",
    "\n",
    "\r\n",
    "\t",
    "\x00",
    "\u2028",
    "\ud800",
    "😀",
    "👩‍👩‍👧",
    "中文",
    "Ω",
    "\u200b",
    "\ufeff",
    "graph TD",
    "subgraph",
    "click N1 call x()",
    "style:#f00;",
    "classDef",
    ":::",
    ": ",
    "status: done",
    "<br/>status: doing",
    "Timestamp: ",
    "\\u0025",
    "\\n",
    "@{ shape: rect }",
]

hostile_text = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(HOSTILE) | st.text(max_size=5), max_size=12).map("".join),
    st.lists(st.sampled_from(HOSTILE), min_size=150, max_size=400).map("".join),
)


def nonempty(limit: int) -> st.SearchStrategy[str]:
    return hostile_text.map(lambda s: s if clean(s, limit) else "x" + s)


times = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC))


@st.composite
def canvases(draw: st.DrawFn) -> Canvas:
    prefix = draw(st.none() | st.sampled_from(["001", "042", "999"]))
    count = draw(st.integers(0, 7))
    numbers = draw(st.lists(st.integers(1, 300), min_size=count, max_size=count, unique=True))
    ids = [f"{prefix}-N{k}" if prefix else f"N{k}" for k in numbers]
    calls = iter(f"call_{i}" for i in range(100))
    nodes = [
        CanvasNode(
            id=node_id,
            stage=draw(nonempty(40)),
            action=draw(nonempty(120)),
            status=draw(st.sampled_from(["done", "doing", "paused", "blocked"])),
            summary=draw(hostile_text),
            timestamp=draw(times),
            tool_call_ids=[next(calls) for _ in range(draw(st.integers(0, 3)))],
        )
        for node_id in ids
    ]
    pairs = (
        draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), unique=True, max_size=10)) if ids else []
    )
    edges = [CanvasEdge(src=s, dst=d, label=draw(st.none() | nonempty(60))) for s, d in pairs]
    created, updated = sorted([draw(times), draw(times)])
    drawn_by = tuple(sorted(draw(st.sets(st.sampled_from(["heuristic", "llm"])))))
    return Canvas(
        task_goal=draw(hostile_text),
        created=created,
        updated=updated,
        prefix=prefix,
        drawn_by=drawn_by,
        nodes=nodes,
        edges=edges,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canvases())
def test_round_trip_and_subset_check(canvas: Canvas) -> None:
    text = to_mermaid(canvas)
    assert validate_mermaid(text) == []
    assert from_mermaid(text) == canvas
    assert to_mermaid(Canvas.model_validate(canvas.model_dump())) == text  # deterministic


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canvases())
def test_labels_hold_no_raw_mermaid_syntax(canvas: Canvas) -> None:
    text = to_mermaid(canvas)
    lines = text.splitlines()
    assert lines[1] == "flowchart TD" and lines[0].startswith("%%{ taskGoal: ") and lines[0].endswith(" }%%")
    assert lines[0].count("}%%") == 1 and "%%{" not in "".join(lines[1:])
    for node in canvas.nodes:
        line = next(line for line in lines if line.startswith(f"    {node.id}["))
        label = line[len(node.id) + 6 : -2]
        assert '"' not in label and "`" not in label
        assert re.sub("<br/>", "", label).count("<") == 0 and label.count("<br/>") == 3


def test_breaking_characters_are_the_unicode_categories() -> None:
    """``clean`` spells the categories that break a label as ranges: they must be exactly those categories."""
    breaking = {"Cc", "Cs", "Zl", "Zp"}
    wrong = [
        hex(c)
        for c in range(sys.maxunicode + 1)
        if bool(BREAKING_RE.fullmatch(chr(c))) != (unicodedata.category(chr(c)) in breaking)
    ]
    assert wrong == []
    assert clean(" a\tb\u2028c\x85d\ud800 ", 10) == "a b c d"


def test_seed_node_format() -> None:
    t = datetime(2025, 1, 31, 9, 5, tzinfo=UTC)
    node = CanvasNode(id="001-N1", stage="Explore", action="read the test", status="done", summary="race", timestamp=t)
    canvas = Canvas(task_goal="Fix it", created=t, updated=t, prefix="001", nodes=[node])
    assert to_mermaid(canvas) == (
        '%%{ taskGoal: "Fix it", progress: 100, createdTime: "2025-01-31T09:05:00Z", '
        'updatedTime: "2025-01-31T09:05:00Z", prefix: "001" }%%\n'
        "flowchart TD\n"
        '    001-N1["Explore: read the test<br/>status: done<br/>summary: race<br/>Timestamp: 2025-01-31T09:05:00Z"]\n'
    )
    by_both = canvas.model_copy(update={"drawn_by": ("heuristic", "llm")})
    assert to_mermaid(by_both).startswith(
        '%%{ taskGoal: "Fix it", progress: 100, createdTime: "2025-01-31T09:05:00Z", '
        'updatedTime: "2025-01-31T09:05:00Z", prefix: "001", drawnBy: "heuristic+llm" }%%\n'
    )
    assert from_mermaid(to_mermaid(by_both)).drawn_by == ("heuristic", "llm")


BROKEN = {
    "raw quote in a label": (
        '%%{ taskGoal: "g", progress: 0, createdTime: "2025-01-01T00:00:00Z", updatedTime: "2025-01-01T00:00:00Z" }%%\n'
        'flowchart TD\n    N1["a: say "hi"<br/>status: doing<br/>summary: <br/>Timestamp: 2025-01-01T00:00:00Z"]\n'
    ),
    "status outside the vocabulary": (
        '%%{ taskGoal: "g", progress: 0, createdTime: "2025-01-01T00:00:00Z", updatedTime: "2025-01-01T00:00:00Z" }%%\n'
        'flowchart TD\n    N1["a: b<br/>status: todo<br/>summary: <br/>Timestamp: 2025-01-01T00:00:00Z"]\n'
    ),
    "quoted header key (TDAM's format)": ('%%{ "taskGoal": "g", "progress": 0 }%%\nflowchart TD\n'),
    "edge to an undeclared node": (
        '%%{ taskGoal: "g", progress: 0, createdTime: "2025-01-01T00:00:00Z", updatedTime: "2025-01-01T00:00:00Z" }%%\n'
        "flowchart TD\n    N1 --> N2\n"
    ),
    "raw html in a label": (
        '%%{ taskGoal: "g", progress: 0, createdTime: "2025-01-01T00:00:00Z", updatedTime: "2025-01-01T00:00:00Z" }%%\n'
        'flowchart TD\n    N1["a: <b>b</b><br/>status: doing<br/>summary: <br/>Timestamp: 2025-01-01T00:00:00Z"]\n'
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_texts_are_rejected(name: str) -> None:
    assert validate_mermaid(BROKEN[name]) != []
    with pytest.raises(InvalidInput, match="not a valid canvas"):
        from_mermaid(BROKEN[name])
