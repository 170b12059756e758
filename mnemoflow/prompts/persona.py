"""L3 persona prompt (docs/tdam-spec.md §3.6): four-layer scan over the changed scenes, body only, ≤ 2,000 characters.

Pure: :func:`build_persona_messages` turns a :class:`~mnemoflow.memory.persona.generate.PersonaContext` into chat
messages; the reply model is :class:`PersonaReply`. The engine, not the model, appends the scene navigation.
Version 2 shows each scene without its META block (Qwen2.5 0.5B copied it into the persona). Version 3 refuses a
persona that copies the prompt (its ``## Scenes`` section, the fenced scenes, the focus note), which the 0.5B still
did: the repair try is told why, then the heuristic writes the persona.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mnemoflow.llm.looping import NotLooping
from mnemoflow.memory.persona.generate import MAX_PERSONA_CHARS, PersonaContext
from mnemoflow.memory.scenes.model import format_ts, render_for_prompt
from mnemoflow.ports.llm import ChatMessage

VERSION = "persona-v3"


FOCUS_NOTES = ("Focus on these changed scenes.", "No scene changed; review all.")


def _not_the_prompt(text: str) -> str:
    """Refuse the prompt's own furniture in the persona: fenced blocks, the scenes section, the focus note."""
    if "```" in text:
        raise ValueError("the persona is plain Markdown: no code fences; do not copy the scenes, describe the user")
    if any(line.strip() in {"## Scenes", *FOCUS_NOTES} for line in text.splitlines()):
        raise ValueError("the persona copies the prompt's scene section: describe the user in your own words")
    return text


class PersonaReply(BaseModel):
    model_config = ConfigDict(extra="forbid")

    persona: Annotated[NotLooping, AfterValidator(_not_the_prompt)] = Field(min_length=1, max_length=MAX_PERSONA_CHARS)


SYSTEM = f"""You are a persona architect following an incremental evolution protocol. Write the user's persona as
Markdown, at most {MAX_PERSONA_CHARS} characters, using only the evidence in the scenes (never file paths or
system metadata; no speculation, least of all at a cold start). Connect and synthesise; no bullet spam.
Scan four layers: (1) base & facts: demographics, current state; (2) interest graph: where time, money and
attention go, active vs passive vs dormant; (3) interaction protocol: communication habits, landmines,
workflow preferences; (4) cognitive core: decision logic, contradictions, ultimate drivers.
Template: "# User Narrative Profile"; a one-line archetype quote; basic-info bullets; long-term preference
bullets; Chapter 1 Context & Current State (prose); Chapter 2 Texture of Life (prose); Chapter 3 Interaction &
Cognitive Protocol with 3.1 How to Speak and 3.2 How to Think (say why); Chapter 4 Deep Insights & Evolution
(contradictions, dated evolution, 3-7 trait tags with a short note each). No navigation section.
In incremental mode: reinforce, supplement, correct or restructure the current persona, or leave parts unchanged.
Reply with one JSON object: {{"persona": "<markdown>"}}."""


def build_persona_messages(ctx: PersonaContext, language: str = "the language of the scenes") -> list[ChatMessage]:
    focus = ctx.changed or ctx.scenes
    scenes = "\n\n".join(f"#### {b.filename}\n```markdown\n{render_for_prompt(b)}```" for b in focus)
    note = FOCUS_NOTES[0] if ctx.changed else FOCUS_NOTES[1]
    parts = [
        f"Write in {language}. Updated: {format_ts(ctx.now)}. Mode: {ctx.mode}. Trigger: {ctx.reason}.",
        f"Stats: {ctx.total_memories} memories, {len(ctx.scenes)} scenes, {len(ctx.changed)} changed.",
        f"## Scenes\n{note}\n\n{scenes}",
    ]
    if ctx.current:
        parts.append(
            f"## Current persona ({len(ctx.current)} of {MAX_PERSONA_CHARS} characters)\n"
            f"```markdown\n{ctx.current}\n```"
        )
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content="\n\n".join(parts))]
