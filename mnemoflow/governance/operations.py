"""Operations: the mutations of memory (edit, delete, remember, erase, import) as events on the commands topic.

Why events and not direct writes from the API: a user's memory has one writer at a time, the stream worker that
owns the user's partition (docs/DESIGN.md §3, §4). ``mnemoflow.commands`` is keyed and partitioned like
``mnemoflow.turns`` (``tenant/user``; a session erase is keyed by its session), so Faust gives a user's turns,
jobs and commands to the same worker. Each operation has an id; the worker applies an id once and records the
outcome, which ``GET /v1/operations/{id}`` reads. The same id sent again with another body is refused (409):
:func:`fingerprint` is what "the same body" means.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.ids import SafeId
from mnemoflow.memory.l1.models import MAX_CONTENT
from mnemoflow.ports.vectors import AtomType
from mnemoflow.scopes import SHARED, Scope


class _Op(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PatchAtom(_Op):
    """Edit an atom: a new version that supersedes it (re-embedded, provenance kept, marked manual)."""

    kind: Literal["patch_atom"] = "patch_atom"
    user: SafeId
    atom_id: SafeId
    text: str | None = Field(None, min_length=1, max_length=MAX_CONTENT)
    type: AtomType | None = None
    priority: int | None = Field(None, ge=-1, le=100)


class DeleteAtom(_Op):
    """Delete an atom: a tombstone line in ``records/``; gone from the index at once, from scenes at their pass."""

    kind: Literal["delete_atom"] = "delete_atom"
    user: SafeId
    atom_id: SafeId


class Remember(_Op):
    """Store a memory without extraction, through the similarity gate and dedup; provenance manual."""

    kind: Literal["remember"] = "remember"
    user: SafeId
    text: str = Field(min_length=1, max_length=MAX_CONTENT)
    type: AtomType = "persona"
    priority: int = Field(50, ge=-1, le=100)
    scope: Scope = Field(SHARED, exclude_if=lambda s: s == SHARED)
    """Decided at the API from the agent, team and visibility of the request (docs/concepts/scopes.md). Left out
    of the JSON when shared, so a shared remember has the body, and the fingerprint, it had before scopes."""


class ForgetAgent(_Op):
    """Remove one agent's private memory of a user (docs/concepts/scopes.md): its ``agent:<agent>`` atoms, as delete
    lines in ``records/`` and out of the index. Shared and team memory stay, and so does the conversation (L0), the
    provenance of shared facts; erasing the user removes that."""

    kind: Literal["forget_agent"] = "forget_agent"
    user: SafeId
    agent: SafeId


class EraseUser(_Op):
    """Remove everything of a user and leave a tombstone against re-delivered events."""

    kind: Literal["erase_user"] = "erase_user"
    user: SafeId


class EraseSession(_Op):
    """Remove a session's refs, offload entries, annotations, canvases and state; tombstone it."""

    kind: Literal["erase_session"] = "erase_session"
    session: SafeId


class ImportUser(_Op):
    """Load a staged bundle (``bundle`` is its path under the tenant's staging folder) as ``user``."""

    kind: Literal["import_user"] = "import_user"
    user: SafeId
    bundle: SafeId
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


Operation = Annotated[
    PatchAtom | DeleteAtom | Remember | ForgetAgent | EraseUser | EraseSession | ImportUser,
    Field(discriminator="kind"),
]


class OperationEvent(_Op):
    """The wire format of ``mnemoflow.commands``: one operation of a tenant, with its id."""

    tenant: SafeId
    operation_id: SafeId
    op: Operation
    submitted_at: AwareDatetime

    @property
    def key(self) -> str:
        """The partition key: the user's (as for turns), or the session's for a session erase."""
        scope = self.op.session if isinstance(self.op, EraseSession) else self.op.user
        return f"{self.tenant}/{scope}"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.op)


def fingerprint(op: PatchAtom | DeleteAtom | Remember | ForgetAgent | EraseUser | EraseSession | ImportUser) -> str:
    """A digest of the operation's body: two submissions with one id and different bodies differ here."""
    return hashlib.sha256(op.model_dump_json().encode()).hexdigest()


OperationState = Literal["pending", "applied", "failed"]


class OperationStatus(BaseModel):
    """What ``GET /v1/operations/{id}`` answers. Holds no memory content (it outlives an erase)."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str
    status: OperationState
    fingerprint: str
    submitted_at: AwareDatetime
    applied_at: AwareDatetime | None = None
    reason: str | None = Field(None, description="Why the operation failed.")
    result: dict[str, int | str | list[str] | None] = Field(default_factory=dict)
