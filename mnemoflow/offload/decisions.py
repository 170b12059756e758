"""What compaction and the boundary judge decided, as data persisted in the session state.

Why persisted: TDAM kept boundaries and reclaim decisions in runtime arrays (docs/tdam-spec.md §9.10), so a restart lost
them and the prompt prefix changed. Here every decision is a field of
:class:`~mnemoflow.offload.session_state.SessionState` (``state.json``), re-applied on every compaction so the same
history yields the same prompt prefix (cached prefixes are ~10x cheaper at the model).
"""

from __future__ import annotations

from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

BoundaryKind = Literal["continue", "new_long", "short"]


class Boundary(BaseModel):
    """From offload entry ``start_seq`` on, tool calls belong to ``canvas`` (a long task) or to none (short)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    start_seq: int = Field(ge=0, description="First offload entry seq of the segment.")
    kind: Literal["long", "short"]
    canvas: str | None = Field(None, description="Canvas file name NNN-<label>.mmd for a long segment.")
    decision: BoundaryKind
    user_fingerprint: str = Field(description="Fingerprint of the user message that was judged.")
    source: Literal["heuristic", "llm", "fail_safe"] = "heuristic"
    """``fail_safe`` is only read: states written before the failed judge fell back to the heuristic."""
    at: AwareDatetime


class ReclaimDecisions(BaseModel):
    """Compaction decisions re-applied every turn: summary stubs, dropped tool calls, the head cut."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    replaced: dict[str, str] = Field(default_factory=dict, description="tool_call_id -> the exact stub text.")
    deleted: tuple[str, ...] = Field((), description="tool_call_ids whose call and results were dropped.")
    cut: str | None = Field(None, description="Fingerprint of the first message kept after the last head cut.")
    calls: dict[str, str] = Field(
        default_factory=dict, description="tool_call_id -> the exact compact arguments of a fully stubbed call."
    )
    injected: tuple[str, ...] = Field((), description="Exact texts of the canvas messages injected last time.")
    inject_at: int | None = Field(None, description="Index (in the compacted messages) where they were inserted.")
    inject_after: str | None = Field(None, description="Fingerprint of the message right before that index.")
    injected_canvas: str | None = Field(None, description="Name of the active canvas among ``injected``.")
