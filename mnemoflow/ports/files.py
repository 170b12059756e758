"""FileStore port: the human-readable layers live in files, addressed by paths relative to one root.

Contract: ``append_lines`` appends whole lines in one write, so a crash leaves at most one torn last line,
which ``read_lines`` drops (and ``repair_tail`` truncates). ``write_atomic`` replaces a file all at once
(temp file + rename), so readers see the old or the new bytes, never a mix. Paths never leave the root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol


class FileStore(Protocol):
    def append_lines(self, path: str, lines: list[str]) -> None:
        """Append ``lines`` (no newlines inside) to ``path``, creating folders as needed."""
        ...

    def read_lines(self, path: str) -> Iterator[str]:
        """Complete lines of ``path`` in order; nothing if it does not exist; a torn last line is skipped."""
        ...

    def repair_tail(self, path: str) -> bool:
        """Truncate a torn last line left by a crash; True if something was cut."""
        ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or None if it does not exist."""
        ...

    def exists(self, path: str) -> bool: ...

    def list_dir(self, path: str) -> list[str]:
        """Names in a folder, sorted; empty if it does not exist."""
        ...
