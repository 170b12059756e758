"""Per-user L1 state in files: the extraction cursor and the trigger state, each written atomically.

Why files: docs/DESIGN.md §4 makes files the source of truth; actor and table memory are caches. Why two files: the
cursor is written by the pipeline after atoms are stored, the trigger state by the scheduler, possibly in
another process; separate files never overwrite each other's fields.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.memory.l1.triggers import TriggerState
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED
from mnemoflow.storage import Layout


class L1Cursor(BaseModel):
    """How many lines of each L0 day file L1 has consumed.

    Why per day file and not one timestamp: L0 day files are append-only, and a late message lands in the day
    of its own timestamp, possibly an older file; a line count per file sees it, a timestamp cursor skips it.
    """

    model_config = ConfigDict(frozen=True)

    done: dict[str, int] = Field(default_factory=dict)
    last_scene: str = ""
    passes: int = 0
    scenes: dict[str, str] = Field(default_factory=dict, exclude_if=lambda d: not d)
    """The last scene of each named author (by its own scope, ``agent:coder``), handed to that author's next
    extraction only: a scene name is words of a conversation, and one agent's must not reach another's prompt. The
    default agent's is ``last_scene``, as in cursors written before scopes (and written the same without agents)."""

    def scene_of(self, author: str) -> str:
        """The previous scene of an author (its own scope; ``shared`` is the default agent)."""
        return self.last_scene if author == SHARED else self.scenes.get(author, "")

    def advanced(self, done: dict[str, int], scenes: Mapping[str, str | None] | None = None) -> L1Cursor:
        """The cursor past a window; ``scenes``: each author's last scene in it (None keeps the previous one)."""
        merged = {**self.done, **{d: max(n, self.done.get(d, 0)) for d, n in done.items()}}
        named = {a: s for a, s in (scenes or {}).items() if s is not None}
        last = named.pop(SHARED, self.last_scene)
        return L1Cursor(done=merged, last_scene=last, passes=self.passes + 1, scenes={**self.scenes, **named})


def load_cursor(files: FileStore, tenant: str, user: str) -> L1Cursor:
    raw = files.read_bytes(Layout.l1_cursor(tenant, user))
    return L1Cursor.model_validate_json(raw) if raw else L1Cursor()


def save_cursor(files: FileStore, tenant: str, user: str, cursor: L1Cursor) -> None:
    files.write_atomic(Layout.l1_cursor(tenant, user), cursor.model_dump_json().encode())


def load_triggers(files: FileStore, tenant: str, user: str) -> TriggerState:
    raw = files.read_bytes(Layout.l1_triggers(tenant, user))
    return TriggerState.model_validate_json(raw) if raw else TriggerState()


def save_triggers(files: FileStore, states: Mapping[tuple[str, str], TriggerState]) -> None:
    """Write the trigger states of a batch of ``(tenant, user)`` at once (made durable together)."""
    files.write_atomic_many({Layout.l1_triggers(*k): s.model_dump_json().encode() for k, s in states.items()})
