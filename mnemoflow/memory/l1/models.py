"""L1 value objects: a draft atom from extraction and the record written to ``records/YYYY-MM-DD.jsonl``.

Why separate from the index row (:class:`~mnemoflow.ports.vectors.AtomRow`): the record is the human-readable
history (scene, activity times, merge provenance, supersession), the row is what search needs. Ids are
derived from content and provenance so that re-running the same turns yields the same ids (idempotence).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.ports.vectors import MAX_CONTEXT, AtomType, search_text
from mnemoflow.scopes import SHARED, Scope

MAX_CONTENT = 2000
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """Whitespace-collapsed, lower-cased text: the identity used for ids and exact-duplicate checks."""
    return _SPACE.sub(" ", text).strip().lower()


class AtomDraft(BaseModel):
    """One memory proposed by an extractor, before dedup. ``source_message_ids`` are L0 ids of the window."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_CONTENT)
    type: AtomType
    priority: int = Field(ge=-1, le=100)
    source_message_ids: tuple[str, ...] = Field(min_length=1)
    scene_name: str = ""
    activity_start: AwareDatetime | None = None
    activity_end: AwareDatetime | None = None
    context: str = Field(default="", max_length=MAX_CONTEXT)
    """What the statement followed (the heuristic engine: the two turns before it), searched but not shown: see
    :func:`search_text`."""
    scope: Scope = SHARED
    """Who may see it (docs/concepts/scopes.md): decided by the pipeline from its type and its author
    (:mod:`mnemoflow.memory.l1.scoping`), not by the extractor, which never sees more than one author's messages."""

    @property
    def search_text(self) -> str:
        return search_text(self.content, self.context)

    def atom_id(self, tenant: str, user: str) -> str:
        """Deterministic id: the same draft from the same messages is the same atom on every re-run. The scope is
        part of the key only when it is not shared, so a shared atom keeps the id it had before scopes existed."""
        scope = [] if self.scope == SHARED else [self.scope]
        key = "\x1f".join([tenant, user, self.type, normalise(self.content), *sorted(self.source_message_ids), *scope])
        return "a_" + hashlib.sha256(key.encode()).hexdigest()[:24]


class L1Record(BaseModel):
    """A line of the L1 history. ``merged_from`` keeps provenance of update/merge (the original drops it)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    content: str
    type: AtomType
    priority: int = Field(ge=-1, le=100)
    scene_name: str = ""
    source_message_ids: list[str]
    activity_start: AwareDatetime | None = None
    activity_end: AwareDatetime | None = None
    context: str = ""
    """The draft's search context (kept so that a reindex or an import finds the atom as extraction did)."""
    scope: Scope = Field(SHARED, exclude_if=lambda s: s == SHARED)
    """Who may see it (docs/concepts/scopes.md). Absent means shared: a line written before scopes existed is shared,
    as it was, and a shared record is written as it was before scopes, byte for byte."""
    timestamps: list[AwareDatetime] = Field(description="When the facts were said (source message times)")
    created: AwareDatetime
    updated: AwareDatetime
    action: Literal["store", "update", "merge", "edit"] = "store"
    merged_from: list[str] = Field(default_factory=list)
    superseded_by: str | None = None
    valid_to: AwareDatetime | None = None
    origin: Literal["extraction", "manual"] = "extraction"
    """Who made this version: the L1 pipeline, or a person through the atom API (edit, remember)."""
    operation_id: str | None = None
    """The operation (``/v1/operations/{id}``) that wrote a manual version."""
    deleted_at: AwareDatetime | None = None
    deleted_by: str | None = None
    """The operation that deleted the atom (a ``delete`` line folded in)."""

    @property
    def search_text(self) -> str:
        return search_text(self.content, self.context)

    @property
    def live(self) -> bool:
        return self.superseded_by is None and self.deleted_at is None


class AddLine(BaseModel):
    """``records/*.jsonl`` line that adds a record."""

    op: Literal["add"] = "add"
    record: L1Record


class DeleteLine(BaseModel):
    """``records/*.jsonl`` line that deletes a record (a tombstone); readers fold it into that record."""

    op: Literal["delete"] = "delete"
    id: str
    at: AwareDatetime
    operation_id: str


class SupersedeLine(BaseModel):
    """``records/*.jsonl`` line that marks an earlier record as replaced; readers fold it into that record."""

    op: Literal["supersede"] = "supersede"
    id: str
    superseded_by: str
    valid_to: datetime


Action = Literal["store", "update", "merge", "skip"]


class DedupDecision(BaseModel):
    """What dedup decided for one new memory: store it, skip it, or let it update or merge into ``target_ids``
    (from the model, or from the similarity gate and the heuristic judge, which decide in the same terms)."""

    model_config = ConfigDict(extra="forbid")

    record_id: str
    action: Action
    target_ids: list[str] = Field(max_length=5)
    merged_content: str | None = Field(None, max_length=2000)
    merged_type: Literal["persona", "episodic", "instruction"] | None = None
    merged_priority: int | None = Field(None, ge=-1, le=100)
