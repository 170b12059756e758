"""Prompt for canvas updates (docs/tdam-spec.md §5.5): the model proposes typed canvas operations, never Mermaid text.

Pure: ``context -> list[ChatMessage]``; the reply model is :class:`mnemoflow.offload.canvas.CanvasOps` (at most 30
operations), applied and validated by code. Version 3: an empty canvas is answered with new nodes only
(:class:`FirstReply`). Version 4: at most one new node per tool call of the batch on an empty canvas (the 0.5B
added nodes until its 2,000 tokens ran out, twice, and the heuristic drew that canvas), and no two new nodes alike
(it then drew eight nodes "001: execute_bash" with one summary).
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from mnemoflow.offload.canvas import MAX_OPS, STATUSES, Canvas, CanvasOps
from mnemoflow.offload.canvas.model import NODE_ID_PATTERN
from mnemoflow.ports.llm import ChatMessage

VERSION = "offload_canvas/4"
_IDS: Any = Field(default_factory=list, max_length=30)  # one constraint shared by the id-list fields
# A Literal built from the canvas's own status tuple, so the reply schema cannot drift from the model; mypy cannot
# follow a Literal made from a variable, hence the ignore.
StatusName = Literal[STATUSES]  # type: ignore[valid-type]
_C = ConfigDict(extra="forbid")
_NODE = "^" + NODE_ID_PATTERN.replace("(?:", "(").replace(r"\d", "[0-9]") + "$"
"""A node id's shape in the schema itself, so a grammar-constrained model cannot write a tool call id there
(capturing, and ``[0-9]`` for ``\\d``: llama.cpp's converter knows no ``(?:`` and reads ``\\d`` as a letter)."""


class _AddNode(BaseModel):
    model_config = _C
    op: Literal["add_node"]
    id: str | None = Field(None, max_length=16, pattern=_NODE)
    stage: str = Field(max_length=40)
    action: str = Field(max_length=120)
    status: StatusName = "doing"
    summary: str = Field("", max_length=200)
    tool_call_ids: list[str] = _IDS
    after: str | None = Field(None, max_length=16, pattern=_NODE)


def _distinct_new_nodes(ops: list[Any]) -> None:
    """Refuse two new nodes with the same stage, action and summary: one step drawn twice says nothing."""
    seen: set[tuple[str, str, str]] = set()
    for op in ops:
        if isinstance(op, _AddNode):
            key = (op.stage.strip().lower(), op.action.strip().lower(), op.summary.strip().lower())
            if key in seen:
                raise ValueError(f"two new nodes are the same step ({op.stage}: {op.action}): add a node per step")
            seen.add(key)


class _UpdateNode(BaseModel):
    model_config = _C
    op: Literal["update_node"]
    id: str = Field(max_length=16, pattern=_NODE)
    stage: str | None = Field(None, max_length=40)
    action: str | None = Field(None, max_length=120)
    summary: str | None = Field(None, max_length=200)


class _AddEdge(BaseModel):
    model_config = _C
    op: Literal["add_edge"]
    src: str = Field(max_length=16, pattern=_NODE)
    dst: str = Field(max_length=16, pattern=_NODE)
    label: str | None = Field(None, max_length=60)


class _SetStatus(BaseModel):
    model_config = _C
    op: Literal["set_status"]
    id: str = Field(max_length=16, pattern=_NODE)
    status: StatusName


class _Assign(BaseModel):
    model_config = _C
    op: Literal["assign_tool_calls"]
    id: str = Field(max_length=16, pattern=_NODE)
    tool_call_ids: list[str] = Field(min_length=1, max_length=30)


class Reply(BaseModel):
    """What the model returns: the canvas operations with every list bounded (the LLM port refuses unbounded
    lists), converted by :func:`to_ops` into :class:`~mnemoflow.offload.canvas.CanvasOps` for ``apply_ops``."""

    model_config = _C
    ops: list[Annotated[_AddNode | _UpdateNode | _AddEdge | _SetStatus | _Assign, Field(discriminator="op")]] = Field(
        default_factory=list, max_length=MAX_OPS
    )

    @model_validator(mode="after")
    def _distinct(self) -> Reply:
        _distinct_new_nodes(self.ops)
        return self


class FirstReply(BaseModel):
    """The reply for a canvas with no node yet: new nodes only, at least one. Every other operation names a node
    that must exist, and Qwen2.5 0.5B updated and linked nodes it had never added on empty canvases
    (``bench/model_engine.py``, the real-stack test), so its grammar now cannot write them there."""

    model_config = _C
    ops: list[_AddNode] = Field(min_length=1, max_length=MAX_OPS)

    @model_validator(mode="after")
    def _distinct(self) -> FirstReply:
        _distinct_new_nodes(self.ops)
        return self


@cache
def _first_reply(max_ops: int) -> type[FirstReply]:
    return create_model(
        f"FirstReply{max_ops}", __base__=FirstReply, ops=(list[_AddNode], Field(min_length=1, max_length=max_ops))
    )


def reply_model(canvas: Canvas, calls: int = MAX_OPS) -> type[Reply] | type[FirstReply]:
    """The reply schema for ``canvas`` and a batch of ``calls`` tool calls: :class:`FirstReply` with at most one node
    a call while the canvas has no node, else :class:`Reply`."""
    if canvas.nodes:
        return Reply
    return _first_reply(max(1, min(calls, MAX_OPS)))


def to_ops(reply: Reply | FirstReply) -> CanvasOps:
    """The validated canvas operations (raises pydantic ValidationError on a bad id or value)."""
    return CanvasOps.model_validate(reply.model_dump(exclude_none=True))


SYSTEM = (
    "You maintain the task graph of a coding agent's long task. Given the current graph and new tool calls "
    "(id, tool, summary), reply with operations: add_node (stage, action, status done|doing|paused|blocked, "
    "summary <=150 chars of the conclusion, tool_call_ids, after=previous node), update_node, set_status, add_edge, "
    "assign_tool_calls. Merge consecutive calls with the same intent into one node; mark dead ends 'blocked' "
    "(they stay as tombstones): a call marked FAILED gets a blocked node of its own whose summary keeps the error "
    "line; keep file paths, symbols and test names in summaries; record only what happened. Every new "
    "tool_call_id must be assigned to exactly one node. Reply with JSON only."
)


def build(canvas_mermaid: str, label: str, entries: list[tuple[str, str, str]]) -> list[ChatMessage]:
    """``entries`` are ``(tool_call_id, tool_name + arguments, summary)`` triples of one batch (<= 30)."""
    lines = "\n".join(f"{i}. [{tid}] {call[:200]} -> {text[:300]}" for i, (tid, call, text) in enumerate(entries, 1))
    graph = canvas_mermaid or "(empty: create it)"
    user = f"Task label: {label}\n\nCurrent graph:\n{graph}\n\nNew tool calls:\n{lines}"
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]
