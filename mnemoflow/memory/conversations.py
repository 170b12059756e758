"""The conversation index: BM25 over one user's raw conversation (L0), caught up with L0 when it is searched.

Why: ``conversations/search`` used to read the user's whole L0 and score it in Python on every query, so its cost
grew with everything the user ever said (``bench/conversation_search.py`` measures both). The index answers from
FTS5 and reads only the L0 lines appended since the last search.

Why on search and not on write: the stream worker writes L0 and its capture path must stay fast; the API replica
that searches catches up instead, so a search costs an index lookup plus the new lines, and a user who never
searches costs nothing.

What it holds: one SQLite file per user, ``<user>/.conversations.sqlite`` (stdlib ``sqlite3``, FTS5, WAL): each
message's L0 line, day, line number, session and scope (:attr:`~mnemoflow.memory.l0.L0Message.scope`: a search
names the scopes its caller may see and gets no other message, docs/concepts/scopes.md); its lexical terms in
FTS5 (:func:`mnemoflow.lexical.analysed`, the atom index's terms, so 徒步 matches inside 我喜欢在山里徒步旅行); and
per day file a cursor: the file's id
and the bytes and lines indexed so far. It lives in the user's folder so that an erase, which removes the folder,
removes it too, and never creates that folder (L0 does); its dot name keeps it out of ``list_dir``, hence out of
export and every walk of user folders. It is a cache: a missing, corrupt or older-schema file is built again from L0.

Rewrites: L0 is append-only, but a day file can be removed (retention) or replaced (an import writes it whole). A
day whose file is gone loses its rows; one whose file id changed, or that shrank below its cursor, is indexed again
from its start. So a message no longer in L0 is never returned.

Concurrency: API replicas in several processes may catch up the same user at once. Each day is caught up in its
own ``BEGIN IMMEDIATE`` transaction that reads the day's cursor again inside it, so a line is indexed once, and a
rebuild holds the write lock one day at a time. An erase may remove the folder while a search writes; an
:class:`~mnemoflow.governance.fence.ErasureFence` over the index files reads the tombstone after the search and, if
an erase ran meanwhile, removes them and answers nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

from mnemoflow.errors import StorageError
from mnemoflow.governance.fence import ErasureFence, UserErased
from mnemoflow.lexical import analysed, fts5_any
from mnemoflow.memory.l0 import L0Message
from mnemoflow.ports import FileStore
from mnemoflow.ports.files import FileStat, Tail
from mnemoflow.storage import Layout

INDEX_FILE = ".conversations.sqlite"
SCHEMA_VERSION = 2
"""Kept in ``pragma user_version``; a file with another value is emptied and built again from L0. 2: a scope per
message."""

_DDL = """
drop table if exists days;
drop table if exists messages;
drop table if exists messages_fts;
create table days(name text primary key, file_id text not null, offset integer not null, lines integer not null);
create table messages(
    rid integer primary key, day text not null, line integer not null, session text not null, raw text not null,
    scope text not null
);
create index messages_day on messages(day);
create virtual table messages_fts using fts5(body, tokenize='unicode61 remove_diacritics 2');
"""

_SEARCH = """
select m.raw, -bm25(messages_fts) from messages_fts join messages m on m.rid = messages_fts.rowid
where messages_fts match :match and (:session is null or m.session = :session)
and (:scopes is null or m.scope in (select value from json_each(:scopes)))
order by bm25(messages_fts), m.day, m.line limit :limit
"""


@dataclass(frozen=True, slots=True)
class _Cursor:
    """How far a day file is indexed: which file (its id), up to which byte, and how many lines."""

    file_id: str
    offset: int
    lines: int

    def continues(self, tail: Tail) -> bool:
        """True when ``tail`` is the same file, grown or as it was: indexing it on from here is enough."""
        return tail.file_id == self.file_id and tail.size >= self.offset


def _wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode (it stays so), retrying while another process holds it. Switching the mode needs
    the file to itself, and a switch that meets another connection's lock can fail with "database is locked"
    rather than wait (two processes' first searches of one user, under load, in a unit test). A file already in
    WAL mode is only read."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if conn.execute("pragma journal_mode").fetchone()[0] != "wal":
                conn.execute("pragma journal_mode=wal")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the write lock at its start, so what it reads inside is what it updates."""
    conn.execute("begin immediate")
    try:
        yield
    except BaseException:
        conn.execute("rollback")
        raise
    conn.execute("commit")


class ConversationIndex:
    """Searches one user's L0 through their index file, catching it up first (see the module doc).

    Holds no connection: a search opens the user's file and closes it, so no process keeps an erased user's file
    open, nor one file per user it ever served."""

    def __init__(self, files: FileStore, busy_timeout_s: float = 30.0) -> None:
        self._files = files
        self._busy_timeout_s = busy_timeout_s

    @staticmethod
    def paths(tenant: str, user: str) -> tuple[str, str, str]:
        """The index file and its WAL companions, relative to the FileStore root."""
        base = f"{Layout.user_dir(tenant, user)}/{INDEX_FILE}"
        return base, f"{base}-wal", f"{base}-shm"

    def search(
        self,
        tenant: str,
        user: str,
        query: str,
        limit: int,
        session: str | None = None,
        visible: Sequence[str] | None = None,
    ) -> list[tuple[L0Message, float]]:
        """The ``limit`` best messages for ``query`` by BM25 (scores positive, best first, L0 order on ties), of the
        ``visible`` scopes only (None: every scope), filtered in the query, before the limit."""
        match = fts5_any(query)
        folder = Layout.conversations_dir(tenant, user)
        days = {n: stat for n, stat in self._files.stat_dir(folder).items() if n.endswith(".jsonl")}
        if not match or not days:
            return []
        fence = ErasureFence(self._files, tenant, user, self.paths(tenant, user))
        try:
            scopes = None if visible is None else json.dumps(list(visible))
            params: dict[str, object] = {"match": match, "session": session, "limit": limit, "scopes": scopes}
            rows = self._rows(tenant, user, days, params)
            fence.check()
        except UserErased:
            return []
        except sqlite3.Error as exc:
            if not self._files.exists(Layout.user_dir(tenant, user)):  # erased while searching: nothing to find
                return []
            raise StorageError(f"conversation index of {tenant}/{user}: {exc}") from exc
        return [(L0Message.model_validate_json(raw), score) for raw, score in rows]

    def _rows(
        self, tenant: str, user: str, days: dict[str, FileStat], params: dict[str, object]
    ) -> list[tuple[str, float]]:
        try:
            return self._query(tenant, user, days, params)
        except sqlite3.OperationalError:  # locked past the timeout, or the folder is gone: not the file's fault
            raise
        except sqlite3.DatabaseError:  # not a database, or malformed: a cache, so it is built again from L0
            for path in self.paths(tenant, user):
                self._files.remove(path)
        return self._query(tenant, user, days, params)

    def _query(
        self, tenant: str, user: str, days: dict[str, FileStat], params: dict[str, object]
    ) -> list[tuple[str, float]]:
        with closing(self._connect(tenant, user)) as conn:
            self._catch_up(conn, Layout.conversations_dir(tenant, user), days)
            return [(raw, float(score)) for raw, score in conn.execute(_SEARCH, params)]

    def _connect(self, tenant: str, user: str) -> sqlite3.Connection:
        """Open the user's index, creating or rebuilding its tables when the schema is not this one's. A store
        without a local disk gets a throwaway in-memory index per search: a scan's cost, the same answers."""
        root = getattr(self._files, "root", None)
        where = str(root / self.paths(tenant, user)[0]) if isinstance(root, Path) else ":memory:"
        conn = sqlite3.connect(where, timeout=self._busy_timeout_s, isolation_level=None)
        try:
            _wal(conn, self._busy_timeout_s)
            conn.execute("pragma synchronous=normal")  # a cache: a lost last commit is caught up again
            if conn.execute("pragma user_version").fetchone()[0] != SCHEMA_VERSION:
                with _immediate(conn):
                    if conn.execute("pragma user_version").fetchone()[0] != SCHEMA_VERSION:
                        for statement in filter(str.strip, _DDL.split(";")):
                            conn.execute(statement)
                        conn.execute(f"pragma user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _catch_up(self, conn: sqlite3.Connection, folder: str, days: dict[str, FileStat]) -> None:
        """Index what L0 gained since the last search. A day file whose id and size are its cursor's is not even
        opened; the others are read from their cursor on and written one day per transaction."""
        known = {
            name: _Cursor(file_id, offset, lines)
            for name, file_id, offset, lines in conn.execute("select name, file_id, offset, lines from days")
        }
        for name in sorted(set(known) - set(days)):  # removed from L0 (retention) since the last search
            with _immediate(conn):
                _drop_day(conn, name)
        for name, stat in days.items():
            cursor = known.get(name)
            if cursor is not None and cursor.file_id == stat.file_id and cursor.offset == stat.size:
                continue
            tail = self._files.read_tail(f"{folder}/{name}", cursor.offset if cursor else 0)
            if cursor is not None and tail is not None and cursor.continues(tail) and not tail.lines:
                continue
            with _immediate(conn):
                self._index_day(conn, f"{folder}/{name}", name, cursor, tail)

    def _index_day(
        self, conn: sqlite3.Connection, path: str, name: str, seen: _Cursor | None, tail: Tail | None
    ) -> None:
        """Inside the write transaction: the cursor is read again (another process may have caught this day up
        since ``seen``), and only the lines past it are indexed."""
        row = conn.execute("select file_id, offset, lines from days where name = ?", (name,)).fetchone()
        cursor = _Cursor(*row) if row else None
        if cursor != seen:
            tail = self._files.read_tail(path, cursor.offset if cursor else 0)
        if cursor is not None and (tail is None or not cursor.continues(tail)):  # removed, replaced or cut
            _drop_day(conn, name)
            cursor, tail = None, self._files.read_tail(path, 0)
        if tail is None:
            return
        first = cursor.lines if cursor else 0
        (rid,) = conn.execute("select coalesce(max(rid), 0) + 1 from messages").fetchone()
        rows, bodies = [], []
        for i, line in enumerate(tail.lines):
            message = L0Message.model_validate_json(line)
            rows.append((rid + i, name, first + i, message.session, line, message.scope))
            bodies.append((rid + i, analysed(message.content)))
        conn.executemany("insert into messages(rid, day, line, session, raw, scope) values (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("insert into messages_fts(rowid, body) values (?, ?)", bodies)
        conn.execute(
            "insert or replace into days(name, file_id, offset, lines) values (?, ?, ?, ?)",
            (name, tail.file_id, tail.end, first + len(tail.lines)),
        )


def _drop_day(conn: sqlite3.Connection, name: str) -> None:
    conn.execute("delete from messages_fts where rowid in (select rid from messages where day = ?)", (name,))
    conn.execute("delete from messages where day = ?", (name,))
    conn.execute("delete from days where name = ?", (name,))
