"""Build the configured embedder. One typed switch over ``Settings.embedder``; adapters import lazily."""

from __future__ import annotations

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.ports.embedder import Embedder

DIM = 384


def build_embedder(settings: Settings) -> Embedder:
    if settings.embedder == "hashing":
        from mnemoflow.embedding.hashing import HashingEmbedder

        return HashingEmbedder(dim=DIM)
    if settings.embedder == "openai":
        if not settings.embedder_url:
            raise ConfigError("embedder='openai' needs MNEMOFLOW_EMBEDDER_URL")
        from mnemoflow.embedding.openai import OpenAIEmbedder

        return OpenAIEmbedder(settings.embedder_url, settings.embedder_model, DIM)
    if settings.embedder == "minilm":
        from mnemoflow.embedding.onnx_minilm import MiniLMEmbedder

        return MiniLMEmbedder(settings.embedder_model_path, threads=settings.embedder_threads)
    from mnemoflow.embedding.e5 import E5Embedder

    return E5Embedder(
        threads=settings.embedder_threads or 2, engine=settings.embedder_engine, models_dir=settings.models_dir
    )
