"""The model persona engine: one structured call through the LLM port (the reply is the body only)."""

from __future__ import annotations

from mnemoflow.errors import StructuredOutputError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.memory.persona.generate import PersonaContext, PersonaEngine
from mnemoflow.ports import LLM
from mnemoflow.prompts.persona import PersonaReply, build_persona_messages


class LLMPersonaEngine:
    """Implements :class:`~mnemoflow.memory.persona.generate.PersonaEngine` with any LLM engine; a reply still
    invalid after the repair try has ``fallback`` (the heuristic engine) write that persona."""

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

    async def write(self, ctx: PersonaContext) -> str:
        messages = build_persona_messages(ctx, *([self.language] if self.language else []))
        try:
            reply = await self.llm.complete(messages, PersonaReply, max_tokens=self.max_tokens, stage="l3_persona")
        except StructuredOutputError as exc:
            if self.fallback is None:
                raise
            fell_back(self.llm, "l3_persona", exc)
            return await self.fallback.write(ctx)
        return reply.persona
