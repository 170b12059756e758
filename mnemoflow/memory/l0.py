"""L0: the raw conversation, one append-only JSONL file per user and day.

Writes are idempotent by message id: Kafka delivers at least once, so a replayed event whose id is already in
its day file is skipped. The day comes from the message's own timestamp (UTC), so a replay always looks in the
same file. Each writer keeps the ids of the files it touched in a bounded LRU; a writer that loses ownership
of a partition must call :meth:`L0Writer.forget` so it never trusts a stale cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import NotRequired

from pydantic import AwareDatetime, BaseModel, ConfigDict, TypeAdapter
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from mnemoflow.events import TurnEvent
from mnemoflow.ids import SafeId
from mnemoflow.lru import LRU
from mnemoflow.ports import FileStore
from mnemoflow.scopes import ScopeKind, own_scope, requested_scope
from mnemoflow.storage import Layout


class L0Message(BaseModel):
    """One line of ``conversations/YYYY-MM-DD.jsonl``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: SafeId
    session: SafeId
    role: str
    content: str
    ts: AwareDatetime
    name: str | None = None
    agent: SafeId | None = None
    team: SafeId | None = None
    visibility: ScopeKind | None = None
    """The three only when the client sent them: a line of a client that names no agent is as it always was."""

    @property
    def scope(self) -> str:
        """Who may read this message: what it asked for, else its agent's (the raw conversation belongs to the
        agent that had it), else its team's, else shared (the default agent, and every line from before scopes)."""
        if self.visibility is not None:
            return requested_scope(self.visibility, self.agent, self.team)
        return own_scope(self.agent, self.team)


class _Line(TypedDict):
    """:class:`L0Message` as the writer serialises it (same JSON, byte for byte: a test holds them together).

    A model instance per line cost the worker a third of its CPU; a TypedDict dump skips building one and
    validating again what the event already validated."""

    id: str
    session: str
    role: str
    content: str
    ts: datetime
    name: NotRequired[str]
    agent: NotRequired[str]
    team: NotRequired[str]
    visibility: NotRequired[str]


_TO_JSON = TypeAdapter(_Line).serializer.to_json
"""The adapter's serializer itself: ``TypeAdapter.dump_json`` only forwards its defaults to it, once per line."""


def l0_line(event: TurnEvent) -> str:
    """The L0 JSON line of a validated turn."""
    line: _Line = {
        "id": event.message_id,
        "session": event.session,
        "role": event.role,
        "content": event.content,
        "ts": event.ts,
    }
    if event.name is not None:
        line["name"] = event.name
    if event.agent is not None:
        line["agent"] = event.agent
    if event.team is not None:
        line["team"] = event.team
    if event.visibility is not None:
        line["visibility"] = event.visibility
    return _TO_JSON(line).decode()


class _Id(TypedDict):
    """What the writer reads back of a line: its id (a day file is read whole when first touched)."""

    id: str


_IDS = TypeAdapter(_Id)


class L0Writer:
    def __init__(self, files: FileStore, cache_files: int = 4096) -> None:
        self._files = files
        self._ids: LRU[str, set[str]] = LRU(cache_files)

    def _load_ids(self, path: str) -> set[str]:
        self._files.repair_tail(path)
        return {_IDS.validate_json(line)["id"] for line in self._files.read_lines(path)}

    def write(self, events: Iterable[TurnEvent]) -> tuple[int, int]:
        """Append the events not yet in L0, in order; returns (written, skipped as already applied).

        The cached ids of a day file gain an event's id before its line is on disk: if anything fails before that
        file's append (reading another day, serialising, appending), the ids of every file not yet appended are
        dropped, so the retry reloads them from disk instead of skipping events that were never written."""
        batches: dict[str, list[str]] = {}
        skipped = written = 0
        done: set[str] = set()
        # A batch holds few users and days: each day file's path, lines and ids are looked up once per batch.
        days: dict[tuple[str, str, date], tuple[list[str], set[str]]] = {}
        try:
            for event in events:
                where = (event.tenant, event.user, event.ts.date())
                day = days.get(where)
                if day is None:
                    path = Layout.conversation_day(*where)
                    day = days[where] = (batches.setdefault(path, []), self._ids.get_or_load(path, self._load_ids))
                lines, ids = day
                if event.message_id in ids:
                    skipped += 1
                    continue
                ids.add(event.message_id)
                lines.append(l0_line(event))
            for path, lines in batches.items():
                if lines:
                    self._files.append_lines(path, lines)
                    written += len(lines)
                done.add(path)
        except Exception:
            for path in batches.keys() - done:
                self._ids.pop(path)
            raise
        return written, skipped

    def forget(self) -> None:
        self._ids.clear()


def read_l0(
    files: FileStore, tenant: str, user: str, day: date | None = None, limit: int = 1000, offset: int = 0
) -> list[L0Message]:
    """A user's L0 messages in stored order, across days (oldest first) or for one day."""
    folder = Layout.conversations_dir(tenant, user)
    days = [day.isoformat() + ".jsonl"] if day else [n for n in files.list_dir(folder) if n.endswith(".jsonl")]
    out: list[L0Message] = []
    seen = 0
    for name in days:
        for line in files.read_lines(f"{folder}/{name}"):
            if seen >= offset:
                out.append(L0Message.model_validate_json(line))
                if len(out) >= limit:
                    return out
            seen += 1
    return out
