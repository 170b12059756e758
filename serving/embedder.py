"""The ``embedder`` Serve deployment: one embedder per replica, requests from many callers batched together.

Each request is a list of texts; ``@serve.batch`` gathers concurrent requests, so a burst of single-text calls
runs as one ONNX batch. ``ServeEmbedder`` is the :class:`mnemoflow.ports.Embedder` adapter over its handle.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ray import serve

from mnemoflow.config import Settings
from mnemoflow.embedding.factory import build_embedder
from serving.loopback import keep_replica_on_loopback


def _split(vectors: list[list[float]], requests: list[list[str]]) -> list[list[list[float]]]:
    """One flat batch's vectors back into the requests they came from."""
    out, start = [], 0
    for texts in requests:
        out.append(vectors[start : start + len(texts)])
        start += len(texts)
    return out


class EmbedderServer:
    def __init__(self, settings: Settings) -> None:
        keep_replica_on_loopback()
        self._embedder = build_embedder(settings)
        self._embedder.embed(["warm up"])  # load the model before the first request, not during it
        self._batch_sizes: deque[int] = deque(maxlen=1000)
        self._batch_ms: deque[float] = deque(maxlen=1000)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def embed(self, requests: list[list[str]]) -> list[list[list[float]]]:
        return await self._batch(self._embedder.embed, requests)

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def embed_query(self, requests: list[list[str]]) -> list[list[list[float]]]:
        return await self._batch(self._embedder.embed_query, requests)

    async def _batch(
        self, embed: Callable[[list[str]], list[list[float]]], requests: list[list[str]]
    ) -> list[list[list[float]]]:
        started = time.perf_counter()
        self._batch_sizes.append(len(requests))
        vectors = await asyncio.to_thread(embed, [text for texts in requests for text in texts])
        self._batch_ms.append((time.perf_counter() - started) * 1000)
        return _split(vectors, requests)

    def info(self) -> dict[str, Any]:
        return {"dim": self._embedder.dim, "model_id": self._embedder.model_id}

    def batch_ms(self) -> list[float]:
        """Each batch's time in this replica, ms (the model call; Serve's batch wait is before it), most recent
        last (bounded): with ``batch_sizes``, what a slow embedding call spent here rather than on its hop."""
        return list(self._batch_ms)

    def batch_sizes(self) -> list[int]:
        """Requests per batch, most recent last (bounded): shows whether callers were batched together."""
        return list(self._batch_sizes)


def build_embedder_app(settings: Settings, replicas: int = 1) -> Any:
    deployment = serve.deployment(name="embedder", num_replicas=replicas, ray_actor_options={"num_cpus": 0})
    return deployment(EmbedderServer).bind(settings)


class ServeEmbedder:
    """The Embedder port over a Serve handle (sync: call it from threads or sync code, not inside an event loop)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        info = handle.info.remote().result()
        self._dim, self._model_id = int(info["dim"]), str(info["model_id"])

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return self._model_id

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._handle.embed.remote(texts).result() if texts else []

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        return self._handle.embed_query.remote(texts).result() if texts else []
