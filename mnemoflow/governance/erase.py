"""Erase a user or a session: every file of theirs, their index rows, and a tombstone that outlives them.

Order, and why: the tombstone first (from then on the writers drop the user's re-delivered events), then the
sessions and the index rows (found through L0 and ``records/``, which must still be there), then the user's
folder, then ``scrub`` (the index engine rewrites itself so deleted text is not left in free pages). Each step
is idempotent, so a failed erase is simply applied again.

A user's sessions are the sessions of their L0 messages; a tool result's offload entry does not name its user.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mnemoflow.governance.tombstones import Tombstone, Tombstones
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.records import RecordLog
from mnemoflow.ports import FileStore
from mnemoflow.ports.vectors import VectorStore
from mnemoflow.storage import Layout

Scrub = Callable[[], None]
"""Makes deleted index rows unrecoverable from the index files (SQLite: FTS merge, VACUUM, WAL truncation)."""


class Eraser:
    def __init__(self, files: FileStore, store: VectorStore, scrub: Scrub | None = None) -> None:
        self._files, self._store, self._scrub = files, store, scrub
        self._tombstones = Tombstones(files)

    def erase_user(self, tenant: str, user: str, at: datetime, operation_id: str) -> dict[str, int]:
        self._tombstones.put(tenant, "users", user, Tombstone(erased_at=at, operation_id=operation_id))
        sessions = sorted({m.session for m in read_l0(self._files, tenant, user, limit=10**9)})
        files = sum(self._erase_session(tenant, s, at, operation_id) for s in sessions)
        ids = [r.id for r in RecordLog(self._files, tenant, user).read(live_only=False)]
        rows = self._store.delete(tenant, user, ids) if ids else 0
        files += self._files.remove(Layout.user_dir(tenant, user))
        if self._scrub is not None:
            self._scrub()
        return {"files_removed": files, "index_rows_removed": rows, "sessions_erased": len(sessions)}

    def erase_session(self, tenant: str, session: str, at: datetime, operation_id: str) -> dict[str, int]:
        return {"files_removed": self._erase_session(tenant, session, at, operation_id), "sessions_erased": 1}

    def _erase_session(self, tenant: str, session: str, at: datetime, operation_id: str) -> int:
        self._tombstones.put(tenant, "sessions", session, Tombstone(erased_at=at, operation_id=operation_id))
        return self._files.remove(Layout.session_dir(tenant, session))
