"""What a scene pass proposes (:class:`ScenePlan`) and the pure function that applies it.

Why: the original let the model edit files with free tools and left heat arithmetic, counting and naming to
it (docs/tdam-spec.md §9.7, §9.8, §9.21). Here the model (or the heuristic engine) returns the new contents of the
scenes it touches; :func:`apply_plan` checks every rule — targets exist, one edit per file, at most
``max_creates`` new scenes, at most ``max_scenes`` live, atom ids from the allowed set — computes heat and
times itself, and returns the files to write. A plan that breaks a rule is refused as a whole
(:class:`ScenePlanRejected`); nothing is half-applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemoflow.errors import InvalidInput
from mnemoflow.memory.links import visible_len
from mnemoflow.memory.scenes.model import (
    DELETED_MARKER,
    MAX_SCENE_CHARS,
    MAX_SCENES,
    SAFE_SCENE_NAME,
    SceneBlock,
    normalize_filename,
)

MAX_EDITS_PER_PASS = MAX_SCENES + 1
"""Enough for any valid pass (every live scene touched plus one new); model replies are bounded tighter."""


class SceneEdit(BaseModel):
    """One change. ``filename``: the scene to update/delete, the new scene's proposed name, or the merge result
    (one of ``sources`` to keep that name, or a new name). ``sources``: for merge, every scene folded in (2–4)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["create", "update", "merge", "delete"]
    filename: str = Field(min_length=1, max_length=100)
    sources: list[str] = Field(default_factory=list, max_length=4)
    summary: str = Field("", max_length=400)
    body: str = Field("", max_length=4 * MAX_SCENE_CHARS)  # links included; what a reader sees is checked below
    atom_ids: list[str] = Field(default_factory=list, max_length=40)

    @field_validator("body")
    @classmethod
    def _readable_size(cls, body: str) -> str:
        if visible_len(body) > MAX_SCENE_CHARS:
            raise ValueError(f"body shows {visible_len(body)} characters; at most {MAX_SCENE_CHARS}")
        return body


class ScenePlan(BaseModel):
    """A whole pass: the edits, and an optional request that the persona be regenerated (docs/tdam-spec.md §3.5 step
    9)."""

    model_config = ConfigDict(extra="forbid")

    edits: list[SceneEdit] = Field(default_factory=list, max_length=MAX_EDITS_PER_PASS)
    persona_update_reason: str | None = Field(None, max_length=300)


class ScenePlanRejected(InvalidInput):
    """A plan broke a scene rule; ``problems`` lists each. Nothing was written; the pass can be asked again."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("scene plan rejected: " + "; ".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ScenePolicy:
    max_scenes: int = MAX_SCENES
    max_creates: int = 1
    """Spec: at most one new scene per pass, so topics consolidate instead of fragmenting."""


@dataclass(slots=True)
class PlanResult:
    """The files a plan writes (live and tombstoned blocks), and what changed, for the outcome and persona."""

    writes: dict[str, SceneBlock] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    live_after: int = 0

    @property
    def changed(self) -> list[str]:
        return self.created + self.updated + self.merged


def _summary(edit: SceneEdit) -> str:
    summary = " ".join(edit.summary.split())
    if summary:
        return summary
    first = " ".join(edit.body.replace("#", " ").split())
    return first[:200]


def apply_plan(
    current: dict[str, SceneBlock],
    plan: ScenePlan,
    allowed_atom_ids: set[str],
    now: datetime,
    policy: ScenePolicy | None = None,
) -> PlanResult:
    """Apply ``plan`` to ``current`` (every scene file, tombstones included) without I/O.

    Heat: new = 1, update = old + 1, merge = sum of merged + 1 (spec). ``created`` is kept on update and is the
    earliest on merge; ``updated`` is ``now``. Merge sources other than the result become tombstones.
    """
    policy = policy or ScenePolicy()
    live = {name: b for name, b in current.items() if not b.deleted}
    problems: list[str] = []
    result = PlanResult()
    touched: set[str] = set()
    taken = set(current)

    def claim(name: str) -> bool:
        if name in touched:
            problems.append(f"{name}: touched by more than one edit")
            return False
        touched.add(name)
        return True

    def content_ok(edit: SceneEdit) -> bool:
        body = edit.body.strip()
        if not body or body == DELETED_MARKER:
            problems.append(f"{edit.filename}: {edit.action} needs a non-empty body (deletion is its own action)")
            return False
        bad = [a for a in edit.atom_ids if a not in allowed_atom_ids]
        if bad:
            problems.append(f"{edit.filename}: unknown atom ids {bad[:5]}")
            return False
        return True

    for edit in plan.edits:
        if edit.action == "create":
            if not content_ok(edit):
                continue
            name = normalize_filename(edit.filename, taken)
            taken.add(name)
            claim(name)
            result.writes[name] = SceneBlock(
                name, _summary(edit), edit.body.strip(), 1, now, now, tuple(dict.fromkeys(edit.atom_ids))
            )
            result.created.append(name)
            continue
        if edit.action in ("update", "delete"):
            if edit.filename not in live:
                problems.append(f"{edit.filename}: {edit.action} of a scene that does not exist")
                continue
            if not claim(edit.filename):
                continue
            old = live[edit.filename]
            if edit.action == "delete":
                result.writes[old.filename] = old.tombstone(now)
                result.deleted.append(old.filename)
            elif content_ok(edit):
                ids = tuple(dict.fromkeys([*old.atom_ids, *edit.atom_ids]))
                result.writes[old.filename] = SceneBlock(
                    old.filename, _summary(edit), edit.body.strip(), old.heat + 1, old.created or now, now, ids
                )
                result.updated.append(old.filename)
            continue
        # merge
        sources = list(dict.fromkeys(edit.sources))
        missing = [s for s in sources if s not in live]
        if len(sources) < 2 or missing:
            problems.append(f"{edit.filename}: merge needs 2-4 existing sources (missing: {missing})")
            continue
        if not content_ok(edit) or not all(claim(s) for s in sources):
            continue
        if edit.filename in sources:
            name = edit.filename
        else:
            name = normalize_filename(edit.filename, taken)
            taken.add(name)
            claim(name)
        blocks = [live[s] for s in sources]
        ids = tuple(dict.fromkeys([a for b in blocks for a in b.atom_ids] + list(edit.atom_ids)))
        created = min((b.created for b in blocks if b.created), default=now)
        result.writes[name] = SceneBlock(
            name, _summary(edit), edit.body.strip(), sum(b.heat for b in blocks) + 1, created, now, ids
        )
        result.merged.append(name)
        for src in sources:
            if src != name:
                result.writes[src] = live[src].tombstone(now)
                result.deleted.append(src)

    if len(result.created) > policy.max_creates:
        problems.append(f"{len(result.created)} new scenes; at most {policy.max_creates} per pass (prefer update)")
    for name in result.writes:
        if not SAFE_SCENE_NAME.fullmatch(name):
            problems.append(f"{name!r}: not a safe scene file name")
    after = {**live, **result.writes}
    result.live_after = sum(1 for block in after.values() if not block.deleted)
    if result.live_after > policy.max_scenes:
        problems.append(
            f"{result.live_after} live scenes after the pass; at most {policy.max_scenes} (merge similar scenes first)"
        )
    if problems:
        raise ScenePlanRejected(problems)
    return result
