"""Where recall reads persona and scene navigation from: a small port, with a file-based default.

Why a port: L2 scenes and L3 persona are written by other modules (``memory/scenes*``, ``memory/persona*``);
recall only needs two strings per user. :class:`FileContextSource` reads ``persona.md`` and the META headers of
``scenes/*.md`` directly, tolerating files it does not understand; the L2/L3 code can supply its own source.
"""

from __future__ import annotations

import re
from typing import Protocol

from mnemoflow.memory.l1_layout import L1Layout
from mnemoflow.ports import FileStore

_NAV_START = re.compile(r"^\s*(<scene-navigation>|#+[^\n]*scene navigation)", re.IGNORECASE | re.MULTILINE)
_META = re.compile(r"^\s*[-*]?\s*(summary|heat|updated)\s*[:=]\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


class ContextSource(Protocol):
    def persona(self, tenant: str, user: str) -> str:
        """The user's persona text without any navigation block; empty when there is none."""
        ...

    def navigation(self, tenant: str, user: str) -> str:
        """One line per live scene (path, summary), hottest first; empty when there are none."""
        ...


class FileContextSource:
    """Reads the L2/L3 files of DESIGN §5 through the FileStore."""

    def __init__(self, files: FileStore, max_scenes: int = 15) -> None:
        self._files, self._max = files, max_scenes

    def persona(self, tenant: str, user: str) -> str:
        raw = self._files.read_bytes(L1Layout.persona(tenant, user))
        if not raw:
            return ""
        text = raw.decode(errors="replace")
        nav = _NAV_START.search(text)
        body = (text[: nav.start()] if nav else text).strip()
        return body.removesuffix("---").rstrip()  # persona.py writes a rule before its navigation header

    def navigation(self, tenant: str, user: str) -> str:
        folder = L1Layout.scenes_dir(tenant, user)
        entries: list[tuple[float, str]] = []
        for name in self._files.list_dir(folder):
            if not name.endswith(".md"):
                continue
            raw = self._files.read_bytes(f"{folder}/{name}") or b""
            head = raw[:2000].decode(errors="replace")
            if "[DELETED]" in head:
                continue
            meta = {k.lower(): v for k, v in _META.findall(head)}
            try:
                heat = float(meta.get("heat", "0"))
            except ValueError:
                heat = 0.0
            summary = meta.get("summary", "")
            entries.append((heat, f"- {folder}/{name}" + (f": {summary}" if summary else "")))
        entries.sort(key=lambda e: (-e[0], e[1]))
        return "\n".join(line for _, line in entries[: self._max])
