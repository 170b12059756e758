"""Prompt for the L1.5 task-boundary judge (docs/tdam-spec.md §5.4): continue the active task, start a long task, or a
short one.

Pure: ``context -> list[ChatMessage]``. The reply is a closed choice plus a label, validated by pydantic, so a
parse failure is an error to retry, never a silent "false, false, false" (docs/tdam-spec.md §9.13).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mnemoflow.ports.llm import ChatMessage

VERSION = "offload_boundary/1"


def _kebab(label: str | None) -> str | None:
    """The label in kebab-case (``Fix Parser`` -> ``fix-parser``); None when nothing is left (a Chinese label: the
    judge then derives one from the goal). Normalised, not refused: the 30-character bound is the grammar's, and a
    pattern in the schema would lift it (llama.cpp's converter drops ``maxLength`` beside ``pattern``)."""
    if label is None:
        return None
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or None


class BoundaryReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: Literal["continue", "new_long", "short"] = Field(
        description="continue: same task as the active canvas; new_long: a new multi-step task; short: Q&A or chat."
    )
    label: Annotated[str | None, AfterValidator(_kebab)] = Field(
        None, max_length=30, description="kebab-case label for a new long task, else null."
    )
    goal: str | None = Field(None, max_length=200, description="One-line goal of a new long task.")


SYSTEM = (
    "You are the task lifecycle gatekeeper of a coding agent. Given recent messages, the latest user message and "
    "the active task canvas (if any), decide: 'continue' when the message keeps working on the active task (its "
    "sub-problems, debugging, follow-ups); 'new_long' when it asks for a new multi-step engineering task (give a "
    "kebab-case label of at most 30 characters and a one-line goal); 'short' for a one-off question or chat. With "
    "no active canvas, 'continue' is not allowed. Reply with JSON only."
)


def build(latest_user: str, history: list[str], active_canvas: str | None) -> list[ChatMessage]:
    hist = "\n".join(f"- {h[:400]}" for h in history[-5:]) or "(none)"
    canvas = active_canvas[:4000] if active_canvas else "(no active task)"
    user = (
        f"Recent messages (reference):\n{hist}\n\nActive task canvas:\n{canvas}\n\n"
        f"Latest user message:\n{latest_user[:2000]}"
    )
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]
