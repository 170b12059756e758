"""Prompt for L1 tool-result summaries (docs/tdam-spec.md §5.3): a batch of tool calls in, one summary and score per
call out.

Pure: ``context -> list[ChatMessage]``. The reply model bounds every list and string so a small model cannot loop.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.offload.messages import ToolPair
from mnemoflow.ports.llm import ChatMessage

VERSION = "offload_summary/2"
PARAMS_CHARS, RESULT_CHARS, INTENT_CHARS = 500, 2000, 500
SUMMARY_CHARS = 240
"""The prompt asks for 200 characters; the grammar closes the string a little later. Version 1 allowed 400, and the
Qwen2.5 0.5B wrote summaries that long, so a batch ran past its token budget into invalid JSON."""
ITEM_TOKENS = 320
"""Completion tokens a reply item may need at most: its id (128 characters), the summary at its bound (a token a
character in Chinese) and the JSON around them. ``max_tokens`` of a call is this per item, so only a reply the
grammar would not end is cut."""


class ItemSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_call_id: str = Field(max_length=128)
    summary: str = Field(
        max_length=SUMMARY_CHARS, description="Key findings, changes or errors; what it means for the task."
    )
    score: int = Field(ge=0, le=10, description="How well the summary can replace the raw output (10 = fully).")


class SummaryReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ItemSummary] = Field(max_length=20)


SYSTEM = (
    "You summarise tool results for a coding agent so they can be removed from its context. For each tool call "
    "write one summary (at most 200 characters) of the key findings, changes, values and errors, in the light of "
    "the user's latest request, and a score 0-10 for how well the summary can replace the raw output (10: nothing "
    "needed is lost; 0: the raw output must be re-read). Echo each tool_call_id exactly. Reply with JSON only."
)


def build(pairs: list[ToolPair], user_intent: str = "") -> list[ChatMessage]:
    """Messages for one batch of tool pairs; long parameters and results are cut (the raw stays in refs)."""
    parts = [f"Latest user request: {user_intent[:INTENT_CHARS]}" if user_intent else "Latest user request: (none)"]
    for i, p in enumerate(pairs, 1):
        parts.append(
            f"--- Tool call {i} ---\ntool_call_id: {p.tool_call_id}\nTool: {p.tool_name}\n"
            f"Params: {p.arguments[:PARAMS_CHARS]}\nResult: {p.result[:RESULT_CHARS]}"
        )
    parts.append(f"Return {len(pairs)} items, one per tool_call_id.")
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content="\n\n".join(parts))]
