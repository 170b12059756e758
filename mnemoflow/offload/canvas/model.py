"""The canvas as a typed task graph: nodes (steps of a long task) and edges, with invariants checked on build.

A canvas is never free text from a model. Models propose operations (:mod:`.ops`); code applies them to this graph
and renders it (:mod:`.render`). Building a :class:`Canvas` is the one place the invariants are enforced: unique
node ids, edges between existing nodes, every tool_call_id on exactly one node, one status vocabulary.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from functools import partial
from typing import Annotated, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from mnemoflow.ids import SafeId
from mnemoflow.offload.canvas._text import clean, to_utc

Status = Literal["done", "doing", "paused", "blocked"]
CanvasEngine = Literal["heuristic", "llm"]
"""One vocabulary everywhere (TDAM mixed done/doing/paused/blocked with done/doing/todo)."""
STATUSES: tuple[Status, ...] = get_args(Status)

GOAL_MAX, STAGE_MAX, ACTION_MAX, SUMMARY_MAX, LABEL_MAX = 200, 40, 120, 200, 60

NODE_ID_PATTERN = r"(?:\d{3}-)?N[1-9][0-9]{0,5}"
"""``NNN-Nk`` as in TDAM (``NNN`` = canvas number) or bare ``Nk``. Never a Mermaid keyword such as ``end``."""
_NODE_ID_RE = re.compile(NODE_ID_PATTERN)


def _clip(limit: int, value: object) -> object:
    return clean(value, limit) if isinstance(value, str) else value


def _check_node_id(value: str) -> str:
    if not _NODE_ID_RE.fullmatch(value):
        raise ValueError(f"invalid node id {value[:40]!r}: expected 'N<k>' or 'NNN-N<k>' (e.g. '001-N3')")
    return value


def node_number(node_id: str) -> int:
    """The ``k`` of ``NNN-Nk``: node ids are numbered in creation order."""
    return int(node_id.rsplit("N", 1)[1])


NodeId = Annotated[str, AfterValidator(_check_node_id)]
UtcDatetime = Annotated[datetime, AfterValidator(to_utc)]
GoalText = Annotated[str, BeforeValidator(partial(_clip, GOAL_MAX))]
StageText = Annotated[str, BeforeValidator(partial(_clip, STAGE_MAX)), Field(min_length=1)]
ActionText = Annotated[str, BeforeValidator(partial(_clip, ACTION_MAX)), Field(min_length=1)]
SummaryText = Annotated[str, BeforeValidator(partial(_clip, SUMMARY_MAX))]
LabelText = Annotated[str, BeforeValidator(partial(_clip, LABEL_MAX)), Field(min_length=1)]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class CanvasNode(BaseModel):
    """One step of the task: ``stage: action``, its status, a one-line conclusion and the tool calls behind it."""

    model_config = _FROZEN

    id: NodeId
    stage: StageText
    action: ActionText
    status: Status
    summary: SummaryText = ""
    timestamp: UtcDatetime
    tool_call_ids: tuple[SafeId, ...] = ()


class CanvasEdge(BaseModel):
    """A transition between two steps, optionally labelled (``retry``, ``fails``)."""

    model_config = _FROZEN

    src: NodeId
    dst: NodeId
    label: LabelText | None = None


class Canvas(BaseModel):
    """The task graph of one long task. ``prefix`` (``NNN``) ties node ids to ``canvases/NNN-<label>.mmd``."""

    model_config = _FROZEN

    task_goal: GoalText
    created: UtcDatetime
    updated: UtcDatetime
    prefix: str | None = Field(default=None, pattern=r"^\d{3}$")
    drawn_by: tuple[CanvasEngine, ...] = ()
    """The engines that drew its nodes (the model, the heuristic, or both where the model fell back or the
    heuristic drew what the model had not refined yet), sorted; the header's ``drawnBy``."""
    nodes: tuple[CanvasNode, ...] = ()
    edges: tuple[CanvasEdge, ...] = ()

    @model_validator(mode="after")
    def _invariants(self) -> Canvas:
        problems = canvas_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def progress(self) -> int:
        """Percent of live steps that are done; ``blocked`` tombstones (failed paths) do not count."""
        live = [n for n in self.nodes if n.status != "blocked"]
        return round(100 * sum(n.status == "done" for n in live) / len(live)) if live else 0

    def node(self, node_id: str) -> CanvasNode | None:
        """The node with ``node_id``, or None."""
        return next((n for n in self.nodes if n.id == node_id), None)

    def node_for_tool_call(self, tool_call_id: str) -> CanvasNode | None:
        """The one node that holds ``tool_call_id`` (drill-down: node -> entries -> refs), or None."""
        return next((n for n in self.nodes if tool_call_id in n.tool_call_ids), None)


def canvas_problems(canvas: Canvas) -> list[str]:
    """Every broken invariant of ``canvas``, as readable sentences (empty if it is consistent)."""
    problems: list[str] = []
    ids = [n.id for n in canvas.nodes]
    if dupes := sorted(i for i, c in Counter(ids).items() if c > 1):
        problems.append(f"duplicate node ids: {', '.join(dupes)}")
    if canvas.prefix is not None and (foreign := [i for i in ids if not i.startswith(canvas.prefix + "-")]):
        problems.append(f"node ids without the canvas prefix {canvas.prefix}-: {', '.join(foreign)}")
    known = set(ids)
    for edge in canvas.edges:
        if missing := [e for e in (edge.src, edge.dst) if e not in known]:
            problems.append(f"edge {edge.src} -> {edge.dst} references unknown node(s): {', '.join(missing)}")
    pairs = Counter((e.src, e.dst) for e in canvas.edges)
    if dupe_edges := [f"{s} -> {d}" for (s, d), c in pairs.items() if c > 1]:
        problems.append(f"duplicate edges: {', '.join(dupe_edges)}")
    owners: dict[str, list[str]] = {}
    for node in canvas.nodes:
        for call in node.tool_call_ids:
            owners.setdefault(call, []).append(node.id)
    if shared := {c: o for c, o in owners.items() if len(o) > 1}:
        problems.append(
            "tool_call_ids on more than one node: "
            + ", ".join(f"{c} ({', '.join(o)})" for c, o in sorted(shared.items()))
        )
    if canvas.updated < canvas.created:
        problems.append("updated is before created")
    return problems
