"""Skill files: ``<tenant>/skills/shared/<name>.md`` or ``<tenant>/skills/agent/<agent>/<name>.md``, with every
replaced version kept under ``history/<name>/v<N>.md`` beside them (an edit, by a pass or a person, never loses
the text it replaced)."""

from __future__ import annotations

import logging
import re
from datetime import datetime

from mnemoflow.errors import NotFound
from mnemoflow.ports.files import FileStore
from mnemoflow.scopes import SCOPE_PATTERN, SHARED, agent_scope, scope_parts
from mnemoflow.skills.model import NAME_PATTERN, Skill, parse_skill, render_skill
from mnemoflow.storage import Layout

log = logging.getLogger(__name__)


class SkillStore:
    """The skills of one tenant, shared or private to ``agent``."""

    def __init__(self, files: FileStore, tenant: str, agent: str | None = None) -> None:
        self._files = files
        self.folder = Layout.skills_dir(tenant, agent)
        """Where the set's files are, relative to the data root."""
        self.scope = agent_scope(agent) if agent else SHARED
        """``shared`` or ``agent:<agent>``: how the API, the dashboard and a skills bundle name this set."""

    @classmethod
    def of_scope(cls, files: FileStore, tenant: str, scope: str) -> SkillStore:
        """The set a scope names (``shared`` or ``agent:<agent>``); ValueError for anything else (skills have no
        team scope)."""
        if re.fullmatch(SCOPE_PATTERN, scope) is None:
            raise ValueError(f"{scope[:80]!r} is not a scope: shared or agent:<agent>")
        kind, name = scope_parts(scope)
        if kind == "team":
            raise ValueError("skills are shared or private to an agent (agent:<agent>), not a team's")
        return cls(files, tenant, name if kind == "agent" else None)

    def _path(self, name: str) -> str:
        return f"{self.folder}/{name}.md"

    def names(self) -> list[str]:
        return [n.removesuffix(".md") for n in self._files.list_dir(self.folder) if n.endswith(".md")]

    def get(self, name: str) -> Skill:
        """The skill ``name``; :class:`NotFound` if there is none."""
        raw = self._files.read_bytes(self._path(name)) if _valid(name) else None
        if raw is None:
            raise NotFound(f"no skill named {name!r}")
        return parse_skill(raw.decode("utf-8"))

    def all(self) -> list[Skill]:
        """Every readable skill, by name; a file a hand edit broke is logged and left out, not fatal."""
        out = []
        for name in self.names():
            try:
                out.append(self.get(name))
            except ValueError as err:
                log.warning("skill %s in %s is unreadable, left out: %s", name, self.folder, err)
        return out

    def put(self, skill: Skill, keep_history: bool = True) -> None:
        """Write ``skill``; the version it replaces goes to its history first (both in one atomic write), unless
        ``keep_history`` is False (an erase: the replaced text must not survive)."""
        writes = {self._path(skill.name): render_skill(skill).encode()}
        old = self._files.read_bytes(self._path(skill.name)) if keep_history else None
        if old is not None:
            previous = parse_skill(old.decode("utf-8")).version
            writes[f"{self.folder}/history/{skill.name}/v{previous}.md"] = old
        self._files.write_atomic_many(writes)

    def edit(self, edited: Skill, now: datetime) -> Skill:
        """Replace the stored skill of ``edited.name`` with a person's edit (:class:`NotFound` if there is none):
        ``created``, ``sources``, ``uses`` and the version come from the stored one, which goes to the history."""
        old = self.get(edited.name)
        new = edited.model_copy(
            update={
                "created": old.created,
                "sources": old.sources,
                "uses": old.uses,
                "version": old.version + 1,
                "updated": now,
                "engine": "edited",
            }
        )
        self.put(new)
        return new

    def record_use(self, name: str) -> Skill:
        """``name`` read by an agent: its ``uses`` go up by one, in place (not a new version: the text is the
        same, and the skills index does not show uses, so recall's system context stays byte-identical).
        :class:`NotFound` if there is none."""
        skill = self.get(name)
        used = skill.model_copy(update={"uses": skill.uses + 1})
        self.put(used, keep_history=False)
        return used

    def history(self, name: str) -> list[int]:
        """The versions kept of ``name``, oldest first."""
        found = self._files.list_dir(f"{self.folder}/history/{name}") if _valid(name) else []
        return sorted(int(n[1:-3]) for n in found if n.startswith("v") and n.endswith(".md"))

    def delete(self, name: str) -> int:
        """Remove ``name`` and its history; how many files went (0: there was no such skill)."""
        if not _valid(name):
            return 0
        return self.drop_history(name) + self._files.remove(self._path(name))

    def drop_history(self, name: str) -> int:
        """Remove the versions kept of ``name``; how many files went."""
        return self._files.remove(f"{self.folder}/history/{name}") if _valid(name) else 0


def skill_stores(files: FileStore, tenant: str) -> list[SkillStore]:
    """The tenant's shared skills and every agent's own (the agents whose folder is on disk)."""
    agents = files.list_dir(Layout.agents_skills_dir(tenant))
    return [SkillStore(files, tenant), *(SkillStore(files, tenant, agent) for agent in agents)]


def _valid(name: str) -> bool:
    return re.fullmatch(NAME_PATTERN, name) is not None
