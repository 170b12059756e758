"""The model persona engine: one structured call through the LLM port (the reply is the body only)."""

from __future__ import annotations

from mnemoflow.memory.persona.generate import PersonaContext
from mnemoflow.ports import LLM
from mnemoflow.prompts.persona import PersonaReply, build_persona_messages


class LLMPersonaEngine:
    """Implements :class:`~mnemoflow.memory.persona.generate.PersonaEngine` with any LLM engine."""

    name = "llm"
    every_n: int | None = None

    def __init__(self, llm: LLM, *, max_tokens: int = 1500, language: str | None = None) -> None:
        self.llm = llm
        self.max_tokens = max_tokens
        self.language = language

    async def write(self, ctx: PersonaContext) -> str:
        messages = build_persona_messages(ctx, *([self.language] if self.language else []))
        reply = await self.llm.complete(messages, PersonaReply, max_tokens=self.max_tokens, stage="l3_persona")
        return reply.persona
