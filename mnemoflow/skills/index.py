"""The skills as recall shows them: a short index for the system prompt, and a ranking for a request.

The index is a function of the skill set alone (names, areas and when-to-use, sorted by area then name), never of
the request, so its bytes stay the same across turns while no skill changes and the upstream model's prefix cache
keeps hitting (the original's users measured hit rates falling from 95.7 % to 83.3 % when injected text changed
every turn). It fits ``budget`` o200k tokens by giving up detail in steps: name and when-to-use, then names grouped
by area, then as many groups as fit and a count of the rest (``skill_search`` finds those).
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemoflow.index._common import rrf_ranks
from mnemoflow.lexical import bm25_scores
from mnemoflow.skills.merge import descriptor
from mnemoflow.skills.model import Skill
from mnemoflow.tokens import count_tokens

INDEX_BUDGET = 300
_WHEN_SHORT = 70
_HEAD = {False: "## Skills (read one with skill_read NAME)", True: "## 技能（用 skill_read 名称 查看全文）"}


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _detailed(skills: Sequence[Skill]) -> list[str]:
    return [f"- {s.name}: {_short(s.when_to_use, _WHEN_SHORT)}" for s in skills]


def _grouped(skills: Sequence[Skill]) -> list[str]:
    groups: dict[str, list[str]] = {}
    for s in skills:
        head = s.area.split("/", 1)[0] if s.area else ""
        groups.setdefault(s.area or head, []).append(s.name.removeprefix(f"{head}-") if head else s.name)
    return [f"- {area or '-'}: {', '.join(names)}" for area, names in groups.items()]


def skills_index(skills: Sequence[Skill], budget: int = INDEX_BUDGET, chinese: bool = False) -> str:
    """The index of ``skills`` within ``budget`` tokens (see the module docstring); ``""`` when there are none."""
    if not skills:
        return ""
    ordered = sorted(skills, key=lambda s: (s.area, s.name))
    head = _HEAD[chinese]
    for lines in (_detailed(ordered), _grouped(ordered)):
        text = "\n".join([head, *lines])
        if count_tokens(text) <= budget:
            return text
    lines, shown = [head], 0
    grouped = _grouped(ordered)
    for line in grouped:
        if count_tokens("\n".join([*lines, line, "- (+999 more: skill_search)"])) > budget:
            break
        lines.append(line)
        shown += 1
    hidden = sum(line.count(",") + 1 for line in grouped[shown:])
    return "\n".join([*lines, f"- (+{hidden} more: skill_search)"])


def rank_skills(
    query: str,
    skills: Sequence[Skill],
    k: int = 3,
    query_vector: Sequence[float] | None = None,
    vectors: Sequence[Sequence[float]] | None = None,
) -> list[Skill]:
    """The ``k`` skills that best answer ``query``: BM25 over their descriptors and steps, fused by RRF with the
    dense ranking when vectors are given (one per skill, unit length)."""
    if not skills:
        return []
    docs = [f"{descriptor(s)} {' '.join(st.text for st in s.steps)}" for s in skills]
    lexical = [i for i, score in sorted(enumerate(bm25_scores(query, docs)), key=lambda t: -t[1]) if score > 0]
    dense: list[int] = []
    if query_vector is not None and vectors is not None:
        cosines = [sum(a * b for a, b in zip(query_vector, v, strict=True)) for v in vectors]
        dense = sorted(range(len(skills)), key=lambda i: -cosines[i])
    fused = rrf_ranks(dense, lexical, k)
    return [skills[i] for i, *_ in fused]
