"""FileStore on a local (or shared, mounted) file system."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from mnemoflow.errors import InvalidInput, StorageError


class LocalFileStore:
    """Implements :class:`mnemoflow.ports.FileStore` under one root folder."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).resolve()

    def _path(self, rel: str) -> Path:
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root):
            raise InvalidInput(f"path {rel!r} leaves the data root")
        return path

    def append_lines(self, path: str, lines: list[str]) -> None:
        if not lines:
            return
        if any("\n" in line for line in lines):
            raise InvalidInput("a line to append contains a newline")
        target = self._path(path)
        data = ("\n".join(lines) + "\n").encode()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
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
        target = self._path(path)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with tmp.open("wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StorageError(f"cannot write {path}: {exc}") from exc

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
