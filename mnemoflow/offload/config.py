"""Offload settings as one value object (docs/tdam-spec.md §5.10), parsed at the edge and passed into the core.

Every ratio TDAM hard-coded or left dead (docs/tdam-spec.md §9.16) is a field here. Defaults match the spec's behaviour.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class OffloadConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mild_ratio: float = Field(0.5, gt=0, le=1, description="Replace old tool results by summaries above this.")
    aggressive_ratio: float = Field(0.85, gt=0, le=1, description="Drop the oldest messages above this.")
    aggressive_target_ratio: float = Field(0.6, gt=0, le=1, description="Aggressive drops down to this.")
    emergency_ratio: float = Field(0.95, gt=0, le=1, description="Emergency above this (or over the window).")
    emergency_target_ratio: float = Field(0.6, gt=0, le=1, description="Emergency drops down to this.")
    history_canvas_ratio: float = Field(0.2, ge=0, le=1, description="Budget for history canvases after a drop.")
    mild_scan_ratio: float = Field(0.7, gt=0, le=1, description="Mild only touches the oldest 70 % of messages.")
    mild_min_replacements: int = Field(
        10, ge=1, description="Score cascade 7→0 stops after this many (and below mild)."
    )
    injector_tail: int = Field(30, ge=1, description="The active canvas goes at most this many messages from the end.")
    fold_finished_tasks: bool = Field(
        True, description="When L1.5 starts a new long task, drop the finished task's messages (its canvas stays)."
    )
    inject_active: Literal["always", "after_reclaim"] = Field(
        "after_reclaim", description="Inject the active canvas always (spec) or once messages left the prompt."
    )
    stub_keep_recent: int | None = Field(
        2,
        ge=0,
        description="Age rule: tool results older than the last N are replaced by their summary stubs, in batches "
        "(None = spec ladder only). Like observation masking, but the stub keeps the summary and the ref.",
    )
    stub_batch: int = Field(
        8, ge=1, description="The age rule waits until this many results are due, then stubs them all at once."
    )
    stub_batch_tokens: int | None = Field(
        2000, ge=1, description="...or as soon as the due rewrites would save this many tokens (None: count only)."
    )
    compact_stubbed_calls: bool = Field(
        True,
        description="docs/tdam-spec.md §5.7: an assistant call whose results are all stubbed gets compact arguments.",
    )
    freeze_injection: bool = Field(
        True,
        description="Re-send the injected canvases byte-identical at the same place until reclaim changes the "
        "prompt; then refresh them after the changed region (keeps the cached prefix).",
    )
    active_canvas_ratio: float | None = Field(
        0.1,
        gt=0,
        le=1,
        description="Above this share of the window, the active canvas is injected as its node index (meta-only).",
    )
    history_canvas_full: bool = Field(
        False,
        description="Inject a finished task's full canvas when it fits the history budget (spec); False = its "
        "node index only (meta-only), the summaries stay one drill-down away.",
    )
    summary_min_tokens: int = Field(200, ge=0, description="Tool results below this need no summary (kept raw).")
    summary_max_chars: int = Field(
        400, ge=80, le=2000, description="Bound on a summary's text (the call, why it failed, the output's lines)."
    )
    summary_ids_chars: int = Field(
        600,
        ge=0,
        le=2000,
        description="Room beside it for the identifiers the output introduced (paths, symbols, tests, errors).",
    )
    summary_batch: int = Field(5, ge=1, le=20, description="Tool results per summarisation LLM call.")
    canvas_batch: int = Field(30, ge=1, le=30, description="Entries per canvas update (one LLM call).")
    refine_max_entries: int = Field(
        60,
        ge=1,
        description="Most entries the model catches up on per stage in one background pass; a session further behind "
        "keeps the heuristic's summaries and canvas for the older ones (counted as skipped).",
    )

    @classmethod
    def spec(cls, **overrides: object) -> OffloadConfig:
        """TDAM's behaviour (docs/tdam-spec.md §5.6-5.7): the ladder only, canvases refreshed and moved every call."""
        base: dict[str, object] = {
            "stub_keep_recent": None,
            "freeze_injection": False,
            "inject_active": "always",
            "fold_finished_tasks": False,
            "history_canvas_full": True,
            "compact_stubbed_calls": True,
            "active_canvas_ratio": None,
        }
        return cls.model_validate({**base, **overrides})

    @model_validator(mode="after")
    def _ordered(self) -> OffloadConfig:
        if not self.mild_ratio <= self.aggressive_ratio <= self.emergency_ratio:
            raise ValueError("need mild_ratio <= aggressive_ratio <= emergency_ratio")
        if self.emergency_target_ratio >= self.emergency_ratio or self.aggressive_target_ratio >= self.aggressive_ratio:
            raise ValueError("drop targets must be below their trigger ratios")
        return self
