"""The in-process CPU engine (llama.cpp) against the LLM port contract, on the packaged Qwen2.5-Coder-0.5B the
model path runs: a grammar-constrained reply validates, every stage's reply grammar loads, and an L1 extraction
validates. (SmolLM2-135M ran the first test until a 135M model's rambling proved CPU-dependent.)"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from mnemoflow.errors import ConfigError
from mnemoflow.llm.llama_cpp import LlamaCppEngine
from mnemoflow.llm.schema import strict_json_schema
from mnemoflow.ports.llm import ChatMessage
from mnemoflow.prompts.l1_dedup import DedupOut
from mnemoflow.prompts.l1_extraction import ExtractionContext, ExtractionOut, PromptMessage, build_messages
from mnemoflow.prompts.offload_boundary import BoundaryReply
from mnemoflow.prompts.offload_canvas import FirstReply as FirstCanvasReply
from mnemoflow.prompts.offload_canvas import Reply as CanvasReply
from mnemoflow.prompts.offload_summary import SummaryReply
from mnemoflow.prompts.persona import PersonaReply
from mnemoflow.prompts.scenes import SceneReply

pytestmark = pytest.mark.integration


class Answer(BaseModel):
    city: str = Field(max_length=80)
    tags: list[str] = Field(max_length=3)


class Unbounded(BaseModel):
    items: list[str]


@pytest.fixture(scope="module")
def qwen(test_model_gguf: Path) -> LlamaCppEngine:
    return LlamaCppEngine(test_model_gguf, n_ctx=4096, threads=1)


def test_grammar_constrained_output_validates_and_usage_is_recorded(qwen: LlamaCppEngine) -> None:
    messages = [ChatMessage(role="user", content="Alice lives in Lyon. Reply with her city and up to 3 tags.")]
    out = asyncio.run(qwen.complete(messages, Answer, max_tokens=64, stage="probe"))
    assert isinstance(out, Answer) and len(out.tags) <= 3
    totals = qwen.usage.stages()["probe"]
    assert totals.ok == 1 and 0 < totals.completion_tokens <= 2 * 64  # one retry at most, each bounded


def test_unbounded_lists_are_refused_before_the_model_runs(qwen: LlamaCppEngine) -> None:
    with pytest.raises(ConfigError):
        asyncio.run(qwen.complete([ChatMessage(role="user", content="x")], Unbounded, max_tokens=8))


REPLIES = [
    DedupOut,
    ExtractionOut,
    BoundaryReply,
    CanvasReply,
    FirstCanvasReply,
    SummaryReply,
    SceneReply,
    PersonaReply,
]


@pytest.mark.parametrize("reply", REPLIES, ids=lambda m: m.__name__)
def test_llama_cpp_accepts_the_grammar_of_every_stage_reply(qwen: LlamaCppEngine, reply: type[BaseModel]) -> None:
    """A grammar llama.cpp refuses would be dropped by the sampler and the model would decode free text."""
    assert qwen._grammar(strict_json_schema(reply)) is not None


def test_l1_extraction_on_the_packaged_qwen_validates(qwen: LlamaCppEngine) -> None:
    t0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    said = "Hi, I'm Dana. I moved to Lisbon last month and I work as a nurse on night shifts."
    new = [PromptMessage("m1", "user", t0, said)]
    messages = build_messages(ExtractionContext(user="dana", previous_scene="", background=[], new=new))
    out = asyncio.run(qwen.complete(messages, ExtractionOut, max_tokens=600, stage="l1"))
    assert isinstance(out, ExtractionOut)  # what it extracts is bench/model_engine.py's to measure
    totals = qwen.usage.stages()["l1"]
    assert totals.ok == 1 and totals.completion_tokens > 0
