"""Render a canvas as Mermaid, deterministically, in exactly the subset :mod:`.parse` reads back.

Output (one statement per line)::

    %%{ taskGoal: "Fix the flaky test", progress: 50, createdTime: "2025-01-31T09:00:00Z", updatedTime: "…" }%%
    flowchart TD
        001-N1["Explore: read the test<br/>status: done<br/>summary: race in setup<br/>Timestamp: 2025-01-31T09:05:00Z"]
        %% tools: 001-N1 ["call_1","call_2"]
        001-N1 --> 001-N2
        001-N2 -->|"retry"| 001-N3

The header keys are unquoted on purpose: Mermaid strips a ``%%{ word: … }%%`` directive before parsing, but a
header starting with a quoted key (TDAM's ``%%{ "taskGoal": … }%%``) fails to parse. Header values are JSON with
``%`` written as ``\\u0025`` so ``}%%`` cannot end the header early. Tool-call ids ride in ``%%`` comments, which
Mermaid ignores, so the node -> tool call mapping survives a round trip. The same canvas always renders to the
same bytes, so :func:`fingerprint` can skip unchanged rewrites (TDAM compared ``length:first 64 chars``).
"""

from __future__ import annotations

import hashlib
import json

from mnemoflow.offload.canvas._text import escape, format_time
from mnemoflow.offload.canvas.model import Canvas, CanvasEdge, CanvasNode

INDENT = "    "
BR = "<br/>"


def _json(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("%", "\\u0025").replace("<", "\\u003c").replace(">", "\\u003e")


def header(canvas: Canvas) -> str:
    """The one-line ``%%{ taskGoal, progress, createdTime, updatedTime[, prefix][, drawnBy] }%%`` metadata header."""
    fields = [
        f"taskGoal: {_json(canvas.task_goal)}",
        f"progress: {canvas.progress}",
        f"createdTime: {_json(format_time(canvas.created))}",
        f"updatedTime: {_json(format_time(canvas.updated))}",
    ]
    if canvas.prefix is not None:
        fields.append(f"prefix: {_json(canvas.prefix)}")
    if canvas.drawn_by:
        fields.append(f"drawnBy: {_json('+'.join(canvas.drawn_by))}")
    return "%%{ " + ", ".join(fields) + " }%%"


def node_label(node: CanvasNode) -> str:
    """``Stage: action<br/>status: …<br/>summary: …<br/>Timestamp: …``, escaped for a quoted label."""
    return BR.join(
        [
            f"{escape(node.stage, stage=True)}: {escape(node.action)}",
            f"status: {node.status}",
            f"summary: {escape(node.summary)}",
            f"Timestamp: {format_time(node.timestamp)}",
        ]
    )


def node_line(node: CanvasNode) -> str:
    return f'{INDENT}{node.id}["{node_label(node)}"]'


def tools_line(node: CanvasNode) -> str:
    return f"{INDENT}%% tools: {node.id} {json.dumps(list(node.tool_call_ids), separators=(',', ':'))}"


def edge_line(edge: CanvasEdge) -> str:
    arrow = "-->" if edge.label is None else f'-->|"{escape(edge.label)}"|'
    return f"{INDENT}{edge.src} {arrow} {edge.dst}"


def to_mermaid(canvas: Canvas) -> str:
    """The canvas as Mermaid text (newline-terminated); nodes and edges in canvas order."""
    lines = [header(canvas), "flowchart TD"]
    for node in canvas.nodes:
        lines.append(node_line(node))
        if node.tool_call_ids:
            lines.append(tools_line(node))
    lines.extend(edge_line(edge) for edge in canvas.edges)
    return "\n".join(lines) + "\n"


def fingerprint(canvas: Canvas) -> str:
    """sha256 hex of the rendering: equal fingerprints mean the file on disk need not be rewritten."""
    return hashlib.sha256(to_mermaid(canvas).encode("utf-8")).hexdigest()
