"""The erase fence: a user's derived files (scenes, persona, curation state) never outlive an erase that ran
while they were being written.

Why: the curator (a Ray actor) and the eraser (the extractor deployment) are different processes, and a scene pass
takes seconds of model calls. An erase that lands in the middle removes the user's folder; the pass's next write
(a scene, its backup, the persona) would bring the folder back with text of the erased user. A lock across the two
planes would make an erase wait for a model; the fence needs none.

How: the curator opens a fence when an operation begins, which reads the user's tombstone. Every write through it
first requires the user's folder to exist (the curator never creates a user: the folder comes from L0), then
writes, then reads the tombstone again. If it changed since the fence opened, or it belongs to an erase that has
not finished (``Tombstone.done``), an erase ran meanwhile: the fence removes the derived files and raises
:class:`UserErased`, which the curator treats as "nothing to do". Checking after the write is what closes the
race: a write whose check saw neither happened before the erase put its stone, so before the erase removed the
folder, and the erase took it. Only derived files are removed, never L0 or records: a user who came back after a
finished erase keeps what they said since.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from mnemoflow.governance.tombstones import Tombstones
from mnemoflow.ports import FileStore
from mnemoflow.ports.files import FileStat, Tail
from mnemoflow.storage import Layout


class UserErased(Exception):
    """The user was erased while (or before) the fenced operation wrote. Not a MnemoflowError on purpose: the
    scene pass and the persona turn those into retryable failures, and there is nothing to retry."""


class ErasureFence:
    """A FileStore for one operation on one user's derived files (``derived``: paths removed if an erase lands)."""

    def __init__(self, files: FileStore, tenant: str, user: str, derived: Iterable[str]) -> None:
        self._files, self._tenant, self._user = files, tenant, user
        self._user_dir = Layout.user_dir(tenant, user)
        self._derived = tuple(derived)
        self._tombstones = Tombstones(files)
        self._seen = self._tombstones.get(tenant, "users", user)

    @property
    def root(self) -> Path | None:
        """The local root when there is one (scene paths are confined against it)."""
        root = getattr(self._files, "root", None)
        return root if isinstance(root, Path) else None

    def _before_write(self) -> None:
        if not self._files.exists(self._user_dir):
            raise UserErased(f"{self._tenant}/{self._user} has no folder (erased)")

    def check(self) -> None:
        """Raise :class:`UserErased`, removing the derived files, if an erase ran since the fence opened or is
        running now. The writes below call it after each write; a writer the fence does not see (the conversation
        index is a SQLite file) calls it after its own writes."""
        stone = self._tombstones.get(self._tenant, "users", self._user)
        if stone != self._seen or (stone is not None and not stone.done):
            for path in self._derived:
                self._files.remove(path)
            raise UserErased(f"{self._tenant}/{self._user} was erased during the operation; its writes are removed")

    # --- FileStore: writes are fenced, reads pass through ---------------------------------------------------

    def append_lines(self, path: str, lines: list[str]) -> None:
        self._before_write()
        self._files.append_lines(path, lines)
        self.check()

    def write_atomic(self, path: str, data: bytes) -> None:
        self._before_write()
        self._files.write_atomic(path, data)
        self.check()

    def write_atomic_many(self, files: Mapping[str, bytes]) -> None:
        self._before_write()
        self._files.write_atomic_many(files)
        self.check()

    def remove(self, path: str) -> int:
        return self._files.remove(path)

    def repair_tail(self, path: str) -> bool:
        return self._files.repair_tail(path)

    def read_tail(self, path: str, offset: int) -> Tail | None:
        return self._files.read_tail(path, offset)

    def group_commit(self) -> AbstractContextManager[None]:
        return self._files.group_commit()

    def read_lines(self, path: str) -> Iterator[str]:
        return self._files.read_lines(path)

    def read_bytes(self, path: str) -> bytes | None:
        return self._files.read_bytes(path)

    def exists(self, path: str) -> bool:
        return self._files.exists(path)

    def list_dir(self, path: str) -> list[str]:
        return self._files.list_dir(path)

    def stat_dir(self, path: str) -> dict[str, FileStat]:
        return self._files.stat_dir(path)
