"""Export and import of a tenant's skills as a portable, versioned bundle (a tar stream).

Format ``mnemoflow-skills-bundle`` version 1: a POSIX tar whose members are

* ``skills/shared/<name>.md``                     the shared skills, as stored
* ``skills/agent/<agent>/<name>.md``              each agent's own
* ``…/history/<name>/v<N>.md``                    beside either, the versions edits replaced, when asked for
* ``manifest.json``                               last: format, version, source tenant, time, and for every
                                                  member its path, size and SHA-256

Why a bundle of its own: the user bundle (:mod:`mnemoflow.governance.bundle`) holds one user's memory, and skills
belong to the tenant, not to a user. The tar, the manifest's checksums and their verification are the user
bundle's (:mod:`mnemoflow.governance.archive`). No member names the tenant, so a bundle imports into another.

Import folds each skill into the set of its scope as the skill pass folds a distilled task
(:func:`mnemoflow.skills.learn.fold_all`): a skill whose tasks are all sources of a skill there already is
skipped, a close one of the same area merges into it, another is stored (under a free name). So importing a
bundle twice, or into a tenant that learnt the same tasks, adds no duplicate. A stored skill brings its history;
a merged one's history is the target's own.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.errors import InvalidInput
from mnemoflow.governance.archive import BundleFile, read_archive, stored, walk, write_archive
from mnemoflow.ids import ID_PATTERN, check_id
from mnemoflow.ports.files import FileStore
from mnemoflow.scopes import SHARED, agent_scope
from mnemoflow.skills.distil import Distilled
from mnemoflow.skills.learn import Learnt, fold_all
from mnemoflow.skills.model import NAME_PATTERN, Skill, parse_skill
from mnemoflow.skills.store import SkillStore, skill_stores

FORMAT = "mnemoflow-skills-bundle"
VERSION = 1
READS = (1,)
"""The versions this stack imports."""
_ID = ID_PATTERN.removeprefix("^").removesuffix("$")
_MEMBER = re.compile(
    rf"skills/(shared|agent/({_ID}))/(?:history/({NAME_PATTERN})/v([1-9][0-9]{{0,8}})|({NAME_PATTERN}))\.md"
)


class SkillsManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    version: int = VERSION
    tenant: str
    created_at: datetime
    files: list[BundleFile] = Field(default_factory=list)


def skills_members(
    files: FileStore, tenant: str, scopes: Collection[str] | None = None, history: bool = False
) -> list[tuple[str, str]]:
    """(member name, stored path) of the skills of ``scopes`` (every set of the tenant when None), with their
    history if asked."""
    paths = []
    for store in skill_stores(files, tenant):
        if scopes is None or store.scope in scopes:
            paths += [f"{store.folder}/{name}.md" for name in sorted(store.names())]
            paths += list(walk(files, f"{store.folder}/history")) if history else []
    home = len(check_id(tenant)) + 1
    return [(path[home:], path) for path in paths]


def export_skills(
    files: FileStore,
    tenant: str,
    out: IO[bytes],
    *,
    at: datetime,
    scopes: Collection[str] | None = None,
    history: bool = False,
) -> SkillsManifest:
    """Write the skills bundle to ``out`` (any writable stream; nothing is seeked). Returns its manifest."""
    members = stored(files, skills_members(files, tenant, scopes, history))
    return write_archive(out, members, SkillsManifest(tenant=tenant, created_at=at), at)


@dataclass(frozen=True, slots=True)
class SkillsBundle:
    """A read bundle: each scope's skills (member name, skill) and their kept versions (skill name → version →
    file)."""

    manifest: SkillsManifest
    skills: dict[str, list[tuple[str, Skill]]] = field(default_factory=dict)
    history: dict[str, dict[str, dict[int, bytes]]] = field(default_factory=dict)


def read_skills_bundle(stream: IO[bytes]) -> SkillsBundle:
    """The bundle's skills, every member checked against the manifest and parsed. Raises InvalidInput with the
    reason: a checksum or a listing that differs, a member outside the layout, a file that is not a skill or that
    names another, a history of a skill the bundle does not hold."""
    manifest, members = read_archive(stream, SkillsManifest.model_validate_json, FORMAT, READS)
    skills: defaultdict[str, list[tuple[str, Skill]]] = defaultdict(list)
    history: defaultdict[str, defaultdict[str, dict[int, bytes]]] = defaultdict(lambda: defaultdict(dict))
    for name in sorted(members):
        match = _MEMBER.fullmatch(name)
        if match is None:
            raise InvalidInput(f"bundle member {name!r} is not skills/<shared or agent/<agent>>/[history/…/]<name>.md")
        try:
            scope = agent_scope(match[2]) if match[2] else SHARED
            if match[3]:
                history[scope][match[3]][int(match[4])] = members[name]
                continue
            skill = parse_skill(members[name].decode("utf-8"))
        except ValueError as exc:  # a bad agent id, a file that is not a skill (UnicodeDecodeError is one)
            raise InvalidInput(f"bundle member {name}: {exc}") from exc
        if skill.name != match[5]:
            raise InvalidInput(f"bundle member {name} holds skill {skill.name!r}")
        skills[scope].append((name, skill))
    for scope, kept in history.items():
        if orphans := set(kept) - {skill.name for _, skill in skills.get(scope, [])}:
            raise InvalidInput(f"bundle has the history of {scope} skills it does not hold: {sorted(orphans)[:5]}")
    return SkillsBundle(manifest, dict(skills), {scope: dict(kept) for scope, kept in history.items()})


def import_scope(files: FileStore, tenant: str, bundle: SkillsBundle, scope: str, now: datetime) -> list[Learnt]:
    """Fold the bundle's ``scope`` skills into the tenant's set of that scope (see the module docstring); what
    happened to each, by member (``task``). The caller serialises writes of one set (the API holds its lock)."""
    store = SkillStore.of_scope(files, tenant, scope)
    found = bundle.skills.get(scope, [])
    learnt = fold_all(store, [(m, Distilled(s, True, "imported")) for m, s in found], now, where=f"{tenant} import")
    source = {member: skill.name for member, skill in found}
    kept = bundle.history.get(scope, {})
    writes = {
        f"{store.folder}/history/{item.skill}/v{version}.md": data
        for item in learnt
        if item.action == "store" and item.skill is not None
        for version, data in kept.get(source[item.task], {}).items()
    }
    if writes:
        files.write_atomic_many(writes)
    return learnt


def import_skills(files: FileStore, tenant: str, bundle: SkillsBundle, now: datetime) -> list[Learnt]:
    """Every scope of the bundle into the tenant's set of the same scope (the CLI's path: no other writer runs)."""
    return [item for scope in sorted(bundle.skills) for item in import_scope(files, tenant, bundle, scope, now)]
