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
from mnemoflow.lexical import bm25_scores, is_chinese
from mnemoflow.lru import LRU
from mnemoflow.ports.files import FileStore
from mnemoflow.scopes import scope_parts
from mnemoflow.skills.merge import descriptor
from mnemoflow.skills.model import Skill
from mnemoflow.skills.store import SkillStore
from mnemoflow.storage import Layout
from mnemoflow.tokens import count_tokens

INDEX_BUDGET = 300
_WHEN_SHORT = 70
_HEAD = {False: "## Skills", True: "## 技能"}


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
    """The ``k`` skills that best answer ``query``: BM25 over their descriptors (name, when to use, area), fused by
    RRF with the dense ranking when vectors are given (one per skill, unit length). Not over the steps: their
    commands and paths (``python``, ``tests/``) are in every skill and made a long request match the longest one
    (measured on the OpenHands runs: the same hit@3, and the wrong first skills went to another repository)."""
    if not skills:
        return []
    docs = [descriptor(s) for s in skills]
    lexical = [i for i, score in sorted(enumerate(bm25_scores(query, docs)), key=lambda t: -t[1]) if score > 0]
    dense: list[int] = []
    if query_vector is not None and vectors is not None:
        cosines = [sum(a * b for a, b in zip(query_vector, v, strict=True)) for v in vectors]
        dense = sorted(range(len(skills)), key=lambda i: -cosines[i])
    fused = rrf_ranks(dense, lexical, k)
    return [skills[i] for i, *_ in fused]


class SkillsIndexSource:
    """The index recall puts in the system context for a viewer: the tenant's shared skills and, for an agent, its
    own, in one index. Rendered again only when a skill file changed (the folders' file ids and sizes are the
    cache key, one ``stat`` of each folder a recall), since a recall must not parse every skill file."""

    def __init__(self, files: FileStore, budget: int = INDEX_BUDGET, capacity: int = 1024) -> None:
        self._files, self._budget = files, budget
        self._cache: LRU[tuple[object, ...], str] = LRU(capacity)

    def index(self, tenant: str, scopes: Sequence[str]) -> str:
        agents = [None, *(name for kind, name in map(scope_parts, scopes) if kind == "agent")]
        dirs = [Layout.skills_dir(tenant, agent) for agent in agents]
        key = (tenant, *agents, *(tuple(sorted(self._files.stat_dir(d).items())) for d in dirs))
        return self._cache.get_or_load(key, lambda _: self._render(tenant, agents))

    def _render(self, tenant: str, agents: Sequence[str | None]) -> str:
        skills = [s for agent in agents for s in SkillStore(self._files, tenant, agent).all()]
        return skills_index(skills, self._budget, is_chinese([s.when_to_use for s in skills]))
