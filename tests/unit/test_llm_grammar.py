"""The llama.cpp grammar of our strict schemas: flat bounds, enumerated integer ranges, JSON-legal strings."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from mnemoflow.llm.grammar import schema_grammar
from mnemoflow.llm.schema import strict_json_schema
from mnemoflow.prompts.l1_extraction import ExtractionOut
from mnemoflow.prompts.persona import PersonaReply

pytest.importorskip("llama_cpp", reason="the converter is llama-cpp-python's (the llama extra)")


class Reply(BaseModel):
    name: str = Field(min_length=2, max_length=40)
    score: int = Field(ge=0, le=10)
    count: int
    ids: list[str] = Field(min_length=1, max_length=3)
    tags: list[str] = Field(max_length=4)


def rules(text: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in text.splitlines())


def test_bounds_are_flat_repetitions_and_ranges_are_enumerated() -> None:
    g = rules(schema_grammar(strict_json_schema(Reply)))
    assert g["name"] == r'"\"" char{2,40} "\"" space'
    assert g["score"] == "(" + " | ".join(f'"{i}"' for i in range(11)) + ") space"
    assert g["count-kv"].endswith(" integer") and "integral-part" in g["integer"]  # open: the stock rule
    assert g["ids"] == '"[" space ids-item ("," space ids-item){0,2} "]" space'
    assert g["tags"] == '"[" space (tags-item ("," space tags-item){0,3})? "]" space'
    assert g["ids-item"] == r'"\"" char{0,300} "\"" space'  # no maxLength: the default bound
    assert r"\x00-\x1F" in g["char"]  # a raw newline is not JSON


def test_our_reply_grammars_stay_small() -> None:
    """The stock converter wrote 21 KB for the L1 reply and 16 KB for the persona (nested optionals)."""
    assert len(schema_grammar(strict_json_schema(ExtractionOut))) < 6000
    assert len(schema_grammar(strict_json_schema(PersonaReply))) < 500
