"""Reading one user's atoms for the management API: filtered, paginated lists and the history of an atom.

Pure over the records (the source of truth), so what the API lists is what reindex would rebuild.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.errors import InvalidInput
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.ports.vectors import AtomType
from mnemoflow.scopes import Scope


class AtomFilter(BaseModel):
    """Every field narrows the list; None: no condition. ``text``: every word must occur in the atom."""

    model_config = ConfigDict(frozen=True)

    type: AtomType | None = None
    min_priority: int | None = Field(None, ge=-1, le=100)
    max_priority: int | None = Field(None, ge=-1, le=100)
    created_after: datetime | None = None
    created_before: datetime | None = None
    updated_after: datetime | None = None
    updated_before: datetime | None = None
    scene: str | None = None
    text: str | None = Field(None, max_length=2000)
    scope: Scope | None = Field(None, description="One scope: shared, team:<team> or agent:<agent>.")

    def matches(self, r: L1Record) -> bool:
        words = (self.text or "").lower().split()
        content = r.content.lower()
        return (
            (self.type is None or r.type == self.type)
            and (self.min_priority is None or r.priority >= self.min_priority)
            and (self.max_priority is None or r.priority <= self.max_priority)
            and (self.created_after is None or r.created >= self.created_after)
            and (self.created_before is None or r.created < self.created_before)
            and (self.updated_after is None or r.updated >= self.updated_after)
            and (self.updated_before is None or r.updated < self.updated_before)
            and (self.scene is None or r.scene_name == self.scene)
            and (self.scope is None or r.scope == self.scope)
            and all(w in content for w in words)
        )


class AtomPage(BaseModel):
    atoms: list[L1Record]
    next_cursor: str | None = Field(None, description="Pass as ``cursor`` for the next page; None: the last page.")


def _cursor(r: L1Record) -> str:
    return base64.urlsafe_b64encode(f"{r.created.isoformat()}|{r.id}".encode()).decode()


def _after(cursor: str) -> tuple[datetime, str]:
    try:
        created, rid = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(created), rid
    except ValueError as exc:
        raise InvalidInput("cursor is not one this API returned") from exc


def page(records: Sequence[L1Record], where: AtomFilter, limit: int, cursor: str | None) -> AtomPage:
    """Live records matching ``where``, oldest first (by created, then id), ``limit`` after ``cursor``."""
    ordered = sorted((r for r in records if r.live and where.matches(r)), key=lambda r: (r.created, r.id))
    if cursor is not None:
        key = _after(cursor)
        ordered = [r for r in ordered if (r.created, r.id) > key]
    chunk = ordered[:limit]
    return AtomPage(atoms=chunk, next_cursor=_cursor(chunk[-1]) if len(ordered) > limit else None)


class AtomVersion(BaseModel):
    """One version of an atom, and who or what made it."""

    record: L1Record
    made_by: str = Field(description="'extraction' (L1 store/update/merge) or 'manual' (edit, remember)")
    event: str = Field(description="store, update, merge, edit; 'delete' for a deletion")
    at: datetime


def history(records: Sequence[L1Record], atom_id: str) -> list[AtomVersion]:
    """Every version connected to ``atom_id`` through edits, updates and merges (before and after it), oldest
    first; a deletion is a last version of its own. Empty when the atom is unknown."""
    by_id = {r.id: r for r in records}
    if atom_id not in by_id:
        return []
    after: dict[str, list[str]] = {}
    for r in records:
        for old in r.merged_from:
            after.setdefault(old, []).append(r.id)
    seen, todo = set(), [atom_id]
    while todo:
        rid = todo.pop()
        if rid in seen or rid not in by_id:
            continue
        seen.add(rid)
        todo += by_id[rid].merged_from + after.get(rid, [])
    out = [
        AtomVersion(record=by_id[i], made_by=by_id[i].origin, event=by_id[i].action, at=by_id[i].created) for i in seen
    ]
    out += [
        AtomVersion(record=by_id[i], made_by="manual", event="delete", at=by_id[i].deleted_at)
        for i in seen
        if by_id[i].deleted_at is not None
    ]
    return sorted(out, key=lambda v: (v.at, v.event == "delete", v.record.id))
