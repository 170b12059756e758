"""The model persona engine: one structured call through the LLM port (the reply is the body only).

A persona is the one layer a model writes from scratch over many memories, so it is where a small model invents
the most: from one Chinese greeting, Qwen2.5 1.5B wrote a 30-year-old software engineer earning $80,000
(``bench/model_engine.py``). The schema cannot catch that; a cheap part of it can be: every number of two or more
digits in the persona must appear in the scenes or the current persona it was written from, and the persona must
share a content word with them (the 0.5B answered a Chinese scene with "I'm sorry, but I can't assist
with that request."), else the heuristic engine writes this persona.
"""

from __future__ import annotations

import re

from mnemoflow.errors import MnemoflowError, StructuredOutputError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.memory.persona.generate import PersonaContext, PersonaDraft, PersonaEngine
from mnemoflow.memory.salience import content_words
from mnemoflow.memory.scenes.model import format_ts, render_scene
from mnemoflow.ports import LLM
from mnemoflow.prompts.persona import SYSTEM, PersonaReply, build_persona_messages

NUMBER = re.compile(r"\d(?:[\d,.:/-]*\d)?")
DATE_PARTS = re.compile(r"[./-]")
"""A year or a month of a date in the sources grounds that number alone; a time's parts do not (the 1.5B's invented
age of 30 was a substring of a scene's ``14:00:30``, which the first version of this check accepted)."""


class UngroundedPersona(MnemoflowError):
    """The model's persona states numbers that none of its sources holds (ages, incomes, dates it made up)."""


def ungrounded_numbers(persona: str, ctx: PersonaContext) -> list[str]:
    """Numbers of two or more digits in ``persona`` that no scene, the current persona, the time given or the
    prompt's own template (its chapters 3.1 and 3.2) holds as a number of its own."""
    given = [*(render_scene(b) for b in ctx.scenes), ctx.current, format_ts(ctx.now), SYSTEM]
    known = {n.replace(",", "") for n in NUMBER.findall("\n".join(given))}
    known |= {part for n in known for part in DATE_PARTS.split(n)}
    found = {n.replace(",", "") for n in NUMBER.findall(persona)}
    return sorted(n for n in found if sum(c.isdigit() for c in n) >= 2 and n not in known)


def shared_words(persona: str, ctx: PersonaContext) -> int:
    """Distinct content words (:func:`~mnemoflow.memory.salience.content_words`: no stop words) the persona shares
    with its scenes and the current persona."""
    given = set(content_words("\n".join([*(render_scene(b) for b in ctx.scenes), ctx.current])))
    return len(given & set(content_words(persona)))


def ungrounded(persona: str, ctx: PersonaContext) -> str | None:
    """Why the persona is not written from its sources, or None."""
    if invented := ungrounded_numbers(persona, ctx):
        return f"the persona states numbers no scene holds: {', '.join(invented[:5])}"
    if not shared_words(persona, ctx):
        return "the persona shares no content word with its scenes: it does not describe them"
    return None


class LLMPersonaEngine:
    """Implements :class:`~mnemoflow.memory.persona.generate.PersonaEngine` with any LLM engine; a reply still
    invalid after the repair try, or not written from its sources (:func:`ungrounded`), has ``fallback`` (the
    heuristic engine) write that persona."""

    name = "llm"
    every_n: int | None = None

    def __init__(
        self,
        llm: LLM,
        *,
        fallback: PersonaEngine | None = None,
        max_tokens: int = 1500,
        language: str | None = None,
    ) -> None:
        self.llm = llm
        self.fallback = fallback
        self.max_tokens = max_tokens
        self.language = language

    async def write(self, ctx: PersonaContext) -> PersonaDraft:
        messages = build_persona_messages(ctx, *([self.language] if self.language else []))
        try:
            reply = await self.llm.complete(messages, PersonaReply, max_tokens=self.max_tokens, stage="l3_persona")
            if why := ungrounded(reply.persona, ctx):
                raise UngroundedPersona(why)
        except (StructuredOutputError, UngroundedPersona) as exc:
            if self.fallback is None:
                raise
            fell_back(self.llm, "l3_persona", exc)
            return await self.fallback.write(ctx)
        return PersonaDraft(reply.persona, self.name)
