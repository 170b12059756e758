"""L2 scene consolidation prompt (docs/tdam-spec.md §3.5, rewritten for structured output instead of file tools).

Pure: :func:`build_scene_messages` turns a :class:`SceneContext` into chat messages; the reply model is
:class:`SceneReply`. The model sees every scene's index entry and the full text of the scenes it may edit
(``editable``): an update or merge must name one of those, so a scene is never rewritten from its summary.
Version 2 tells the model to create when there are no scenes yet (small models replied with no edit); version 3
requires at least one edit in the reply's schema, so the grammar-constrained decoder cannot stop at an empty list
(Qwen2.5 0.5B still replied ``"edits": []`` to version 2, twice a pass, and the heuristic did those passes), and
shows the editable scenes without their META block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from pydantic import Field

from mnemoflow.llm.looping import NotLooping
from mnemoflow.memory.scenes.model import MAX_SCENE_CHARS, SceneBlock, SceneInput, format_ts, render_for_prompt
from mnemoflow.memory.scenes.plan import SceneEdit, ScenePlan
from mnemoflow.ports.llm import ChatMessage

VERSION = "scenes-v3"
MAX_REPLY_EDITS = 4


class ModelSceneEdit(SceneEdit):
    """An edit as the model writes it: no atom-id links, so the body's schema bound is what a reader sees (the
    structured-output grammar stops the model there instead of letting it write a body validation then rejects)."""

    body: NotLooping = Field("", max_length=MAX_SCENE_CHARS)


class SceneReply(ScenePlan):
    """The model's reply: a :class:`ScenePlan` with one to four edits. At most four keeps one reply short; at least
    one, because a pass only asks the model when there are new memories, and a plan that reflects none of them is
    refused (:class:`~mnemoflow.memory.scenes.llm.LLMSceneEngine`)."""

    edits: list[ModelSceneEdit] = Field(min_length=1, max_length=MAX_REPLY_EDITS)  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class SceneContext:
    atoms: list[SceneInput]
    scenes: dict[str, SceneBlock]
    editable: list[str]
    now: datetime
    max_scenes: int
    max_creates: int
    language: str = "the language of the memories"
    feedback: str | None = None


SYSTEM = f"""You are a memory consolidation architect. You maintain a small set of scene blocks: each scene is an
evolving narrative about one area of the user's life or work, fused from atomic memories. Rewrite scenes as
a whole; never append raw lists of memories.

Reply with one JSON object: {{"edits": [...], "persona_update_reason": null or "why"}}. Each edit is
{{"action", "filename", "sources", "summary", "body", "atom_ids"}}:
- "update": filename = an editable scene; body = its complete new text (not a diff). The default choice.
- "merge": sources = 2-4 editable scenes on the same topic or narrative arc; filename = one of them (kept)
  or a new name; body = the fused text. Merge when at or near the scene limit.
- "create": only when no scene fits, at most {{max_creates}} per reply; filename = short hyphen-joined words.
- "delete": filename = a scene that is obsolete; summary, body empty.
atom_ids: the ids of the new memories the scene now reflects (only ids from the list given).
The engine computes heat, dates and file names; do not write a META header. Body at most {MAX_SCENE_CHARS}
characters, Markdown, with these sections when there is evidence for them:
## basic info (key: value bullets) / ## core traits (<=100 chars) / ## preferences / ## implicit signals /
## core narrative (<=400 chars prose, trigger -> action -> result) / ## evolution (dated bullets citing memory
ids) / ## pending/contradictions.
summary: 30-40 words that say what the scene is about, for the scene index.
Set persona_update_reason when these memories change who the user is (identity, values, a big life event)."""


def _capacity_hint(n: int, max_scenes: int, max_creates: int) -> str:
    if n == 0:
        return f"No scenes yet: create 1-{max_creates} scenes that together reflect every new memory."
    if n >= max_scenes:
        return f"The user is AT the limit ({n}/{max_scenes}): you must merge 2-4 similar scenes before any create."
    if n == max_scenes - 1:
        return f"One slot left ({n}/{max_scenes}): update or merge only; do not create."
    if n >= max_scenes - 3:
        return f"Near the limit ({n}/{max_scenes}): prefer update or a proactive merge."
    return f"Scenes: {n}/{max_scenes}."


def build_scene_messages(ctx: SceneContext) -> list[ChatMessage]:
    memories = [
        {"id": a.id, "type": a.type, "priority": a.priority, "content": a.content, "time": format_ts(a.ts)}
        for a in ctx.atoms
    ]
    index = (
        "\n".join(
            f"### {b.filename}\nheat {b.heat} | updated {format_ts(b.updated) if b.updated else '?'}\n{b.summary}"
            for b in sorted(ctx.scenes.values(), key=lambda b: (-b.heat, b.filename))
        )
        or "(no scenes yet)"
    )
    editable = "\n\n".join(
        f"#### {name}\n```markdown\n{render_for_prompt(ctx.scenes[name])}```" for name in ctx.editable
    )
    parts = [
        f"Write scene text in {ctx.language}. Current time: {format_ts(ctx.now)}.",
        _capacity_hint(len(ctx.scenes), ctx.max_scenes, ctx.max_creates),
        "## New memories\n" + json.dumps(memories, ensure_ascii=False, indent=0),
        "## Scene index\n" + index,
        "## Editable scenes (full text)\n" + (editable or "(none)"),
    ]
    if ctx.feedback:
        parts.append("## Your previous reply was refused\n" + ctx.feedback + "\nFix these problems.")
    return [
        ChatMessage(role="system", content=SYSTEM.replace("{max_creates}", str(ctx.max_creates))),
        ChatMessage(role="user", content="\n\n".join(parts)),
    ]
