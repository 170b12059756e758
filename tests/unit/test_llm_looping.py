"""Looping model text is refused at validation (so the repair try and the heuristic fallback apply)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from mnemoflow.llm.looping import loop_problem
from mnemoflow.llm.structured import RawReply, repair_messages
from mnemoflow.prompts.persona import PersonaReply
from mnemoflow.prompts.scenes import SceneReply

EN = """# User Narrative Profile
> Archetype: a night-shift nurse who runs

## 1. Base & facts
- Home (2026-03-01): Dana moved to Lisbon in February.
- Work: a nurse on night shifts at a city hospital.

## 2. Interest graph
- Running, three mornings a week; a first half marathon on 2026-02-22.
- Short answers: she reads them on her phone between shifts."""

ZH = """# 用户画像
> 画像：女儿小美 · 领养 · 烘焙

## 1. 基本信息
- 家人：女儿小美考上了北京大学，学的是计算机，九月去北京。
- 宠物：打算领养一只布偶猫，取名叫年糕。

## 2. 兴趣图谱
- 烘焙：第一次烤了戚风蛋糕，下次想做提拉米苏。
- 徒步：周末去香山走了十五公里。"""

LOOP = "# User Narrative Profile\n\n" + "**Scene 1: notes-2024-03-03.md**\n\n" * 40


@pytest.mark.parametrize("text", [EN, ZH, EN + "\n\n" + ZH], ids=["en", "zh", "mixed"])
def test_written_text_passes(text: str) -> None:
    assert loop_problem(text) is None
    assert PersonaReply(persona=text).persona == text


def test_a_repeated_line_is_refused_with_the_line() -> None:
    assert "written 40 times" in (loop_problem(LOOP) or "")
    with pytest.raises(ValidationError, match="write each point once"):
        PersonaReply(persona=LOOP[:2000])


def test_a_phrase_looping_inside_one_line_is_refused() -> None:
    assert loop_problem("我最喜欢的事情是" * 60) == "the text repeats itself: write each point once"


def test_scene_bodies_are_checked_too() -> None:
    edit = {"action": "create", "filename": "x", "sources": [], "summary": "s", "atom_ids": []}
    with pytest.raises(ValidationError, match="write each point once"):
        SceneReply.model_validate({"edits": [{**edit, "body": LOOP[:1500]}]})


def test_a_looping_reply_is_not_echoed_in_the_repair_try() -> None:
    """Echoing a loop primed it again (Qwen2.5 0.5B); a reply refused for its shape is still echoed."""
    looped = RawReply(text=json.dumps({"persona": LOOP[:2000]}))
    with pytest.raises(ValidationError) as loop:
        PersonaReply.model_validate_json(looped.text)
    (note,) = repair_messages(looped, loop.value)
    assert note.role == "user" and "written 40 times" in note.content and note.content.count("Scene 1") == 1
    shapeless = RawReply(text='{"persona": 3}')
    with pytest.raises(ValidationError) as shape:
        PersonaReply.model_validate_json(shapeless.text)
    echoed, complaint = repair_messages(shapeless, shape.value)
    assert echoed.role == "assistant" and echoed.content == shapeless.text and "schema" in complaint.content


def test_a_raw_line_break_inside_a_string_is_read_as_one() -> None:
    """SmolLM2 through llama.cpp's server (json_object format) wrote a line break inside a string unescaped."""
    from mnemoflow.llm.structured import validate_reply

    raw = '{"persona": "# User\nhikes on weekends"}'
    with pytest.raises(ValidationError):
        PersonaReply.model_validate_json(raw)  # strict JSON refuses it
    assert validate_reply(PersonaReply, raw).persona == "# User\nhikes on weekends"
    with pytest.raises(ValidationError, match="Invalid JSON"):  # broken JSON keeps its own error
        validate_reply(PersonaReply, '{"persona": "# User')
    with pytest.raises(ValidationError, match="cop"):  # and a value refused stays refused
        validate_reply(PersonaReply, '{"persona": "# User\n```markdown\nx\n```"}')
