"""Fold a distilled skill into the skills that exist: skip, merge or store, never a duplicate.

* **skip** when every task it came from is already a source of a skill (distilling a task twice adds nothing);
* **merge** into the most similar skill of the same code area when the two are close enough: its steps stay first
  (the procedure that worked before), steps and pitfalls the other does not have are added up to the bounds,
  tools and sources are joined, the version goes up;
* **store** otherwise, under a name no live skill has.

A task that did not succeed never stores: its pitfalls may only join a close skill (the lesson belongs to a
procedure that works). Similarity is lexical (Jaccard of the name's and when-to-use's terms) unless the caller
passes another; :func:`vector_similarity` adds the embedder's cosine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from mnemoflow.lexical import terms
from mnemoflow.ports.embedder import Embedder
from mnemoflow.skills.model import MAX_PITFALLS, MAX_STEPS, RESERVED_NAMES, Skill, within_budget

Similarity = Callable[[Skill, Skill], float]
LEXICAL_THRESHOLD = 0.5
"""Jaccard of two skills' descriptor terms above which they are one skill (same area required too)."""
COSINE_THRESHOLD = 0.93
"""e5 cosine of two descriptors above which they are one skill: e5's cosines of related texts sit at 0.8-0.9."""


def descriptor(skill: Skill) -> str:
    """What identifies a skill for matching and search: its name, when to use it and its area."""
    return f"{skill.name.replace('-', ' ')} {skill.when_to_use} {skill.area}"


def lexical_similarity(a: Skill, b: Skill) -> float:
    ta, tb = set(terms(descriptor(a))), set(terms(descriptor(b)))
    return len(ta & tb) / len(ta | tb) if ta | tb else 0.0


def vector_similarity(embedder: Embedder) -> Similarity:
    """Lexical similarity, or the embedder's cosine rescaled so that :data:`COSINE_THRESHOLD` meets the lexical
    threshold, whichever is higher (a paraphrase with other words still matches)."""
    cache: dict[str, list[float]] = {}

    def vector(skill: Skill) -> list[float]:
        text = descriptor(skill)
        if text not in cache:
            cache[text] = embedder.embed([text])[0]
        return cache[text]

    def similarity(a: Skill, b: Skill) -> float:
        cosine = sum(x * y for x, y in zip(vector(a), vector(b), strict=True))
        return max(lexical_similarity(a, b), cosine * LEXICAL_THRESHOLD / COSINE_THRESHOLD)

    return similarity


@dataclass(frozen=True, slots=True)
class Fold:
    """What to do with a distilled skill: ``write`` is the skill to save (None for a skip), ``target`` the name of
    the skill merged into."""

    action: Literal["store", "merge", "skip"]
    write: Skill | None
    target: str | None
    reason: str


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def merged(old: Skill, new: Skill, now: datetime, steps: bool = True) -> Skill:
    """``old`` with what ``new`` adds (see the module docstring); ``steps=False`` takes only its pitfalls."""
    seen_steps = {_norm(s.text) for s in old.steps}
    extra = [s for s in new.steps if _norm(s.text) not in seen_steps] if steps else []
    seen_pits = {_norm(p.text) for p in old.pitfalls}
    pits = [p for p in new.pitfalls if _norm(p.text) not in seen_pits]
    return within_budget(
        old.model_copy(
            update={
                "steps": (*old.steps, *extra)[:MAX_STEPS],
                "pitfalls": (*old.pitfalls, *pits)[:MAX_PITFALLS],
                "tools": tuple(dict.fromkeys((*old.tools, *new.tools))),
                "sources": tuple(dict.fromkeys((*old.sources, *new.sources))),
                "version": old.version + 1,
                "updated": now,
            }
        )
    )


def _free_name(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    n = 2
    while f"{name[:44]}-{n}" in taken:
        n += 1
    return f"{name[:44]}-{n}"


def fold(
    existing: Sequence[Skill],
    new: Skill,
    now: datetime,
    *,
    succeeded: bool = True,
    similarity: Similarity = lexical_similarity,
) -> Fold:
    """Decide what ``new`` does to ``existing`` (see the module docstring)."""
    known = {src for s in existing for src in s.sources}
    if set(new.sources) <= known:
        return Fold("skip", None, None, "its task is already a source")
    same_area = [s for s in existing if s.area == new.area]
    scored = sorted(((similarity(s, new), s.name, s) for s in same_area), key=lambda t: (-t[0], t[1]))
    if scored and scored[0][0] >= LEXICAL_THRESHOLD:
        score, name, target = scored[0]
        if not succeeded and not new.pitfalls:
            return Fold("skip", None, name, "the task did not succeed and has no pitfalls")
        return Fold("merge", merged(target, new, now, steps=succeeded), name, f"similar to {name} ({score:.2f})")
    if not succeeded:
        return Fold("skip", None, None, "the task did not succeed and no skill is close")
    fresh = new.model_copy(update={"name": _free_name(new.name, {s.name for s in existing} | RESERVED_NAMES)})
    return Fold("store", fresh, None, "new")
