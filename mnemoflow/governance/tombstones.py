"""Tombstones of erased users and sessions: what keeps old events re-delivered by Kafka from bringing them back.

An erase removes every file of its user or session, then this marker stays: ``<tenant>/tombstones/<kind>/<h>``
where ``h`` is a digest of the id, so the marker does not keep the id itself. A turn (or tool result) whose
timestamp is not after the erase is dropped by the writers; one said later is new and is kept, so a user can
come back. The timestamp is the client's ``ts`` or, when it sent none, the API's clock at submission: a client
that replays old turns with their original times after an erase gets nothing back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Literal, TypeVar

from pydantic import AwareDatetime, BaseModel

from mnemoflow.ids import check_id
from mnemoflow.ports import FileStore

Kind = Literal["users", "sessions"]
T = TypeVar("T")
ScopeOf = Callable[[T], tuple[str, str, datetime]]
"""(tenant, user or session, timestamp) of an event."""


class Tombstone(BaseModel):
    erased_at: AwareDatetime
    operation_id: str
    removed: dict[str, int] = {}
    """What the erase removed so far, summed over its tries: a retry after a partial failure finds less to remove
    but still reports the whole erase."""
    done: bool = True
    """False from the moment an erase puts the stone until its last step: writers of derived files treat the user
    as being erased meanwhile (a stone written before this field existed is a finished erase)."""


def tombstone_path(tenant: str, kind: Kind, name: str) -> str:
    digest = hashlib.sha256(f"{tenant}\x1f{name}".encode()).hexdigest()[:40]
    return f"{check_id(tenant)}/tombstones/{kind}/{digest}.json"


class Tombstones:
    def __init__(self, files: FileStore) -> None:
        self._files = files

    def get(self, tenant: str, kind: Kind, name: str) -> Tombstone | None:
        data = self._files.read_bytes(tombstone_path(tenant, kind, name))
        return Tombstone.model_validate_json(data) if data is not None else None

    def put(self, tenant: str, kind: Kind, name: str, stone: Tombstone) -> None:
        """A later erase moves the cut-off forward; an earlier one (a replayed operation) never moves it back. A
        retry of the operation that put the stone keeps it as it is, with the counts of the earlier tries."""
        old = self.get(tenant, kind, name)
        if old is None or (old.erased_at < stone.erased_at and old.operation_id != stone.operation_id):
            self._files.write_atomic(tombstone_path(tenant, kind, name), stone.model_dump_json().encode())

    def add_removed(
        self, tenant: str, kind: Kind, name: str, operation_id: str, counts: dict[str, int], *, done: bool = False
    ) -> dict[str, int]:
        """Add one try's counts to the stone of ``operation_id`` (``done``: its last step) and return the totals
        over its tries (this try's alone when a later erase has replaced the stone)."""
        stone = self.get(tenant, kind, name)
        if stone is None or stone.operation_id != operation_id:
            return dict(counts)
        total = {k: stone.removed.get(k, 0) + counts.get(k, 0) for k in sorted(stone.removed.keys() | counts.keys())}
        updated = stone.model_copy(update={"removed": total, "done": stone.done or done})
        self._files.write_atomic(tombstone_path(tenant, kind, name), updated.model_dump_json().encode())
        return total

    def keep(self, events: Iterable[T], kind: Kind, scope: ScopeOf[T]) -> tuple[list[T], int]:
        """The events not erased, in order, and how many were dropped. One file read per distinct scope."""
        cut: dict[tuple[str, str], datetime | None] = {}
        kept, dropped = [], 0
        for event in events:
            tenant, name, ts = scope(event)
            if (tenant, name) not in cut:
                stone = self.get(tenant, kind, name)
                cut[(tenant, name)] = stone.erased_at if stone else None
            limit = cut[(tenant, name)]
            if limit is not None and ts <= limit:
                dropped += 1
            else:
                kept.append(event)
        return kept, dropped
