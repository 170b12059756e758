"""The tar of a bundle, whatever it carries: members streamed once, a ``manifest.json`` last with every member's
path, size and SHA-256, and on reading, every member checked against it.

One implementation for the user bundle (:mod:`mnemoflow.governance.bundle`) and the skills bundle
(:mod:`mnemoflow.skills.bundle`): each brings its manifest model (format, version, what it describes) and the
members it holds; this module writes and verifies the tar.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime
from typing import IO, Protocol, TypeVar

from pydantic import BaseModel

from mnemoflow.errors import InvalidInput, StorageError
from mnemoflow.ports import FileStore

MANIFEST = "manifest.json"


class BundleFile(BaseModel):
    path: str
    bytes: int
    sha256: str


class Listing(Protocol):
    """What the archive needs of a manifest: its format and version, and the members it lists."""

    @property
    def format(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def files(self) -> list[BundleFile]: ...

    def model_dump_json(self, *, indent: int | None = None) -> str: ...


M = TypeVar("M", bound=Listing)


def walk(files: FileStore, path: str) -> Iterator[str]:
    """Paths under ``path`` (relative to the root), depth first; ``path`` itself if it is a file."""
    names = files.list_dir(path)
    if names:
        for name in names:
            yield from walk(files, f"{path}/{name}")
    elif files.exists(path):
        yield path  # a file, or an empty folder (export skips what it cannot read as a file)


def stored(files: FileStore, members: Iterable[tuple[str, str]]) -> Iterator[tuple[str, bytes]]:
    """(member name, content) of each (member name, stored path) that is a file now: an empty folder, or a file
    removed while exporting (a retention sweep, an erase), is not part of the bundle."""
    for name, path in members:
        try:
            data = files.read_bytes(path)
        except StorageError:  # an empty folder
            continue
        if data is not None:
            yield name, data


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(mtime), 0o644
    tar.addfile(info, io.BytesIO(data))


def write_archive(out: IO[bytes], members: Iterable[tuple[str, bytes]], manifest: M, at: datetime) -> M:
    """Write ``members`` to ``out`` (any writable stream; nothing is seeked), each listed in ``manifest.files``,
    then the manifest. Returns the manifest."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            _add(tar, name, data, at.timestamp())
            manifest.files.append(BundleFile(path=name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
        _add(tar, MANIFEST, manifest.model_dump_json(indent=1).encode(), at.timestamp())
    return manifest


def read_archive(
    stream: IO[bytes], parse: Callable[[bytes], M], fmt: str, reads: Collection[int]
) -> tuple[M, dict[str, bytes]]:
    """Manifest (``parse`` of its JSON) and members of a bundle of format ``fmt`` in one of the versions ``reads``,
    every member checked against the manifest. Raises InvalidInput with the reason on any mismatch."""
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for info in tar:
                if not info.isfile():
                    raise InvalidInput(f"bundle member {info.name!r} is not a regular file")
                fh = tar.extractfile(info)
                members[info.name] = fh.read() if fh is not None else b""
    except tarfile.TarError as exc:
        raise InvalidInput(f"not a readable bundle: {exc}") from exc
    raw = members.pop(MANIFEST, None)
    if raw is None:
        raise InvalidInput(f"bundle has no {MANIFEST}")
    try:
        manifest = parse(raw)
    except ValueError as exc:
        raise InvalidInput(f"bundle manifest is invalid: {exc}") from exc
    if manifest.format != fmt or manifest.version not in reads:
        readable = " and ".join(f"v{v}" for v in reads)
        raise InvalidInput(f"bundle is {manifest.format} v{manifest.version}; this stack reads {fmt} {readable}")
    listed = {f.path: f for f in manifest.files}
    if set(listed) != set(members):
        raise InvalidInput(f"bundle members and manifest differ: {sorted(set(listed) ^ set(members))[:5]}")
    for name, data in members.items():
        if hashlib.sha256(data).hexdigest() != listed[name].sha256:
            raise InvalidInput(f"bundle member {name} does not match its checksum")
    return manifest, members
