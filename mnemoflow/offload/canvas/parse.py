"""Read back exactly the Mermaid subset :mod:`.render` emits, and check a text against that subset.

The parser is strict on purpose: a canvas is re-parsed before it is saved, so anything outside the subset (a model
that slipped raw Mermaid in, a hand edit) is reported instead of guessed at. ``validate_mermaid`` lists every
problem with its line number; ``from_mermaid`` raises them as one :class:`~mnemoflow.errors.InvalidInput`.

Compaction reads the session's canvases on every request (to update the active one, to re-parse what it renders,
to inject them), so the last 256 parsed canvases are kept per text: a canvas is immutable, and the same text
always parses to the same canvas. (A canvas of a few dozen steps is a few kilobytes; a miss costs one parse.)
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from mnemoflow.errors import InvalidInput
from mnemoflow.offload.canvas._text import unescape
from mnemoflow.offload.canvas.model import STATUSES, Canvas
from mnemoflow.offload.canvas.render import BR

_JSON_STR = r'"(?:[^"\\]|\\.)*"'
_HEADER_RE = re.compile(
    rf"%%\{{ taskGoal: (?P<goal>{_JSON_STR}), progress: (?P<progress>\d{{1,3}}), "
    rf"createdTime: (?P<created>{_JSON_STR}), updatedTime: (?P<updated>{_JSON_STR})"
    rf'(?:, prefix: "(?P<prefix>\d{{3}})")?(?:, drawnBy: "(?P<drawn>[a-z+]+)")? \}}%%'
)
_HEADER_HINT = "line 1: expected %%{ taskGoal: …, progress: …, createdTime: …, updatedTime: … }%%"
_NODE_RE = re.compile(r'\s*(?P<id>[\w-]+)\["(?P<label>[^"]*)"\]')
_TOOLS_RE = re.compile(r"\s*%% tools: (?P<id>[\w-]+) (?P<calls>\[.*\])")
_EDGE_RE = re.compile(r'\s*(?P<src>[\w-]+) -->(?:\|"(?P<label>[^"]*)"\|)? (?P<dst>[\w-]+)')
_STATUS_RE = re.compile(r"status: (?P<status>\w+)")
_SUMMARY_RE = re.compile(r"summary: ?(?P<summary>.*)")
_TIME_RE = re.compile(r"Timestamp: (?P<time>\S+)")


def _time(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no time zone")
    return value


def _node(node_id: str, label: str) -> dict[str, Any]:
    """Fields of one node from its label; raises ValueError saying which part is off."""
    parts = label.split(BR)
    if len(parts) != 4:
        raise ValueError(f"label has {len(parts)} <br/>-separated parts, expected 4 (stage: action, status, …)")
    head, status, summary, time = parts
    stage, sep, action = head.partition(": ")
    if not sep:
        raise ValueError("first part of the label must be 'Stage: action'")
    if not (s := _STATUS_RE.fullmatch(status)) or s["status"] not in STATUSES:
        raise ValueError(f"status part {status[:40]!r} not one of {'|'.join(STATUSES)}")
    if not (m := _SUMMARY_RE.fullmatch(summary)):
        raise ValueError("third part of the label must be 'summary: …'")
    if not (t := _TIME_RE.fullmatch(time)):
        raise ValueError("fourth part of the label must be 'Timestamp: <ISO 8601>'")
    return {
        "id": node_id,
        "stage": unescape(stage),
        "action": unescape(action),
        "status": s["status"],
        "summary": unescape(m["summary"]),
        "timestamp": _time(t["time"]),
        "tool_call_ids": (),
    }


def _scan(text: str) -> tuple[dict[str, Any], int | None, list[str]]:
    """Canvas fields, the header's progress, and line-numbered problems."""
    lines = text.replace("\r\n", "\n").removesuffix("\n").split("\n")
    fields: dict[str, Any] = {"nodes": {}, "edges": []}
    problems: list[str] = []
    progress = None
    header = _HEADER_RE.fullmatch(lines[0])
    if header is None:
        problems.append(_HEADER_HINT)
    else:
        try:
            fields["task_goal"] = json.loads(header["goal"])
            fields["created"] = _time(json.loads(header["created"]))
            fields["updated"] = _time(json.loads(header["updated"]))
        except ValueError as exc:
            problems.append(f"line 1: {exc}")
        fields["prefix"] = header["prefix"]
        fields["drawn_by"] = tuple(header["drawn"].split("+")) if header["drawn"] else ()
        progress = int(header["progress"])
    if len(lines) < 2 or lines[1] != "flowchart TD":
        problems.append("line 2: expected 'flowchart TD'")
    tools: list[tuple[int, str, str]] = []
    for number, line in enumerate(lines[2:], start=3):
        try:
            if node := _NODE_RE.fullmatch(line):
                if node["id"] in fields["nodes"]:
                    raise ValueError(f"node {node['id']} declared twice")
                fields["nodes"][node["id"]] = _node(node["id"], node["label"])
            elif tool := _TOOLS_RE.fullmatch(line):
                tools.append((number, tool["id"], tool["calls"]))
            elif edge := _EDGE_RE.fullmatch(line):
                label = None if edge["label"] is None else unescape(edge["label"])
                fields["edges"].append({"src": edge["src"], "dst": edge["dst"], "label": label})
            else:
                raise ValueError(f"not a node, tools comment or edge of our subset: {line[:80]!r}")
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    for number, node_id, calls in tools:
        try:
            ids = json.loads(calls)
            if node_id not in fields["nodes"]:
                raise ValueError(f"tools for undeclared node {node_id}")
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ValueError("tools must be a JSON list of strings")
            fields["nodes"][node_id]["tool_call_ids"] += tuple(ids)
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    fields["nodes"] = list(fields["nodes"].values())
    return fields, progress, problems


def _build(text: str) -> tuple[Canvas | None, list[str]]:
    fields, progress, problems = _scan(text)
    if problems:
        return None, problems
    try:
        canvas = Canvas(**fields)
    except ValidationError as exc:
        return None, [f"{'.'.join(map(str, e['loc'])) or 'canvas'}: {e['msg']}" for e in exc.errors()]
    if progress != canvas.progress:
        return canvas, [f"line 1: progress {progress} does not match the node statuses ({canvas.progress})"]
    return canvas, []


def validate_mermaid(text: str) -> list[str]:
    """Problems that keep ``text`` from being a canvas in our subset (empty list: it is one)."""
    return _build(text)[1]


@lru_cache(maxsize=256)
def from_mermaid(text: str) -> Canvas:
    """Parse a canvas written by :func:`~mnemoflow.offload.canvas.render.to_mermaid`; inverse of it."""
    canvas, problems = _build(text)
    if problems or canvas is None:
        raise InvalidInput("not a valid canvas: " + "; ".join(problems))
    return canvas
