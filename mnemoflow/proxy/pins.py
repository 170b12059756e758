"""The recall block each user message of a session was given, kept so that every later request gives it the same.

Why: an upstream's prefix cache serves a prompt again only up to its first changed token. Recall's block goes at
the head of the latest user message; if a later request recalled again (the user's memory changed during a tool
loop) or dropped the block from a message that is no longer the latest (the next user turn), the prompt would
change at that message, early in the array, and everything after it would be computed again at every step: the
proxy measured 7 % prefix reuse against 69 % for the same requests sent directly. Pinned, a user message carries
one block for the rest of the session, and the prompt only grows, as the agent's own array does.

A file per session (``proxy-recall.json`` in its folder), read through an LRU: another replica, or this one after
a restart, injects the same bytes. A pin is the viewer's (an agent's private memories never reach a prompt sent as
another agent); a session keeps its latest :data:`MAX_PINS`, so an older message loses its block (its cached prefix
with it) only after that many user turns. A block is at most recall's ``max_prepend_chars`` (2,400 by default), so
the LRU of 256 sessions holds at most ~40 MB (twice that in Chinese), and usually a few.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel, ValidationError

from mnemoflow.lru import LRU
from mnemoflow.ports.files import FileStore
from mnemoflow.scopes import Viewer
from mnemoflow.storage import Layout

MAX_PINS = 64


class Pin(BaseModel):
    turn: str
    """The user message's :func:`~mnemoflow.offload.messages.fingerprint`."""
    viewer: str
    text: str


class Pins(BaseModel):
    pins: list[Pin] = []


def viewer_key(viewer: Viewer) -> str:
    return ",".join(viewer.scopes())


class RecallPins:
    FILE = "proxy-recall.json"

    def __init__(self, files: FileStore, capacity: int = 256) -> None:
        self._files = files
        self._cache: LRU[tuple[str, str], Pins] = LRU(capacity)

    def _path(self, tenant: str, session: str) -> str:
        return f"{Layout.session_dir(tenant, session)}/{self.FILE}"

    def _load(self, key: tuple[str, str]) -> Pins:
        raw = self._files.read_bytes(self._path(*key))
        try:
            return Pins.model_validate_json(raw) if raw else Pins()
        except ValidationError:
            return Pins()  # a damaged file costs one break of the cached prefix, nothing else

    def of(self, tenant: str, session: str, viewer: Viewer) -> dict[str, str]:
        """The blocks ``viewer``'s requests in ``session`` gave each user message, by its fingerprint."""
        who = viewer_key(viewer)
        return {p.turn: p.text for p in self._cache.get_or_load((tenant, session), self._load).pins if p.viewer == who}

    def pin(self, tenant: str, session: str, viewer: Viewer, blocks: Mapping[str, str]) -> None:
        """Keep ``blocks`` (fingerprint → text) for ``viewer``; a message pinned already keeps its first block."""
        key, who = (tenant, session), viewer_key(viewer)
        kept = self._cache.get_or_load(key, self._load)
        known = {(p.turn, p.viewer) for p in kept.pins}
        new = [Pin(turn=t, viewer=who, text=x) for t, x in blocks.items() if (t, who) not in known]
        if not new:
            return
        pins = Pins(pins=[*kept.pins, *new][-MAX_PINS:])
        self._files.write_atomic(self._path(*key), json.dumps(pins.model_dump(), ensure_ascii=False).encode())
        self._cache.put(key, pins)
