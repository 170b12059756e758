"""The in-process CPU engine (llama.cpp) against the LLM port contract, on the real SmolLM2-135M GGUF."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel, Field

from mnemoflow.errors import ConfigError
from mnemoflow.llm.llama_cpp import LlamaCppEngine
from mnemoflow.ports.llm import ChatMessage
from tests.services import ensure_smollm2_gguf

pytestmark = pytest.mark.integration


class Answer(BaseModel):
    city: str = Field(max_length=80)
    tags: list[str] = Field(max_length=3)


class Unbounded(BaseModel):
    items: list[str]


@pytest.fixture(scope="module")
def engine() -> LlamaCppEngine:
    pytest.importorskip("llama_cpp", reason="needs the llama extra: pip install 'mnemoflow[llama]'")
    return LlamaCppEngine(ensure_smollm2_gguf(), n_ctx=1024)


def test_grammar_constrained_output_validates_and_usage_is_recorded(engine: LlamaCppEngine) -> None:
    messages = [ChatMessage(role="user", content="Alice lives in Lyon. Reply with her city and up to 3 tags.")]
    out = asyncio.run(engine.complete(messages, Answer, max_tokens=64, stage="probe"))
    assert isinstance(out, Answer) and len(out.tags) <= 3
    totals = engine.usage.stages()["probe"]
    assert totals.ok == 1 and 0 < totals.completion_tokens <= 2 * 64  # one retry at most, each bounded


def test_unbounded_lists_are_refused_before_the_model_runs(engine: LlamaCppEngine) -> None:
    with pytest.raises(ConfigError):
        asyncio.run(engine.complete([ChatMessage(role="user", content="x")], Unbounded, max_tokens=8))
