"""The model engine of the skill pass: the heuristic draft rewritten by the model, with validated output.

Why a rewrite of the draft and not a skill from scratch: the draft already holds what the task did and where each
step came from; what a model adds is the general procedure (when to use it, steps as instructions). The reply names
the draft's items by number, so code keeps every reference: an item the model numbers wrongly is dropped, a text
that keeps none of the draft's names (files, commands, error types) is replaced by the draft's, a when-to-use too
short to describe anything too, and a reply that keeps no step, or no valid
reply at all, leaves the draft as the skill (``engine: heuristic``), logged, never guessed at.
"""

from __future__ import annotations

import logging
import re

from mnemoflow.errors import MnemoflowError
from mnemoflow.lexical import word_count
from mnemoflow.ports.llm import LLM
from mnemoflow.prompts import skills as prompt
from mnemoflow.skills.model import NAME_PATTERN, Skill, within_budget

log = logging.getLogger(__name__)
MIN_WHEN_WORDS = 5
"""A when-to-use shorter than this is not a description (Qwen2.5 0.5B wrote "general", a word of the prompt): the
draft's, the task's own goal, stays."""


def _slug(name: str, fallback: str) -> str:
    slug = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9\u4e00-\u9fff-]+", "-", name.lower())).strip("-")[:48].rstrip("-")
    return slug if re.fullmatch(NAME_PATTERN, slug or "-") else fallback


_ANCHOR_RE = re.compile(r"[\w.-]*[/._][\w./-]*\w|\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b")
"""What a step or pitfall is about: paths, dotted names, snake_case names and CamelCase names (error types)."""


def anchors(text: str) -> set[str]:
    return {a for a in _ANCHOR_RE.findall(text) if len(a) > 3}


def faithful(draft: str, rewritten: str) -> str:
    """The model's text if it keeps something the draft's names (a file, a command's script, an error type), else
    the draft's: Qwen2.5 1.5B turned a task's real failures into generic advice ("make sure the hook is tested")
    and its commands into invented ones."""
    names = anchors(draft)
    return rewritten if not names or names & anchors(rewritten) else draft


def applied(draft: Skill, reply: prompt.SkillReply) -> Skill | None:
    """``draft`` with the model's texts (each checked by :func:`faithful`), or None when the reply keeps no step of
    the draft."""
    steps = [
        (step := draft.steps[r.n - 1]).model_copy(update={"text": faithful(step.text, r.text)})
        for r in reply.steps
        if 1 <= r.n <= len(draft.steps)
    ]
    pitfalls = [
        (pit := draft.pitfalls[r.n - 1]).model_copy(update={"text": faithful(pit.text, r.text)})
        for r in reply.pitfalls
        if 1 <= r.n <= len(draft.pitfalls)
    ]
    if not steps:
        return None
    when = reply.when_to_use if word_count(reply.when_to_use) >= MIN_WHEN_WORDS else draft.when_to_use
    when = f"{when} ({draft.area})" if draft.area and draft.area not in when else when
    return within_budget(
        draft.model_copy(
            update={
                "name": _slug(reply.name, draft.name),
                "when_to_use": when,
                "steps": tuple(dict((s.source, s) for s in steps).values()),
                "pitfalls": tuple(dict((p.source, p) for p in pitfalls).values()),
                "engine": "llm",
            }
        )
    )


async def written_by_model(draft: Skill, llm: LLM) -> Skill:
    """The model's skill for ``draft``, or ``draft`` itself when the model fails or keeps nothing."""
    try:
        reply = await llm.complete(prompt.build(draft), prompt.SkillReply, max_tokens=700, stage="skills")
    except MnemoflowError as exc:  # invalid output after the retry, or the model unreachable
        log.warning("skill writer: no valid reply for %s (%s); the heuristic draft stands", draft.name, exc)
        return draft
    skill = applied(draft, reply)
    if skill is None:
        log.warning("skill writer: the reply for %s kept no step of the draft; the heuristic draft stands", draft.name)
        return draft
    return skill
