"""FileStore on a local (or shared, mounted) file system, with fsync-backed durability (see the port)."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from mnemoflow.errors import InvalidInput, StorageError
from mnemoflow.ports.files import FileStat, Tail

_group: ContextVar[set[Path] | None] = ContextVar("mnemoflow_group_commit", default=None)
"""Files and folders written in the open group commit of this thread or task (None: no group open)."""

_SYNCFS = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
"""Linux's syncfs(2): one call makes every written file and folder of a file system durable. A batch touches a
file per user (L0) or per session (offload) plus their folders; measured on this project's 2-core ext4 box, 200
appended files took 27-600 ms as 200 fsyncs (the file system commits its journal for each) and 2-9 ms as one
syncfs. Other writers' dirty pages on the same file system are flushed too; that is the price of one commit."""

_SYNCFS_FROM = 4
"""Fewer paths than this are fsynced one by one (cheaper than flushing the whole file system)."""


def _sync(paths: Collection[Path]) -> None:
    """Make files and folders durable (a folder's sync makes its entries durable: new names, renames)."""
    if len(paths) < _SYNCFS_FROM or _SYNCFS is None:
        for path in paths:
            _fsync(path)
        return
    by_device: dict[int, Path] = {}
    for path in paths:
        by_device.setdefault(os.stat(path).st_dev, path)
    for path in by_device.values():
        fd = os.open(path, os.O_RDONLY)
        try:
            if _SYNCFS(fd) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"syncfs: {os.strerror(errno)}", str(path))
        finally:
            os.close(fd)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
"""How ``write_atomic_many`` opens its temporary files (what ``open(path, "wb")`` does, without Python's buffered
file object: a worker writes a trigger state per user and batch)."""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _make_folder(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the folders that gained an entry (to be synced)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    if missing:
        missing[0].mkdir(parents=True, exist_ok=True)
    return [m.parent for m in missing]


class LocalFileStore:
    """Implements :class:`mnemoflow.ports.FileStore` under one root folder.

    ``fsync=False`` skips every fsync: only for throwaway data (a benchmark's comparison run), since a machine
    crash can then lose writes whose Kafka offsets were committed.
    """

    def __init__(self, root: Path | str, fsync: bool = True) -> None:
        self.root = Path(root).resolve()
        self.fsync = fsync
        self._root = str(self.root)
        self._prefix = self._root.rstrip(os.sep) + os.sep

    def _path(self, rel: str) -> Path:
        """Lexical check (``..`` and absolute paths), not ``Path.resolve``: resolving walks every component with
        lstat and was 8% of a worker's CPU (one call per file a batch appends to). Nothing the API accepts can make
        a symlink under the root, so the lexical form is where the file lands."""
        path = os.path.normpath(os.path.join(self._root, rel))
        if path != self._root and not path.startswith(self._prefix):
            raise InvalidInput(f"path {rel!r} leaves the data root")
        return Path(path)

    def _durable(self, paths: Collection[Path]) -> None:
        """Sync ``paths`` now, or when the open group commit exits."""
        if not self.fsync:
            return
        group = _group.get()
        if group is None:
            _sync(paths)
        else:
            group.update(paths)

    @contextmanager
    def group_commit(self) -> Iterator[None]:
        if _group.get() is not None:  # nested: the outer block syncs
            yield
            return
        group: set[Path] = set()
        token = _group.set(group)
        try:
            yield
        finally:
            _group.reset(token)
            try:
                _sync(group)
            except OSError as exc:
                raise StorageError(f"cannot make {len(group)} written files durable: {exc}") from exc

    def append_lines(self, path: str, lines: list[str]) -> None:
        if not lines:
            return
        if any("\n" in line for line in lines):
            raise InvalidInput("a line to append contains a newline")
        target = self._path(path)
        data = ("\n".join(lines) + "\n").encode()
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            touched = [target]
            try:  # the folder exists but for a new user's first write: no stat of every parent per append
                fd = os.open(target, flags, 0o644)
            except FileNotFoundError:
                touched += _make_folder(target.parent)
                fd = os.open(target, flags, 0o644)
            try:
                if os.fstat(fd).st_size == 0:  # new (or emptied) file: its name must be durable too
                    touched.append(target.parent)
                _write_all(fd, data)
            finally:
                os.close(fd)
            self._durable(touched)
        except OSError as exc:
            raise StorageError(f"cannot append to {path}: {exc}") from exc

    def read_lines(self, path: str) -> Iterator[str]:
        target = self._path(path)
        try:
            with target.open("rb") as fh:
                for raw in fh:
                    if raw.endswith(b"\n"):
                        yield raw[:-1].decode()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc

    def read_tail(self, path: str, offset: int) -> Tail | None:
        """The file id is device and inode, from the open file itself, so it names the bytes that were read."""
        target = self._path(path)
        try:
            with target.open("rb") as fh:
                stat = os.fstat(fh.fileno())
                fh.seek(offset)
                data = fh.read() if offset <= stat.st_size else b""
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc
        cut = data.rfind(b"\n") + 1
        lines = data[: cut - 1].decode().split("\n") if cut else []
        return Tail(file_id=f"{stat.st_dev}:{stat.st_ino}", size=stat.st_size, lines=lines, end=offset + cut)

    def repair_tail(self, path: str) -> bool:
        target = self._path(path)
        try:
            with target.open("rb+") as fh:
                size = fh.seek(0, os.SEEK_END)
                if size == 0:
                    return False
                fh.seek(size - 1)
                if fh.read(1) == b"\n":
                    return False
                # Walk back to the last newline; everything after it is a torn write.
                pos = size
                while pos > 0:
                    step = min(65536, pos)
                    fh.seek(pos - step)
                    chunk = fh.read(step)
                    idx = chunk.rfind(b"\n")
                    if idx >= 0:
                        fh.truncate(pos - step + idx + 1)
                        return True
                    pos -= step
                fh.truncate(0)
                return True
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StorageError(f"cannot repair {path}: {exc}") from exc

    def write_atomic(self, path: str, data: bytes) -> None:
        self.write_atomic_many({path: data})

    def write_atomic_many(self, files: Mapping[str, bytes]) -> None:
        targets = {self._path(path): data for path, data in files.items()}
        temps: list[tuple[Path, Path]] = []
        folders: set[Path] = set()
        try:
            for target, data in targets.items():
                tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                temps.append((tmp, target))
                try:  # the folder exists but for a first write: no stat of every parent per file (as append_lines)
                    fd = os.open(tmp, _CREATE_NEW, 0o666)
                except FileNotFoundError:
                    folders.update(_make_folder(target.parent))
                    fd = os.open(tmp, _CREATE_NEW, 0o666)
                try:
                    _write_all(fd, data)
                finally:
                    os.close(fd)
            if self.fsync:  # bytes first, names after: a crash never leaves a renamed but empty file
                _sync([tmp for tmp, _ in temps])
            for tmp, target in temps:
                os.replace(tmp, target)
                folders.add(target.parent)
            self._durable(folders)
        except OSError as exc:
            for tmp, _ in temps:
                tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write {', '.join(list(files)[:3])}: {exc}") from exc

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self._path(path).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {path}: {exc}") from exc

    def exists(self, path: str) -> bool:
        return self._path(path).exists()

    def list_dir(self, path: str) -> list[str]:
        target = self._path(path)
        if not target.is_dir():
            return []
        return sorted(p.name for p in target.iterdir() if not p.name.startswith("."))

    def stat_dir(self, path: str) -> dict[str, FileStat]:
        out: dict[str, FileStat] = {}
        try:
            with os.scandir(self._path(path)) as entries:
                for entry in entries:
                    if entry.is_file(follow_symlinks=False) and not entry.name.startswith("."):
                        try:
                            stat = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:  # removed since the folder was listed
                            continue
                        out[entry.name] = FileStat(f"{stat.st_dev}:{stat.st_ino}", stat.st_size)
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as exc:
            raise StorageError(f"cannot list {path}: {exc}") from exc
        return dict(sorted(out.items()))

    def remove(self, path: str) -> int:
        target = self._path(path)
        if target == self.root:
            raise InvalidInput("refusing to remove the data root")
        try:
            if target.is_dir() and not target.is_symlink():
                count = sum(1 for p in target.rglob("*") if not p.is_dir())
                try:
                    shutil.rmtree(target, onerror=_gone_is_fine)
                except OSError as exc:  # a writer added an entry after rmtree listed its folder: remove it too
                    if exc.errno != errno.ENOTEMPTY:
                        raise
                    shutil.rmtree(target, onerror=_gone_is_fine)
            elif target.exists() or target.is_symlink():
                count = 1
                target.unlink()
            else:
                return 0
            self._durable([target.parent])
        except OSError as exc:
            raise StorageError(f"cannot remove {path}: {exc}") from exc
        return count


def _gone_is_fine(function: object, path: str, exc_info: tuple[type[BaseException], BaseException, object]) -> None:
    """rmtree's error hook: an entry another remover took first (an erase and the curator's erasure fence remove
    the same files) is gone as wanted; anything else is raised."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
