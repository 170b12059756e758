"""L1 extraction stage: a window of L0 messages in, validated atom drafts out.

Two engines share :func:`validate_drafts`: the LLM engine (structured output through the LLM port) and the
heuristic engine (:mod:`mnemoflow.memory.l1.heuristic`). Validation is where provenance is enforced: a source
id that is not a message of the window's new part is dropped, and a draft left without sources is dropped,
so every stored atom resolves to L0 (the model cannot invent ids).

A :class:`DecidingExtractor` (the LLM engine) also receives the user's stored atoms closest to the window and
may return a dedup decision per draft, so that one model call both extracts and deduplicates; the decisions are
validated later by :class:`~mnemoflow.memory.l1.dedup.Deduper`, exactly like the judge's.

A model's citations are narrowed to the user's messages that say the memory (:func:`narrow_sources`): the Qwen2.5
0.5B cited every message of its window on every memory, so drill-down from such an atom reached ten messages and
recall credited it with evidence it never held; a memory citing only the assistant's messages is dropped (the 1.5B
stored the other speaker's lines as the user's memories).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from pydantic import ValidationError

from mnemoflow.errors import StructuredOutputError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.models import AtomDraft, DedupDecision
from mnemoflow.memory.l1.window import Window
from mnemoflow.memory.salience import content_words
from mnemoflow.ports.llm import LLM
from mnemoflow.ports.vectors import AtomRow
from mnemoflow.prompts import l1_extraction as prompt

MAX_PER_PASS = 20


class Extractor(Protocol):
    """Turns one window into drafts. Raises (any MnemoflowError) on failure: the caller keeps the cursor."""

    @property
    def uses_llm(self) -> bool: ...

    async def extract(self, user: str, window: Window, previous_scene: str) -> list[AtomDraft]: ...


@dataclass(frozen=True, slots=True)
class Extraction:
    """Validated drafts and, aligned with them, the dedup decision the extraction reply gave (None: undecided).

    A decision's ``record_id`` is empty: the draft's atom id is only known to the pipeline (tenant + user).
    """

    drafts: list[AtomDraft]
    decisions: list[DedupDecision | None] = field(default_factory=list)


@runtime_checkable
class DecidingExtractor(Extractor, Protocol):
    """An extractor that also decides dedup against ``existing`` (the user's atoms closest to the window)."""

    async def extract_decided(
        self, user: str, window: Window, previous_scene: str, existing: Sequence[AtomRow]
    ) -> Extraction: ...


def validate_drafts(drafts: Iterable[AtomDraft], window: Window, limit: int = MAX_PER_PASS) -> list[AtomDraft]:
    """Keep drafts whose sources are new messages of the window; at most ``limit``, highest priority first.

    Why by priority and not output order (the original): when a model over-produces, the cut should drop the
    least important memories. ``-1`` (absolute instruction) ranks first.
    """
    allowed = window.new_ids
    out: dict[tuple[str, str], AtomDraft] = {}
    for d in drafts:
        sources = tuple(dict.fromkeys(s for s in d.source_message_ids if s in allowed))
        if sources:
            d = d.model_copy(update={"source_message_ids": sources})
            out.setdefault((d.type, d.content.strip().lower()), d)
    ranked = sorted(out.values(), key=lambda d: -101 if d.priority < 0 else -d.priority)
    return ranked[:limit]


def validate_decided(
    pairs: Iterable[tuple[AtomDraft, DedupDecision | None]], window: Window, limit: int = MAX_PER_PASS
) -> Extraction:
    """:func:`validate_drafts` keeping each surviving draft's decision (of the same first occurrence it keeps)."""
    allowed = window.new_ids
    kept = [(d, dec) for d, dec in pairs if any(s in allowed for s in d.source_message_ids)]
    by_key: dict[tuple[str, str], DedupDecision | None] = {}
    for d, dec in kept:
        by_key.setdefault((d.type, d.content.strip().lower()), dec)
    drafts = validate_drafts([d for d, _ in kept], window, limit)
    return Extraction(drafts, [by_key[(d.type, d.content.strip().lower())] for d in drafts])


def narrow_sources(content: str, cited: Sequence[L0Message]) -> tuple[str, ...]:
    """The ids of the cited messages that say ``content``: those holding at least half of its content words, else
    those holding the most of them; all of them when no message shares a word with it (a paraphrase, another
    language: nothing to tell them apart by)."""
    words = set(content_words(content))
    shares = [len(words & set(content_words(m.content))) for m in cited]
    if len(cited) < 2 or not words or not any(shares):
        return tuple(m.id for m in cited)
    best = max(shares)
    return tuple(m.id for m, n in zip(cited, shares, strict=True) if n == best or n >= len(words) / 2)


def _when(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        ts = datetime.fromisoformat(value)
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else None


def _decision(mem: prompt.MemoryOut) -> DedupDecision | None:
    if mem.decision is None:
        return None
    return DedupDecision(
        record_id="",
        action=mem.decision,
        target_ids=mem.target_ids,
        merged_content=mem.merged_content,
        merged_type=mem.merged_type,
        merged_priority=mem.merged_priority,
    )


class LLMExtractor:
    """Extraction by a model through the LLM port (stage ``l1-extraction``), with dedup decisions folded in.

    A window whose reply is invalid after the repair try goes to ``fallback`` (the heuristic engine), undecided;
    any other model error raises, so the pipeline keeps its cursor and the window is tried again."""

    uses_llm = True

    def __init__(self, llm: LLM, *, fallback: Extractor | None = None, max_tokens: int = 2048) -> None:
        self._llm, self._fallback, self._max_tokens = llm, fallback, max_tokens

    async def extract(self, user: str, window: Window, previous_scene: str) -> list[AtomDraft]:
        return (await self.extract_decided(user, window, previous_scene, [])).drafts

    async def extract_decided(
        self, user: str, window: Window, previous_scene: str, existing: Sequence[AtomRow]
    ) -> Extraction:
        if not any(m.role == "user" for m in window.new):
            return Extraction([])  # nothing said by the user: no call (assistant-only windows hold no user memory)

        def pm(m: L0Message) -> prompt.PromptMessage:
            return prompt.PromptMessage(m.id, m.role, m.ts, m.content)

        ctx = prompt.ExtractionContext(
            user,
            previous_scene,
            [pm(m) for m in window.background],
            [pm(m) for m in window.new],
            [prompt.ExistingMemory(r.id, r.type, r.text) for r in existing],
        )
        try:
            reply = await self._llm.complete(
                prompt.build_messages(ctx), prompt.ExtractionOut, max_tokens=self._max_tokens, stage="l1-extraction"
            )
        except StructuredOutputError as exc:
            if self._fallback is None:
                raise
            fell_back(self._llm, "l1-extraction", exc)
            drafts = await self._fallback.extract(user, window, previous_scene)
            return Extraction(drafts, [None] * len(drafts))
        pairs = []
        by_id = {m.id: m for m in window.new}
        for scene in prompt.resolve_ids(reply, ctx).scenes:
            for mem in scene.memories:
                cited = [by_id[s] for s in mem.source_message_ids if s in by_id and by_id[s].role == "user"]
                if not cited:
                    continue  # only the assistant's words: not a memory of the user (the 1.5B took them for it)
                sources = narrow_sources(mem.content, cited)
                try:
                    pairs.append(
                        (
                            AtomDraft(
                                content=mem.content.strip(),
                                type=mem.type,
                                priority=mem.priority,
                                source_message_ids=sources,
                                scene_name=scene.scene_name.strip(),
                                activity_start=_when(mem.activity_start),
                                activity_end=_when(mem.activity_end),
                            ),
                            _decision(mem),
                        )
                    )
                except ValidationError:
                    continue  # e.g. blank content after strip: drop the item, keep the pass
        return validate_decided(pairs, window)


def last_scene(drafts: list[AtomDraft]) -> str | None:
    """The scene to hand to the next pass (None keeps the previous one)."""
    named = [d.scene_name for d in drafts if d.scene_name]
    return named[-1] if named else None
