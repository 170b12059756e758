"""Rebuild the atom index from ``records/`` alone: the records are the source of truth (docs/DESIGN.md §4), the index a
cache that can always be recomputed, after a lost index file, an import, or a restore from backup.

A row is made from a record exactly as the L1 pipeline makes it (:meth:`L1Pipeline.row`), with the vector of
the record's text, so a rebuilt index answers searches as the one it replaces.
"""

from __future__ import annotations

from collections.abc import Callable

from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.ports import Embedder, FileStore
from mnemoflow.ports.vectors import VectorStore

Progress = Callable[[int], None]
"""Told how many atoms were just indexed (a progress bar)."""


def reindex_user(
    files: FileStore,
    store: VectorStore,
    embedder: Embedder,
    tenant: str,
    user: str,
    *,
    batch: int = 256,
    progress: Progress | None = None,
) -> int:
    """Upsert a row for every live record of the user; rows of records no longer live are deleted. Returns rows
    written."""
    records = RecordLog(files, tenant, user).read(live_only=False)
    dead = [r.id for r in records if not r.live]
    live = [r for r in records if r.live]
    for start in range(0, len(live), batch):
        chunk = live[start : start + batch]
        vectors = embedder.embed([r.search_text for r in chunk])
        store.upsert([L1Pipeline.row(tenant, user, r, v) for r, v in zip(chunk, vectors, strict=True)])
        if progress is not None:
            progress(len(chunk))
    if dead:
        store.delete(tenant, user, dead)
    return len(live)


def count_live(files: FileStore, tenant: str, user: str) -> int:
    return sum(1 for _ in RecordLog(files, tenant, user).read())
