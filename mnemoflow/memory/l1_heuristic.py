"""The ``heuristic`` engine for L1: deterministic, model-free extraction and dedup decisions (DESIGN §6).

Why it exists: mnemoflow must work with no model configured, and tests need a stage that is reproducible.
What it does, plainly: every substantive user statement becomes one atom (questions, greetings and very short
acknowledgements are dropped); a short answer carries the question it answers as context; the type comes from
keyword patterns. Dedup decisions compare word sets. Its quality is measured in ``bench/locomo_recall.py``.
"""

from __future__ import annotations

import re

from mnemoflow.memory.dedup import JudgeItem
from mnemoflow.memory.l1_extract import validate_drafts
from mnemoflow.memory.l1_models import AtomDraft
from mnemoflow.memory.l1_window import Window
from mnemoflow.ports.vectors import AtomType
from mnemoflow.prompts.l1_dedup import DecisionOut

_WORD = re.compile(r"\w+", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")
_GREETING = re.compile(
    r"^(hi|hey|hello|thanks|thank you|bye|good (morning|night|evening)|ok(ay)?|cool|great|wow|lol)\b", re.IGNORECASE)
_INSTRUCTION = re.compile(r"\b(from now on|always (reply|answer|respond|use|write)|never (reply|answer|use|call|say)|"
                          r"(reply|answer|respond|write) (in|with|using))\b", re.IGNORECASE)
_PERSONA = re.compile(r"\b(i|i'm|i am|my|me)\b.{0,60}\b(like|love|prefer|enjoy|hate|dislike|favou?rite|allergic|"
                      r"vegetarian|vegan|passionate|identify|believe|value|am a|work as|live in|grew up)\b",
                      re.IGNORECASE)
MIN_WORDS = 4
SHORT_ANSWER_WORDS = 12
CONTEXT_CHARS = 200
MAX_CONTENT = 1000


def classify(text: str) -> tuple[AtomType, int]:
    """Type and priority from patterns: instructions 90, persona statements 65, everything else episodic 60."""
    if _INSTRUCTION.search(text):
        return "instruction", 90
    if _PERSONA.search(text):
        return "persona", 65
    return "episodic", 60


def statement(text: str) -> str:
    """The non-question sentences of a message; empty when it is only questions or a greeting."""
    kept = [s for s in _SENTENCE.split(text.strip()) if s and not s.rstrip().endswith(("?", "？"))]
    out = " ".join(kept).strip()
    if len(_WORD.findall(out)) < MIN_WORDS or (_GREETING.match(out) and len(_WORD.findall(out)) < 8):
        return ""
    return out


class HeuristicExtractor:
    """One atom per substantive user statement; no model call."""

    uses_llm = False

    async def extract(self, user: str, window: Window, previous_scene: str) -> list[AtomDraft]:
        context = [*window.background, *window.new]
        drafts = []
        for i, msg in enumerate(context):
            if msg.role != "user" or msg.id not in window.new_ids:
                continue
            text = statement(msg.content)
            if not text:
                continue
            prev = context[i - 1] if i > 0 else None
            answers = prev is not None and prev.role != "user" and "?" in prev.content
            if answers and prev is not None and len(_WORD.findall(text)) < SHORT_ANSWER_WORDS:
                text = f"{text} (answering: {prev.content.strip()[:CONTEXT_CHARS]})"
            kind, priority = classify(text)
            drafts.append(AtomDraft(content=text[:MAX_CONTENT], type=kind, priority=priority,
                                    source_message_ids=(msg.id,), scene_name=previous_scene))
        return validate_drafts(drafts, window)


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


class HeuristicJudge:
    """Dedup decisions by word sets, for the cases the similarity gate leaves open. No model call.

    new ⊇ old (same type) → update (the new one is more specific); old ⊇ new → skip; otherwise store.
    Merge is left to models: concatenating two texts by rule makes atoms that grow without bound.
    """

    uses_llm = False

    async def judge(self, items: list[JudgeItem]) -> list[DecisionOut]:
        out = []
        for item in items:
            new = _words(item.atom.draft.content)
            action, targets = "store", []
            for cand in sorted(item.candidates, key=lambda c: -c.similarity):
                old = _words(cand.row.text)
                if cand.row.type == item.atom.draft.type and old <= new:
                    action, targets = "update", [cand.row.id]
                    break
                if new <= old:
                    action, targets = "skip", [cand.row.id]
                    break
            out.append(DecisionOut(record_id=item.atom.id, action=action, target_ids=targets))
        return out
