"""Export and import of one user's memory as a portable, versioned bundle (a tar stream).

Format ``mnemoflow-user-bundle`` version 2: a POSIX tar whose members are

* ``user/conversations/YYYY-MM-DD.jsonl``   L0, as stored
* ``user/records/YYYY-MM-DD.jsonl``         L1 history (adds, supersede and delete lines)
* ``user/scenes/*.md``, ``user/persona.md`` L2 scenes and L3 persona (no backups or undo journals)
* ``user/agents/<agent>/scenes/*.md``, ``…/persona.md``, and the same under ``user/teams/<team>/``: those of each
                                            private scope (docs/concepts/scopes.md)
* ``user/state/l1_cursor.json``             how far L1 has read L0, so the importing stack does not extract again
* ``sessions/<session>/…``                  the user's sessions (refs, offload entries, annotations, canvases,
                                            state), only when asked for
* ``manifest.json``                         last: format, version, source tenant and user, embedding model, time,
                                            and for every member its path, size and SHA-256

The manifest comes last so that export streams each file once. No file names the tenant or the user inside, so a
bundle imports under another tenant or user id as it is; the index is rebuilt from the records on import (with
the importing stack's embedding model), never copied.

Version 2 is version 1 whose record and L0 lines may carry scopes and agents (docs/concepts/scopes.md). The layout
is the same, and this stack reads both (a version 1 bundle is all shared memory); the number changed so that a
release from before scopes, which reads a record's scope as an unknown field and drops it, refuses the bundle
instead of importing an agent's private memory as shared.
"""

from __future__ import annotations

import hashlib
import io
from datetime import datetime
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.errors import Conflict, InvalidInput
from mnemoflow.governance.archive import BundleFile, read_archive, stored, walk, write_archive
from mnemoflow.governance.operations import ImportUser
from mnemoflow.governance.reindex import reindex_user
from mnemoflow.ids import check_id
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.ports import Embedder, FileStore
from mnemoflow.ports.vectors import VectorStore
from mnemoflow.storage import Layout

FORMAT = "mnemoflow-user-bundle"
VERSION = 2
READS = (1, 2)
"""The versions this stack imports."""
_USER_PARTS = ("conversations", "records", "scenes", "persona.md", "state/l1_cursor.json")


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    version: int = VERSION
    tenant: str
    user: str
    embedding_model: str
    created_at: datetime
    files: list[BundleFile] = Field(default_factory=list)


def bundle_members(files: FileStore, tenant: str, user: str, sessions: bool) -> list[tuple[str, str]]:
    """(member name, stored path) of everything a bundle holds for this user."""
    home = Layout.user_dir(tenant, user)
    scoped = [ScenePaths(tenant, user, s) for s in ScenePaths(tenant, user).scopes_on_disk(files)]
    parts = [f"{home}/{part}" for part in _USER_PARTS] + [p for s in scoped for p in (s.scenes_dir, s.persona)]
    out = [(f"user/{p[len(home) + 1 :]}", p) for part in parts for p in walk(files, part)]
    if sessions:
        names = sorted({m.session for m in read_l0(files, tenant, user, limit=10**9)})
        for s in names:
            folder = Layout.session_dir(tenant, s)
            out += [(f"sessions/{s}/{p[len(folder) + 1 :]}", p) for p in walk(files, folder)]
    return out


def export_user(
    files: FileStore,
    tenant: str,
    user: str,
    out: IO[bytes],
    *,
    embedding_model: str,
    at: datetime,
    sessions: bool = False,
) -> Manifest:
    """Write the bundle to ``out`` (any writable stream; nothing is seeked). Returns its manifest."""
    manifest = Manifest(tenant=tenant, user=user, embedding_model=embedding_model, created_at=at)
    return write_archive(out, stored(files, bundle_members(files, tenant, user, sessions)), manifest, at)


def _target(tenant: str, user: str, name: str) -> str:
    """Where member ``name`` lands for (tenant, user); refuses anything outside the two bundle folders."""
    parts = name.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidInput(f"bundle member {name!r} is not a plain relative path")
    if parts[0] == "user" and len(parts) >= 2:
        return "/".join([Layout.user_dir(tenant, user), *parts[1:]])
    if parts[0] == "sessions" and len(parts) >= 3:
        return "/".join([Layout.session_dir(tenant, check_id(parts[1])), *parts[2:]])
    raise InvalidInput(f"bundle member {name!r} is outside user/ and sessions/")


def read_bundle(stream: IO[bytes]) -> tuple[Manifest, dict[str, bytes]]:
    """Members and manifest of a bundle stream, checksums verified. Raises InvalidInput on any mismatch."""
    return read_archive(stream, Manifest.model_validate_json, FORMAT, READS)


def _occupied(files: FileStore, tenant: str, user: str) -> bool:
    home = Layout.user_dir(tenant, user)
    return bool(files.list_dir(Layout.records_dir(tenant, user)) or files.list_dir(f"{home}/conversations"))


class BundleImporter:
    """Writes a bundle's files under (tenant, user) and indexes its records with this stack's embedder."""

    def __init__(self, files: FileStore, store: VectorStore, embedder: Embedder) -> None:
        self._files, self._store, self._embedder = files, store, embedder

    def import_bundle(self, stream: IO[bytes], tenant: str, user: str) -> dict[str, Any]:
        """Refused (Conflict) when the user already has L0 or records: a bundle is a user's whole memory, and
        merging two histories day file by day file would interleave them."""
        manifest, members = read_bundle(stream)
        if _occupied(self._files, tenant, user):
            raise Conflict(f"user {user} already has memory here; erase it first or import under another id")
        targets = {_target(tenant, user, name): data for name, data in members.items()}
        self._files.write_atomic_many(targets)
        atoms = reindex_user(self._files, self._store, self._embedder, tenant, user)
        return {"files": len(targets), "atoms_indexed": atoms, "source_model": manifest.embedding_model}

    def import_staged(self, tenant: str, op: ImportUser) -> dict[str, Any]:
        """Import a bundle the API staged for an operation, then remove it. A crash after the import and before
        the worker recorded the outcome makes the retry fail (the user is occupied, or the bundle gone) although
        the memory is there: the operation's reason says which."""
        path = staged_path(tenant, op.bundle)
        data = self._files.read_bytes(path)
        if data is None:
            raise InvalidInput(f"staged bundle {op.bundle} is gone (already imported, or never uploaded)")
        if hashlib.sha256(data).hexdigest() != op.sha256:
            raise InvalidInput(f"staged bundle {op.bundle} does not match its checksum")
        result = self.import_bundle(io.BytesIO(data), tenant, op.user)
        self._files.remove(path)
        return result


def staged_path(tenant: str, name: str) -> str:
    return f"{check_id(tenant)}/staging/{check_id(name)}"
