"""Canvas operations a model proposes as validated JSON, and the pure function that applies them.

The model never writes Mermaid. It returns :class:`CanvasOps` (structured output, at most 30 operations per
batch, matching the 30-entry L2 batches); :func:`apply_ops` applies them all or none and returns a new canvas.
Nodes are never deleted: a failed path is marked ``blocked`` and stays as a tombstone, frozen, so the agent keeps
seeing what did not work.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mnemoflow.errors import InvalidInput
from mnemoflow.ids import SafeId
from mnemoflow.offload.canvas._text import to_utc
from mnemoflow.offload.canvas.model import (
    ActionText,
    Canvas,
    LabelText,
    NodeId,
    StageText,
    Status,
    SummaryText,
    UtcDatetime,
    node_number,
)

MAX_OPS = 30
_OP = ConfigDict(frozen=True, extra="forbid")


class AddNode(BaseModel):
    """Add a step. Omit ``id`` to get the next ``NNN-Nk``; ``after`` also adds the edge ``after -> new`` (none when it
    names the new node itself)."""

    model_config = _OP
    op: Literal["add_node"] = "add_node"
    id: NodeId | None = None
    stage: StageText
    action: ActionText
    status: Status = "doing"
    summary: SummaryText = ""
    timestamp: UtcDatetime | None = None
    tool_call_ids: tuple[SafeId, ...] = ()
    after: NodeId | None = None


class UpdateNode(BaseModel):
    """Rewrite the text of a step (fields left out stay); the timestamp becomes the newest seen."""

    model_config = _OP
    op: Literal["update_node"] = "update_node"
    id: NodeId
    stage: StageText | None = None
    action: ActionText | None = None
    summary: SummaryText | None = None
    timestamp: UtcDatetime | None = None


class AddEdge(BaseModel):
    """Connect two existing steps. Adding an edge that already exists is a no-op."""

    model_config = _OP
    op: Literal["add_edge"] = "add_edge"
    src: NodeId
    dst: NodeId
    label: LabelText | None = None


class SetStatus(BaseModel):
    """Move a step to another status. ``blocked`` is final: the node becomes a tombstone."""

    model_config = _OP
    op: Literal["set_status"] = "set_status"
    id: NodeId
    status: Status
    timestamp: UtcDatetime | None = None


class AssignToolCalls(BaseModel):
    """Attach tool calls to a step; a call already on another live step moves here (node:tool is 1:N)."""

    model_config = _OP
    op: Literal["assign_tool_calls"] = "assign_tool_calls"
    id: NodeId
    tool_call_ids: tuple[SafeId, ...] = Field(min_length=1)


CanvasOp = Annotated[AddNode | UpdateNode | AddEdge | SetStatus | AssignToolCalls, Field(discriminator="op")]


class CanvasOps(BaseModel):
    """The model's whole answer for one batch of offload entries."""

    model_config = ConfigDict(extra="forbid")
    ops: list[CanvasOp] = Field(default_factory=list, max_length=MAX_OPS)


class _Draft:
    """Mutable working copy used inside :func:`apply_ops` only."""

    def __init__(self, canvas: Canvas, now: datetime) -> None:
        self.canvas, self.now = canvas, now
        self.nodes: dict[str, dict[str, Any]] = {n.id: n.model_dump() for n in canvas.nodes}
        self.edges: list[dict[str, Any]] = [e.model_dump() for e in canvas.edges]

    def qualify(self, node_id: str) -> str:
        """Accept ``N4`` for ``001-N4``: models often drop the canvas prefix."""
        prefix = self.canvas.prefix
        return f"{prefix}-{node_id}" if prefix and not node_id.startswith(prefix + "-") else node_id

    def get(self, node_id: str, *, writable: bool = True) -> dict[str, Any]:
        node = self.nodes.get(self.qualify(node_id))
        if node is None:
            raise ValueError(f"unknown node {node_id!r}")
        if writable and node["status"] == "blocked":
            raise ValueError(f"node {node['id']!r} is blocked: tombstones of failed paths are frozen")
        return node

    def next_id(self) -> str:
        number = max((node_number(i) for i in self.nodes), default=0) + 1
        return self.qualify(f"N{number}")

    def stamp(self, node: dict[str, Any], when: datetime | None) -> None:
        node["timestamp"] = max(node["timestamp"], when or self.now)

    def take_calls(self, calls: Sequence[str], node: dict[str, Any]) -> None:
        for other in self.nodes.values():
            moving = [c for c in calls if c in other["tool_call_ids"]]
            if other is node or not moving:
                continue
            if other["status"] == "blocked":
                raise ValueError(f"tool calls {moving} belong to tombstone {other['id']!r} and cannot move")
            other["tool_call_ids"] = tuple(c for c in other["tool_call_ids"] if c not in moving)
        node["tool_call_ids"] = tuple(dict.fromkeys([*node["tool_call_ids"], *calls]))

    def add_edge(self, src: str, dst: str, label: str | None) -> None:
        src, dst = self.get(src, writable=False)["id"], self.get(dst, writable=False)["id"]
        if src == dst:
            raise ValueError(f"an edge from {src!r} to itself")
        if not any(e["src"] == src and e["dst"] == dst for e in self.edges):
            self.edges.append({"src": src, "dst": dst, "label": label})

    def apply(self, op: CanvasOp) -> None:
        if isinstance(op, AddNode):
            node_id = self.qualify(op.id) if op.id else self.next_id()
            if node_id in self.nodes:
                raise ValueError(f"node {node_id!r} already exists")
            fields = op.model_dump(include={"stage", "action", "status", "summary"})
            node = {"id": node_id, **fields, "timestamp": op.timestamp or self.now, "tool_call_ids": ()}
            self.nodes[node_id] = node
            self.take_calls(op.tool_call_ids, node)
            if op.after and self.qualify(op.after) != node_id:  # "after itself" (Qwen2.5 0.5B wrote it): no edge
                self.add_edge(op.after, node_id, None)
        elif isinstance(op, UpdateNode):
            node = self.get(op.id)
            node.update(op.model_dump(include={"stage", "action", "summary"}, exclude_none=True))
            self.stamp(node, op.timestamp)
        elif isinstance(op, SetStatus):
            node = self.get(op.id, writable=op.status != "blocked")
            if node["status"] != op.status:
                node["status"] = op.status
                self.stamp(node, op.timestamp)
        elif isinstance(op, AssignToolCalls):
            self.take_calls(op.tool_call_ids, self.get(op.id))
        else:
            self.add_edge(op.src, op.dst, op.label)

    def build(self) -> Canvas:
        newest = max([self.canvas.updated, self.now, *(n["timestamp"] for n in self.nodes.values())])
        data = self.canvas.model_dump(exclude={"nodes", "edges", "updated"})
        return Canvas.model_validate(
            {**data, "updated": newest, "nodes": list(self.nodes.values()), "edges": self.edges}
        )


def apply_ops(canvas: Canvas, ops: CanvasOps | Sequence[CanvasOp], now: datetime) -> Canvas:
    """Apply ``ops`` in order to a copy of ``canvas``; all or nothing.

    Raises :class:`~mnemoflow.errors.InvalidInput` naming the first offending operation (by index) when an op
    references an unknown node, re-adds an id, edits a tombstone, or the result would break an invariant.
    """
    batch = ops.ops if isinstance(ops, CanvasOps) else list(ops)
    if len(batch) > MAX_OPS:
        raise InvalidInput(f"{len(batch)} canvas operations in one batch; at most {MAX_OPS}")
    try:
        draft = _Draft(canvas, to_utc(now))
    except ValueError as exc:
        raise InvalidInput(f"now: {exc}") from None
    for index, op in enumerate(batch):
        try:
            draft.apply(op)
        except ValueError as exc:
            raise InvalidInput(f"canvas op {index} ({op.op}): {exc}") from None
    try:
        return draft.build()
    except ValidationError as exc:
        raise InvalidInput(f"canvas ops would break the canvas: {exc}") from None
