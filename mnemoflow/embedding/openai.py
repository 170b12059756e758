"""Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (the cluster shape: vLLM, TEI, Ollama)."""

from __future__ import annotations

import math

import httpx

from mnemoflow.errors import ConfigError, ServiceUnavailable


class OpenAIEmbedder:
    """Implements :class:`mnemoflow.ports.Embedder` over HTTP; vectors are re-normalised to unit length."""

    def __init__(self, base_url: str, model: str, dim: int, *, timeout: float = 30.0, batch: int = 128) -> None:
        root = base_url.rstrip("/")
        self._url = root if root.endswith("/v1") else f"{root}/v1"
        self._model, self._dim, self._batch = model, dim, batch
        self._client = httpx.Client(timeout=timeout)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return f"openai:{self._model}"

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        """The endpoint's model is treated as symmetric (OpenAI's embeddings API has no query/document switch)."""
        return self.embed(texts)

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self._batch):
            chunk = texts[start : start + self._batch]
            try:
                response = self._client.post(f"{self._url}/embeddings", json={"model": self._model, "input": chunk})
            except httpx.HTTPError as exc:
                raise ServiceUnavailable(f"embeddings endpoint {self._url} did not answer: {exc}") from exc
            if response.status_code >= 500:
                raise ServiceUnavailable(f"embeddings endpoint answered {response.status_code}")
            if response.status_code >= 400:
                raise ConfigError(f"embeddings endpoint refused the request: {response.text[:300]}")
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            for item in data:
                vector = [float(x) for x in item["embedding"]]
                if len(vector) != self._dim:
                    raise ConfigError(f"endpoint returned {len(vector)} dims, configured {self._dim}")
                norm = math.sqrt(sum(x * x for x in vector)) or 1.0
                out.append([x / norm for x in vector])
        return out
