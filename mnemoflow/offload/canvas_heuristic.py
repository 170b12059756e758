"""The model-free canvas engine: the operations a person drawing the task would make, read from the calls alone.

It returns the same thing the model path returns, canvas operations that code applies
(:func:`~mnemoflow.offload.canvas.apply_ops`), so rendering and validation stay one path. Call by call:

* the call's **stage** is its intent (:mod:`.intent`): Explore, Edit, Test, Setup, Act, Plan; running a script is
  Reproduce until the canvas holds an Edit, Verify after one;
* a **failed** call (``entry.error``, read by :mod:`.failures`) gets a ``blocked`` node of its own, the tombstone,
  hanging off the stage it failed in, with the error line as its summary; when the next call of that stage
  succeeds, a ``retry`` edge leads from the tombstone to where the work went on;
* a call that succeeds joins the current stage node if it has the same stage (calls grouped by intent); a call
  that goes back to the node just before on the same file (edit, run, edit, run) joins that node again, so a
  fix-and-check loop is two nodes and an ``again`` edge, not a chain of forty; otherwise the call opens the next
  node and the previous one is done;
* a call on a file an earlier node of another stage worked on gets a ``uses`` edge from it (the edit uses what
  the exploration found; the verification runs the script the reproduction wrote);
* node summaries keep the identifiers the outputs introduced (:mod:`.identifiers`), newest first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from mnemoflow.offload.canvas import (
    AddEdge,
    AddNode,
    AssignToolCalls,
    Canvas,
    CanvasNode,
    CanvasOp,
    SetStatus,
    UpdateNode,
    apply_ops,
)
from mnemoflow.offload.canvas.model import ACTION_MAX, SUMMARY_MAX, node_number
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.identifiers import ranked
from mnemoflow.offload.intent import CallIntent, Intent, call_intent

STAGES: dict[Intent, str] = {
    "explore": "Explore",
    "edit": "Edit",
    "test": "Test",
    "setup": "Setup",
    "act": "Act",
    "plan": "Plan",
}
_DESCRIBE_MAX = 70
SEPARATOR = " · "
"""Between the calls of an action and the notes of a summary (``;`` and ``,`` occur in commands and errors)."""
_MORE_RE = re.compile(r" \(\+(\d+) more\)$")
_LONG_PATH_RE = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/){3,}[\w.@+-]+")


def stage_of(entry: OffloadEntry, canvas: Canvas) -> str:
    """The stage of ``entry``'s call on ``canvas``: its intent, with running split into Reproduce and Verify."""
    intent = call_intent(entry.tool_name, entry.arguments).intent
    if intent == "run":
        edited = any(n.stage == "Edit" and n.status != "blocked" for n in canvas.nodes)
        return "Verify" if edited else "Reproduce"
    return STAGES[intent]


def short_path(path: str) -> str:
    """An absolute path of five or more parts as ``…/`` and its last three (the part a reader tells files by)."""
    parts = path.split("/")
    return "…/" + "/".join(parts[-3:]) if path.startswith("/") and len(parts) > 4 else path


def describe(call: CallIntent) -> str:
    """The call as a node shows it: ``view …/modeling/separable.py``, ``python reproduce.py``."""
    text = _LONG_PATH_RE.sub(lambda m: short_path(m.group()), call.target)
    return text if len(text) <= _DESCRIBE_MAX else text[: _DESCRIBE_MAX - 1].rstrip() + "…"


def merge_action(old: str, desc: str) -> str:
    """``old · desc`` while it fits the action bound, then ``old (+N more)``; a repeated description is not added."""
    match = _MORE_RE.search(old)
    hidden = int(match[1]) if match else 0
    shown = (old[: match.start()] if match else old).split(SEPARATOR)
    if desc in shown:
        return old
    shown.append(desc)

    def render() -> str:
        return SEPARATOR.join(shown) + (f" (+{hidden} more)" if hidden else "")

    while len(render()) > ACTION_MAX and len(shown) > 1:
        shown.pop()
        hidden += 1
    return render()


def call_notes(entry: OffloadEntry) -> list[str]:
    """What a node keeps of one call: its failure line, else the identifiers its output introduced (those its
    arguments name are in the action already)."""
    if entry.error:
        return [entry.error]
    return [i.text for i in ranked(entry.summary, [entry.arguments]) if i.kind != "error_line"]


def merge_summary(new: Sequence[str], old: str) -> str:
    """The notes of the newest call first, then the node's earlier ones, each once, whole items within the bound."""
    items = list(dict.fromkeys([*new, *(p for p in old.split(SEPARATOR) if p)]))
    out: list[str] = []
    size = 0
    for item in items:
        cost = len(item) + (len(SEPARATOR) if out else 0)
        if size + cost > SUMMARY_MAX:
            continue
        out.append(item)
        size += cost
    return SEPARATOR.join(out)


def _path_key(path: str) -> str:
    return "/".join(path.rstrip("/").split("/")[-2:])


def _paths(call: CallIntent) -> list[str]:
    if call.path:
        return [call.path]
    return [i.text for i in ranked(call.target) if i.kind == "path"][:2]


def _names(node: CanvasNode, call: CallIntent, desc: str | None = None) -> bool:
    """Whether ``node``'s action names what ``call`` works on: one of its files, or (given ``desc``) the same call."""
    if desc is not None and desc in node.action.split(SEPARATOR):
        return True
    for path in _paths(call):
        key = re.compile(r"(?:^|[\s/])" + re.escape(_path_key(path)) + r"(?=$|[\s;,)'\"])")
        if key.search(node.action):
            return True
    return False


def _user_of(canvas: Canvas, call: CallIntent, stage: str, skip: set[str]) -> str | None:
    """The latest live node of another stage, other than ``skip``, whose action names a file this call works on."""
    if not _paths(call):
        return None
    for node in reversed(canvas.nodes):
        if node.id not in skip and node.status != "blocked" and node.stage != stage and _names(node, call):
            return node.id
    return None


def _loop_partner(canvas: Canvas, current: CanvasNode, stage: str, call: CallIntent, desc: str) -> CanvasNode | None:
    """A live node of ``stage`` next to ``current`` (an edge either way) that works on the same thing: the other
    half of a fix-and-check loop."""
    near = {e.dst for e in canvas.edges if e.src == current.id} | {e.src for e in canvas.edges if e.dst == current.id}
    for node in reversed(canvas.nodes):
        if node.id in near and node.status != "blocked" and node.stage == stage and _names(node, call, desc):
            return node
    return None


def _next_id(canvas: Canvas, planned: int = 0) -> str:
    """The id of the next node, after ``planned`` nodes the caller adds before it."""
    number = max((node_number(n.id) for n in canvas.nodes), default=0) + 1 + planned
    return f"{canvas.prefix}-N{number}" if canvas.prefix else f"N{number}"


def _tombstone(node_id: str, stage: str, entry: OffloadEntry, after: str | None) -> AddNode:
    """A failed call's own ``blocked`` node, hanging off ``after``, the error line as its summary."""
    return AddNode(
        id=node_id,
        stage=stage,
        action=describe(call_intent(entry.tool_name, entry.arguments)),
        status="blocked",
        summary=merge_summary(call_notes(entry), ""),
        timestamp=entry.ts,
        tool_call_ids=(entry.tool_call_id,),
        after=after,
    )


def _current(canvas: Canvas) -> CanvasNode | None:
    """The stage node the work is in: the ``doing`` node touched last, else the newest node that is no tombstone."""
    doing = [n for n in canvas.nodes if n.status == "doing"]
    if doing:
        return max(reversed(doing), key=lambda n: n.timestamp)
    return next((n for n in reversed(canvas.nodes) if n.status != "blocked"), None)


def _pending_tombstone(canvas: Canvas, stage: str) -> CanvasNode | None:
    """The newest node if it is a tombstone of ``stage`` that no edge leaves yet (the failure a retry follows)."""
    last = canvas.nodes[-1] if canvas.nodes else None
    if last is None or last.status != "blocked" or last.stage != stage:
        return None
    return None if any(e.src == last.id for e in canvas.edges) else last


def call_ops(canvas: Canvas, entry: OffloadEntry) -> list[CanvasOp]:
    """The operations that fold one call into ``canvas`` (see the module docstring)."""
    call = call_intent(entry.tool_name, entry.arguments)
    stage, desc, notes = stage_of(entry, canvas), describe(call), call_notes(entry)
    current = _current(canvas)
    ids = (entry.tool_call_id,)
    if entry.error:
        anchor = current.id if current else (canvas.nodes[-1].id if canvas.nodes else None)
        return [_tombstone(_next_id(canvas), stage, entry, anchor)]
    tombstone = _pending_tombstone(canvas, stage)
    partner = None
    if current is not None and current.stage != stage:
        partner = _loop_partner(canvas, current, stage, call, desc)
    ops: list[CanvasOp] = []
    if current is not None and (partner is not None or current.stage == stage):
        node = partner or current
        if partner is not None:
            ops += [SetStatus(id=current.id, status="done", timestamp=entry.ts)] if current.status == "doing" else []
            ops.append(AddEdge(src=current.id, dst=node.id, label="again"))
        if node.status != "doing":
            ops.append(SetStatus(id=node.id, status="doing", timestamp=entry.ts))
        target = node.id
        ops += [
            AssignToolCalls(id=target, tool_call_ids=ids),
            UpdateNode(
                id=target,
                action=merge_action(node.action, desc),
                summary=merge_summary(notes, node.summary),
                timestamp=entry.ts,
            ),
        ]
    else:
        target = _next_id(canvas)
        if current is not None and current.status == "doing":
            ops.append(SetStatus(id=current.id, status="done", timestamp=entry.ts))
        ops.append(
            AddNode(
                id=target,
                stage=stage,
                action=desc,
                status="doing",
                summary=merge_summary(notes, ""),
                timestamp=entry.ts,
                tool_call_ids=ids,
                after=current.id if current else None,
            )
        )
    if tombstone is not None:
        ops.append(AddEdge(src=tombstone.id, dst=target, label="retry"))
    skip = {target, *([current.id] if current else [])}
    if (source := _user_of(canvas, call, stage, skip)) is not None:
        ops.append(AddEdge(src=source, dst=target, label="uses"))
    return ops


def heuristic_canvas(canvas: Canvas, batch: Sequence[OffloadEntry], now: datetime) -> Canvas:
    """``canvas`` with the calls of ``batch`` folded in, one call at a time: each call's operations are planned on
    the canvas the calls before it left, and applied as one all-or-nothing step (a batch of 30 calls needs more
    operations than one model reply may hold, and the model's bound is for the model)."""
    for entry in batch:
        canvas = apply_ops(canvas, call_ops(canvas, entry), now)
    return canvas


def tombstone_failures(canvas: Canvas, batch: Sequence[OffloadEntry]) -> list[CanvasOp]:
    """For a model's canvas: a failed call it left on a live node moves to a tombstone of its own after that node,
    so every failure is ``blocked`` whichever engine drew the canvas."""
    ops: list[CanvasOp] = []
    for entry in batch:
        node = canvas.node_for_tool_call(entry.tool_call_id)
        if entry.error and node is not None and node.status != "blocked":
            ops.append(_tombstone(_next_id(canvas, len(ops)), node.stage, entry, node.id))
    return ops
