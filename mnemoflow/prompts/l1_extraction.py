"""L1 extraction prompt (docs/tdam-spec.md §3.3): scene segmentation and typed memories from the new messages of a
window.

Pure: context in, chat messages out, plus the pydantic model the reply must validate against. Lists are bounded
(the LLM port refuses unbounded lists). The reply carries message ids; the pipeline keeps only ids of the window.

Version 2 folds the dedup decision (docs/tdam-spec.md §3.4) into this call: the prompt lists the user's existing
memories closest to the window (ids and text) and each extracted memory may carry ``decision`` (store / update / merge /
skip) with ``target_ids`` and merged fields, as the dedup judge would answer. The pipeline validates them against
the listed memories exactly as it validates the judge's; a memory without a decision is left to the judge.

Version 3 shows short labels instead of ids: ``#1``, ``#2`` … for the new messages and ``#E1`` … for the existing
memories, and :func:`resolve_ids` maps a reply's labels back. Why: ids are long (a client's UUIDs, ``a_`` + 24 hex
digits) and a small model cites them letter by letter; the Qwen2.5 0.5B cited all ten ids of a window on every
memory, about 150 tokens a memory at 10 tokens/s on 2 cores, most of an extraction call. A label has no ``#`` in
common with an id (ids cannot hold ``#``), so a reply that still quotes a real id resolves to itself. Background
messages get no label: they are not to be cited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.memory.l1.models import Action
from mnemoflow.ports.llm import ChatMessage

VERSION = "l1-extraction/3"
MAX_MEMORIES = 20
MAX_TARGETS = 5
MAX_MEMORY_CHARS = 300
"""One fact is a sentence. The grammar closes a string at this bound, which is what stops a small model that
loops inside one (Qwen2.5 0.5B ran a memory to the max_tokens limit, an invalid reply)."""


class MemoryOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)
    type: Literal["persona", "episodic", "instruction"]
    priority: int = Field(ge=-1, le=100)
    source_message_ids: list[str] = Field(min_length=1, max_length=10)
    activity_start: str | None = Field(None, description="ISO 8601 with offset, when determinable")
    activity_end: str | None = None
    decision: Action | None = Field(None, description="against EXISTING memories; omit when unsure")
    target_ids: list[str] = Field(default_factory=list, max_length=MAX_TARGETS)
    merged_content: str | None = Field(None, max_length=MAX_MEMORY_CHARS)
    merged_type: Literal["persona", "episodic", "instruction"] | None = None
    merged_priority: int | None = Field(None, ge=-1, le=100)


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
class ExistingMemory:
    """One of the user's stored atoms shown to the model, so that it can decide dedup in the same call."""

    id: str
    type: str
    content: str


@dataclass(frozen=True, slots=True)
class ExtractionContext:
    user: str
    previous_scene: str
    background: list[PromptMessage]
    new: list[PromptMessage]
    existing: list[ExistingMemory] = field(default_factory=list)


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
    "naming the user as subject. Merge causally linked messages into one memory. In source_message_ids cite the "
    "labels (#1, #2, ...) of the NEW messages each memory comes from: only those that state it, usually one. "
    f"At most {MAX_MEMORIES} memories in total.\n"
    "Scenes: keep the previous scene unless the user clearly switches topic or goal; a scene name is one sentence "
    "of 30-50 characters describing the activity.\n"
    "Write memory text in the user's language; keep JSON keys and enum values in English.\n"
    "Dedup: EXISTING lists stored memories of this user (label, type, text). Give every memory a decision against "
    "them: store = genuinely new; skip = an existing memory already says this or says it better; update = same "
    "fact or event and the new one is more specific, newer or corrects it; merge = complementary information "
    "about the same fact or event. For update and merge, target_ids are the labels (#E1, ...) of the EXISTING "
    f"memories it replaces (at most {MAX_TARGETS}, only labels listed in EXISTING), and merged_content is one "
    "memory keeping the still valid old details, with merged_type and merged_priority. Repeated preference -> "
    "merge; explicit change -> update; identical -> skip. Leave decision empty only when you cannot tell."
)


def message_label(i: int) -> str:
    """The label of the ``i``-th new message (0-based)."""
    return f"#{i + 1}"


def existing_label(i: int) -> str:
    """The label of the ``i``-th existing memory (0-based)."""
    return f"#E{i + 1}"


def _render(m: PromptMessage, label: str | None) -> str:
    head = f"[{label}] " if label else ""
    return f"{head}[{m.role}] [{m.ts.isoformat()}]: {m.content}"


def build_messages(ctx: ExtractionContext) -> list[ChatMessage]:
    """System rules, then existing memories, previous scene, background and new messages (spec line format, UTC)."""
    existing = (
        "\n".join(f"[{existing_label(i)}] ({e.type}) {e.content}" for i, e in enumerate(ctx.existing))
        or "(none: every memory is store)"
    )
    background = "\n\n".join(_render(m, None) for m in ctx.background) or "(none)"
    new = "\n\n".join(_render(m, message_label(i)) for i, m in enumerate(ctx.new))
    user = (
        f"All timestamps are UTC. User: {ctx.user}\nPrevious scene: {ctx.previous_scene or 'none'}\n\n"
        f"EXISTING memories (for decisions only):\n{existing}\n\n"
        f"BACKGROUND (context only):\n{background}\n\n----- NEW MESSAGES -----\n{new}"
    )
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]


def resolve_ids(reply: ExtractionOut, ctx: ExtractionContext) -> ExtractionOut:
    """The reply with each label replaced by the id it stands for; anything else is kept as written (the pipeline
    drops ids outside the window and targets outside EXISTING, as it always did)."""
    labels = {message_label(i): m.id for i, m in enumerate(ctx.new)}
    labels |= {existing_label(i): e.id for i, e in enumerate(ctx.existing)}

    def ids(values: list[str]) -> list[str]:
        return list(dict.fromkeys(labels.get(v.strip(), v) for v in values))

    scenes = [
        scene.model_copy(
            update={
                "memories": [
                    mem.model_copy(
                        update={"source_message_ids": ids(mem.source_message_ids), "target_ids": ids(mem.target_ids)}
                    )
                    for mem in scene.memories
                ]
            }
        )
        for scene in reply.scenes
    ]
    return reply.model_copy(update={"scenes": scenes})
