"""Erase a user or a session: every file of theirs, their index rows, and a tombstone that outlives them.

Order, and why: the tombstone first (from then on the writers drop the user's re-delivered events), then the
sessions and the index rows (found through L0 and ``records/``, which must still be there), then the user's
folder, then ``scrub`` (the index engine rewrites itself so deleted text is not left in free pages). Each step
is idempotent, so a failed erase is simply applied again; the counts it reports are summed over its tries in the
tombstone (a retry finds less left to remove, and a session erased by an earlier try is not counted twice).

A user's sessions are the sessions of their L0 messages; a tool result's offload entry does not name its user. A
session's erase reaches the skills distilled from it too (:mod:`mnemoflow.skills.forget`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mnemoflow.governance.tombstones import Tombstone, Tombstones
from mnemoflow.memory.l0 import read_l0
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.offload.owner import owner_of
from mnemoflow.ports import FileStore
from mnemoflow.ports.vectors import VectorStore
from mnemoflow.skills.forget import forget_session
from mnemoflow.storage import Layout

_USER_COUNTS = ("files_removed", "index_rows_removed", "sessions_erased")

Scrub = Callable[[], None]
"""Makes deleted index rows unrecoverable from the index files (SQLite: FTS merge, VACUUM, WAL truncation)."""


class Eraser:
    def __init__(self, files: FileStore, store: VectorStore, scrub: Scrub | None = None) -> None:
        self._files, self._store, self._scrub = files, store, scrub
        self._tombstones = Tombstones(files)

    def erase_user(self, tenant: str, user: str, at: datetime, operation_id: str) -> dict[str, int]:
        self._tombstones.put(tenant, "users", user, Tombstone(erased_at=at, operation_id=operation_id, done=False))
        sessions = sorted({m.session for m in read_l0(self._files, tenant, user, limit=10**9)})
        for session in sessions:
            files, first = self._erase_session(tenant, session, at, operation_id)
            self._count(tenant, user, operation_id, files_removed=files, sessions_erased=int(first))
        ids = [r.id for r in RecordLog(self._files, tenant, user).read(live_only=False)]
        rows = self._store.delete(tenant, user, ids) if ids else 0
        self._count(tenant, user, operation_id, index_rows_removed=rows)
        files = self._files.remove(Layout.user_dir(tenant, user))
        if self._scrub is not None:
            self._scrub()
        return self._count(tenant, user, operation_id, done=True, files_removed=files)

    def erase_agent_sessions(self, tenant: str, user: str, agent: str, at: datetime, operation_id: str) -> int:
        """Erase the user's sessions that the agent owns (its short-term memory: refs, entries, canvases), as
        forgetting the agent asks; the user's other sessions stay. Returns how many were erased by this try."""
        sessions = sorted({m.session for m in read_l0(self._files, tenant, user, limit=10**9)})
        owned = [s for s in sessions if (o := owner_of(self._files, tenant, s)) is not None and o.agent == agent]
        return sum(int(self._erase_session(tenant, s, at, operation_id)[1]) for s in owned)

    def erase_session(self, tenant: str, session: str, at: datetime, operation_id: str) -> dict[str, int]:
        files, _ = self._erase_session(tenant, session, at, operation_id)
        stone = self._tombstones.get(tenant, "sessions", session)
        if stone is not None and stone.operation_id == operation_id:
            files = stone.removed.get("files_removed", files)
        return {"files_removed": files, "sessions_erased": 1}

    def _erase_session(self, tenant: str, session: str, at: datetime, operation_id: str) -> tuple[int, bool]:
        """Files removed by this try, and whether no earlier try of the operation finished the session."""
        self._tombstones.put(tenant, "sessions", session, Tombstone(erased_at=at, operation_id=operation_id))
        stone = self._tombstones.get(tenant, "sessions", session)
        first = stone is None or stone.operation_id != operation_id or not stone.removed
        files = forget_session(self._files, tenant, session, at)  # skills first: their sources name the session
        files += self._files.remove(Layout.session_dir(tenant, session))
        self._tombstones.add_removed(tenant, "sessions", session, operation_id, {"files_removed": files})
        return files, first

    def _count(self, tenant: str, user: str, operation_id: str, *, done: bool = False, **counts: int) -> dict[str, int]:
        """Add a finished step's counts to the user's tombstone (``done``: the erase's last step); the totals over
        every try so far."""
        total = self._tombstones.add_removed(tenant, "users", user, operation_id, counts, done=done)
        return {k: total.get(k, 0) for k in _USER_COUNTS}
