"""Make deleted rows of the SQLite atom index unrecoverable from its files (after an erase).

Why this is needed: SQLite deletes only unlink rows. Their text stays in free pages of the file, and the WAL keeps
old page images until a checkpoint. A byte search of the index after an erase would find them. This rewrites the
file (VACUUM) and truncates the WAL. It takes the write lock for as long as that runs (about a second per 10k atoms
here), so it is for erasures, not for every delete.
"""

from __future__ import annotations

from mnemoflow.index import _sqlite_schema as schema


def scrub_sqlite_index(path: str, busy_timeout_ms: int = 30_000) -> None:
    conn = schema.connect(path, busy_timeout_ms)
    try:
        with schema.translate():
            conn.execute("vacuum")
            conn.execute("pragma wal_checkpoint(truncate)")
    finally:
        conn.close()
