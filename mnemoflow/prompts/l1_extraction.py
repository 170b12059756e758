"""L1 extraction prompt (spec §3.3): scene segmentation and typed memories from the new messages of a window.

Pure: context in, chat messages out, plus the pydantic model the reply must validate against. Lists are bounded
(the LLM port refuses unbounded lists). The reply carries message ids; the pipeline keeps only ids of the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.ports.llm import ChatMessage

VERSION = "l1-extraction/1"
MAX_MEMORIES = 20


class MemoryOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=1000)
    type: Literal["persona", "episodic", "instruction"]
    priority: int = Field(ge=-1, le=100)
    source_message_ids: list[str] = Field(min_length=1, max_length=10)
    activity_start: str | None = Field(None, description="ISO 8601 with offset, when determinable")
    activity_end: str | None = None


class SceneOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scene_name: str = Field(max_length=120)
    memories: list[MemoryOut] = Field(max_length=MAX_MEMORIES)


class ExtractionOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scenes: list[SceneOut] = Field(max_length=6)


@dataclass(frozen=True, slots=True)
class PromptMessage:
    id: str
    role: str
    ts: datetime
    content: str


@dataclass(frozen=True, slots=True)
class ExtractionContext:
    user: str
    previous_scene: str
    background: list[PromptMessage]
    new: list[PromptMessage]


SYSTEM = (
    "You segment a conversation into scenes and extract long-term memories about the user.\n"
    "Only three memory types exist:\n"
    "- persona: stable attributes, preferences, skills, values, habits (priority 80-100 health, taboos, core "
    "traits; 50-70 general; below 50: do not extract).\n"
    "- episodic: objective actions, decisions, plans and results, with absolute times computed from message "
    "timestamps (80-100 important, 60-70 ordinary; below 60: do not extract). Put activity_start/activity_end "
    "when determinable.\n"
    "- instruction: lasting rules for the assistant about format, tone or behaviour (-1 absolute global rule, "
    "90-100 core, 70-80 important; temporary requests: do not extract).\n"
    "Rules: extract only from NEW messages; BACKGROUND is context. Prefer omission over noise: skip greetings, "
    "chit-chat, one-off requests, the assistant's own behaviour and pure emotions. Each memory must stand alone, "
    "naming the user as subject. Merge causally linked messages into one memory. Cite the ids of the messages "
    f"each memory comes from in source_message_ids. At most {MAX_MEMORIES} memories in total.\n"
    "Scenes: keep the previous scene unless the user clearly switches topic or goal; a scene name is one sentence "
    "of 30-50 characters describing the activity.\n"
    "Write memory text in the user's language; keep JSON keys and enum values in English."
)


def _render(m: PromptMessage) -> str:
    return f"[{m.id}] [{m.role}] [{m.ts.isoformat()}]: {m.content}"


def build_messages(ctx: ExtractionContext) -> list[ChatMessage]:
    """System rules, then the previous scene, background and new messages in the spec's line format (UTC)."""
    background = "\n\n".join(_render(m) for m in ctx.background) or "(none)"
    new = "\n\n".join(_render(m) for m in ctx.new)
    user = (f"All timestamps are UTC. User: {ctx.user}\nPrevious scene: {ctx.previous_scene or 'none'}\n\n"
            f"BACKGROUND (context only):\n{background}\n\n----- NEW MESSAGES -----\n{new}")
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]
