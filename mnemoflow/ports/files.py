"""FileStore port: the human-readable layers live in files, addressed by paths relative to one root.

Contract: ``append_lines`` appends whole lines in one write, so a crash leaves at most one torn last line,
which ``read_lines`` drops (and ``repair_tail`` truncates). ``write_atomic`` replaces a file all at once
(temp file + rename), so readers see the old or the new bytes, never a mix. Paths never leave the root.

Durability: a write is on disk when it returns (the file's bytes, and its folder's entry when the write created
or renamed one), so a machine crash cannot lose what a caller already counts as done. Inside
``with files.group_commit():`` appends are made durable when the block exits instead, each file and folder
once however many writes touched it: the stream worker opens one group per Kafka batch, before the batch's
offsets are committed, so a batch costs one round of fsyncs, not one per line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class FileStat:
    """A file's identity and size: ``file_id`` as in :class:`Tail`."""

    file_id: str
    size: int


@dataclass(frozen=True, slots=True)
class Tail:
    """What :meth:`FileStore.read_tail` found: the complete lines from an offset on, and how to tell the file again.

    ``file_id`` stays the same while the file is only appended to and changes when it is replaced (``write_atomic``
    renames a new file over it) or removed and made anew; ``size`` below a reader's offset means it was cut. A reader
    that keeps (file_id, end) can therefore read only what was appended since, and knows when to read it all again.
    """

    file_id: str
    size: int
    lines: list[str]
    end: int
    """The byte offset just past the last complete line read: where the next read starts."""


class FileStore(Protocol):
    def append_lines(self, path: str, lines: list[str]) -> None:
        """Append ``lines`` (no newlines inside) to ``path``, creating folders as needed."""
        ...

    def read_lines(self, path: str) -> Iterator[str]:
        """Complete lines of ``path`` in order; nothing if it does not exist; a torn last line is skipped."""
        ...

    def read_tail(self, path: str, offset: int) -> Tail | None:
        """The complete lines of ``path`` from byte ``offset`` (a line start) on; None if it does not exist. A torn
        last line is left for a later read, as in :meth:`read_lines`."""
        ...

    def repair_tail(self, path: str) -> bool:
        """Truncate a torn last line left by a crash; True if something was cut."""
        ...

    def write_atomic(self, path: str, data: bytes) -> None: ...

    def write_atomic_many(self, files: Mapping[str, bytes]) -> None:
        """``write_atomic`` for several files, cheaper than one by one: every file's bytes are on disk before
        any of them takes its name, so none can be found empty after a crash."""
        ...

    def group_commit(self) -> AbstractContextManager[None]:
        """Defer durability of the writes made in the block (in this thread or task) to its exit, where each
        file and folder they touched is synced once. Nested blocks join the outer one. The exit syncs even
        when the block raised, so a retry that skips what was already written does not skip its sync."""
        ...

    def read_bytes(self, path: str) -> bytes | None:
        """The file's bytes, or None if it does not exist."""
        ...

    def exists(self, path: str) -> bool: ...

    def list_dir(self, path: str) -> list[str]:
        """Names in a folder, sorted; empty if it does not exist."""
        ...

    def stat_dir(self, path: str) -> dict[str, FileStat]:
        """The files of a folder (the names :meth:`list_dir` gives) with their id and size; empty if it does not
        exist. One call for a folder, so a reader can tell which files changed without opening each."""
        ...

    def remove(self, path: str) -> int:
        """Delete a file, or a folder with everything in it (erase, retention); durable when it returns.
        Returns how many files went; 0 if nothing was there."""
        ...
