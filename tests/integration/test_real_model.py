"""The real-model path, once: the packaged Qwen2.5-Coder-0.5B (the tests' model) behind llama.cpp's
OpenAI-compatible server, driven through the ``openai`` engine with the L1 extraction prompt and output model.

It ran on SmolLM2-135M until that model, on an AVX2 CPU, filled its 400 tokens with one schema-valid but endless
string: whether a 135M model stops depends on the CPU's rounding, so it cannot carry a test's verdict.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.llm import OpenAIEngine
from mnemoflow.prompts.l1_extraction import ExtractionContext, ExtractionOut, PromptMessage, build_messages
from tests.services import llama_cpp_server

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SAID = [
    ("user", "Hi, I'm Dana. I moved to Lisbon last month and I work as a nurse on night shifts."),
    ("assistant", "Welcome to Lisbon, Dana! How are the night shifts going?"),
    ("user", "Tiring. Please always keep your answers short, I read them on my phone."),
]


def test_l1_extraction_on_a_real_model_is_schema_valid(tmp_path: Path, test_model_gguf: Path) -> None:
    new = [PromptMessage(f"m{i}", role, T0 + timedelta(minutes=i), text) for i, (role, text) in enumerate(SAID)]
    messages = build_messages(ExtractionContext(user="dana", previous_scene="", background=[], new=new))

    async def extract(url: str) -> tuple[ExtractionOut, OpenAIEngine]:
        engine = OpenAIEngine(url, "qwen", timeout=300, max_retries=0, schema_format="json_object")
        try:
            return await engine.complete(messages, ExtractionOut, max_tokens=400, stage="l1"), engine
        finally:
            await engine.aclose()

    with llama_cpp_server(test_model_gguf, tmp_path / "llama.log", alias="qwen") as url:
        out, engine = asyncio.run(extract(url))
    assert isinstance(out, ExtractionOut)  # validated by pydantic against the same schema the grammar enforced
    totals = engine.usage.stages()["l1"]
    assert totals.ok == 1 and totals.prompt_tokens > 100 and totals.completion_tokens > 0
