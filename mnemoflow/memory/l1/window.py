"""Which L0 messages one L1 pass reads: the whole backlog after the cursor, cut into windows.

Each window holds up to ``new_size`` qualified messages to extract from and up to ``background`` qualified
messages just before them as context (docs/tdam-spec.md §3.3: 10 / 5). Unlike the original (§9.4), nothing is skipped:
the backlog is cut into consecutive windows and the cursor passes a message only with the window that read it.

A user served by several agents has their conversations interleaved in L0. :func:`split_by_author` cuts a window
into one part per author (agent and team), each with that author's background only, and each part is extracted on
its own: no extraction call reads two agents' conversations together, so no atom can carry one agent's private
words into another's memory (docs/concepts/scopes.md). A window of one author is one part: the window itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.state import L1Cursor
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout

_SYMBOLS_ONLY = re.compile(r"^[^\w\s]{1,5}$", re.UNICODE)
_NOISE_PREFIXES = ("A new session was started via", "✅ New session started", "Pre-compaction memory flush")
_NOISE = {"(session bootstrap)", "NO_REPLY"}


def qualifies(msg: L0Message) -> bool:
    """docs/tdam-spec.md §3.3 step 1: drop empty, slash commands, framework noise, symbol-only and question-mark-only
    text."""
    text = msg.content.strip()
    if not text or text.startswith("/") or text in _NOISE or text.startswith(_NOISE_PREFIXES):
        return False
    return not (_SYMBOLS_ONLY.match(text) or set(text) <= {"?", "？"})


@dataclass(frozen=True, slots=True)
class Window:
    """Messages of one extraction call and the cursor position after it (``done`` lines per day file)."""

    new: list[L0Message]
    background: list[L0Message]
    done: dict[str, int] = field(default_factory=dict)
    consumed: int = 0

    @property
    def new_ids(self) -> set[str]:
        return {m.id for m in self.new}


@dataclass(frozen=True, slots=True)
class Author:
    """Who had a conversation: an agent and its team; neither is the default agent."""

    agent: str | None = None
    team: str | None = None


def author_of(msg: L0Message) -> Author:
    return Author(msg.agent, msg.team)


def split_by_author(window: Window) -> list[tuple[Author, Window]]:
    """The window's parts to extract, one per author of its new messages in order of first appearance, each with
    that author's background messages; none for a window with no new message. ``done`` and ``consumed`` stay the
    whole window's: the cursor moves once all parts are stored."""
    authors = list(dict.fromkeys(author_of(m) for m in window.new))
    if len(authors) == 1 and all(author_of(m) == authors[0] for m in window.background):
        return [(authors[0], window)]
    return [
        (
            a,
            Window(
                new=[m for m in window.new if author_of(m) == a],
                background=[m for m in window.background if author_of(m) == a],
                done=window.done,
                consumed=window.consumed,
            ),
        )
        for a in authors
    ]


def _day_files(files: FileStore, tenant: str, user: str) -> list[tuple[str, list[L0Message]]]:
    folder = Layout.conversations_dir(tenant, user)
    out = []
    for name in files.list_dir(folder):
        if name.endswith(".jsonl"):
            lines = files.read_lines(f"{folder}/{name}")
            out.append((name.removesuffix(".jsonl"), [L0Message.model_validate_json(x) for x in lines]))
    return out


def plan_windows(
    files: FileStore, tenant: str, user: str, cursor: L1Cursor, *, new_size: int = 10, background: int = 5
) -> list[Window]:
    """Windows over every L0 line not yet consumed, oldest day first; empty when nothing is pending.

    A window whose messages are all noise still exists (with ``new`` empty) so the cursor moves past them.
    """
    windows: list[Window] = []
    seen: list[L0Message] = []  # qualified messages before the current window, for background
    new: list[L0Message] = []
    consumed = 0
    done: dict[str, int] = {}

    def cut() -> None:
        nonlocal new, consumed
        windows.append(
            Window(new=new, background=seen[-background:] if background else [], done=dict(done), consumed=consumed)
        )
        seen.extend(new)
        new, consumed = [], 0

    for day, msgs in _day_files(files, tenant, user):
        start = cursor.done.get(day, 0)
        seen.extend(m for m in msgs[:start] if qualifies(m))
        for i, msg in enumerate(msgs[start:], start=start):
            done[day] = i + 1
            consumed += 1
            if qualifies(msg):
                new.append(msg)
                if len(new) >= new_size:
                    cut()
    if consumed:
        cut()
    return windows
