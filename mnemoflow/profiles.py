"""Who a user is, for a person reading the dashboard: the display name their own turns carry in L0.

A turn may name its speaker (OpenAI's message ``name``; a LoCoMo replay names every turn) and L0 keeps that
``name``. A user's display name is the name on the last of their own messages (``role == "user"``) that has one,
looked for in the newest day files first and in at most ``days`` of them. L0 stays the only record: erase,
retention and import need nothing more, and the single writer of L0 writes nothing new.

Reading is cheap after the first time: :class:`DisplayNames` keeps, per user and day file, the file's id, how far
it read and the name found there, so a lookup lists the user's conversations folder once (one ``stat_dir``) and
reads only the lines appended since; a day file replaced or cut is read again from its start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NotRequired

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from mnemoflow.lru import LRU
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout

DAYS = 31
"""Day files looked through, newest first, before a user is taken to have no name."""
USERS = 16384
"""Users whose day-file cursors a :class:`DisplayNames` keeps (least recently looked up go first)."""


class _Speaker(TypedDict):
    """What a lookup reads of an L0 line (the other fields are ignored)."""

    role: str
    name: NotRequired[str]


_SPEAKER = TypeAdapter(_Speaker)


@dataclass(frozen=True, slots=True)
class _Read:
    """How far one day file was read, and the user's last name in it up to there (None: no named own turn)."""

    file_id: str
    end: int
    name: str | None


def _last_name(lines: Iterable[str], name: str | None) -> str | None:
    for line in lines:
        if '"name"' not in line:  # most lines carry no name: skip parsing them
            continue
        try:
            speaker = _SPEAKER.validate_json(line)
        except ValidationError:
            continue
        if speaker["role"] == "user" and (said := speaker.get("name", "").strip()):
            name = said
        # the other speaker's turns (role "assistant") carry their own name, not this user's
    return name


class DisplayNames:
    """A user's display name from their L0 (see the module doc). Safe to share between threads."""

    def __init__(self, files: FileStore, days: int = DAYS, users: int = USERS) -> None:
        if days < 1:
            raise ValueError("days must be at least 1")
        self._files, self._days = files, days
        self._read: LRU[tuple[str, str], dict[str, _Read]] = LRU(users)
        self._lock = threading.Lock()

    def of(self, tenant: str, user: str) -> str | None:
        """The user's display name, or None when no own turn of theirs (in the last ``days`` day files) has one."""
        folder = Layout.conversations_dir(tenant, user)
        stats = self._files.stat_dir(folder)
        days = sorted((n for n in stats if n.endswith(".jsonl")), reverse=True)[: self._days]
        with self._lock:
            before = self._read.pop((tenant, user)) or {}
        now: dict[str, _Read] = {}  # only the files still there: an erased user's name is not kept
        found: str | None = None
        for day in days:
            stat, seen = stats[day], before.get(day)
            if seen is None or seen.file_id != stat.file_id or seen.end != stat.size:
                seen = self._catch_up(f"{folder}/{day}", seen)
                if seen is None:  # removed since the folder was listed
                    continue
            now[day] = seen
            if seen.name is not None:
                found = seen.name
                break
        if now:
            with self._lock:
                self._read.put((tenant, user), now)
        return found

    def of_many(self, tenant: str, users: Iterable[str]) -> dict[str, str]:
        """The display names of those of ``users`` that have one."""
        return {user: name for user in users if (name := self.of(tenant, user)) is not None}

    def _catch_up(self, path: str, seen: _Read | None) -> _Read | None:
        """Read what ``path`` gained since ``seen``: the lines appended after it, or the whole file when it was
        replaced or cut since (its id changed, or it is shorter than what was read)."""
        tail = self._files.read_tail(path, seen.end if seen is not None else 0)
        if tail is None:
            return None
        if seen is not None and (tail.file_id != seen.file_id or tail.size < seen.end):
            return self._catch_up(path, None)
        return _Read(tail.file_id, tail.end, _last_name(tail.lines, seen.name if seen is not None else None))
