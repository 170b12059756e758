"""Build the configured LLM engine. One typed switch over ``Settings.llm_engine``; adapters import lazily.

``heuristic`` has no LLM: each stage then runs its deterministic implementation, so this returns None.
"""

from __future__ import annotations

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.llm.usage import LLMUsage
from mnemoflow.ports.llm import LLM


def build_llm(settings: Settings, usage: LLMUsage | None = None) -> LLM | None:
    """``usage``: the recorder the engine counts its calls in (None: one of its own)."""
    engine = settings.llm_engine
    if engine == "heuristic":
        return None
    if engine == "openai":
        if not settings.llm_url:
            raise ConfigError("llm_engine='openai' needs MNEMOFLOW_LLM_URL (an OpenAI-compatible server)")
        from mnemoflow.llm.openai import OpenAIEngine

        key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
        return OpenAIEngine(
            settings.llm_url,
            settings.llm_model,
            key,
            timeout=settings.llm_timeout_seconds,
            schema_format=settings.llm_schema_format,
            usage=usage,
        )
    if engine == "llama_cpp":
        if not settings.llm_model_path:
            raise ConfigError("llm_engine='llama_cpp' needs MNEMOFLOW_LLM_MODEL_PATH (a GGUF file)")
        from mnemoflow.llm.llama_cpp import LlamaCppEngine

        return LlamaCppEngine(settings.llm_model_path, usage=usage)
    from mnemoflow.llm.vllm import VLLMEngine

    return VLLMEngine(settings.llm_model, usage=usage)
