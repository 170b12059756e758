"""Query vectors kept by text: an agent asks the same question again and again, and a vector never goes stale.

Why it is safe: the port's contract makes an embedding a function of the text and the model (``model_id``), so a
kept vector is exactly what embedding again would return; what *can* change, the index searched with it, is not
kept here. Why it matters: the query embedding is most of recall's CPU (e5 about 35 ms a query on one core), and
the proxy recalls the same user message again whenever the user's memory changed between two tool steps.
"""

from __future__ import annotations

import threading

from mnemoflow.lru import LRU
from mnemoflow.ports.embedder import Embedder


class QueryCache:
    """An :class:`~mnemoflow.ports.embedder.Embedder` that keeps the last ``capacity`` query vectors of ``inner``.

    ``embed`` (what is indexed) passes straight through. Thread-safe: recall embeds in worker threads; the lock
    guards the map only, never the model call, so concurrent misses embed at once."""

    def __init__(self, inner: Embedder, capacity: int = 4096) -> None:
        self._inner = inner
        self._kept: LRU[str, list[float]] = LRU(capacity)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._inner.dim

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._inner.embed(texts)

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            found = {t: v for t in dict.fromkeys(texts) if (v := self._kept.pop(t)) is not None}
            for text, vector in found.items():
                self._kept.put(text, vector)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = dict(zip(missing, self._inner.embed_query(missing), strict=True))
            with self._lock:
                for text, vector in fresh.items():
                    self._kept.put(text, vector)
            found.update(fresh)
        return [list(found[t]) for t in texts]
