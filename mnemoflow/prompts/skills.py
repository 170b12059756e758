"""Prompt for the model's skill writer: the heuristic draft of a skill, rewritten as a reusable procedure.

Pure: ``draft -> list[ChatMessage]``. The model sees the draft's numbered steps and pitfalls (each from a canvas
node) and may only rewrite or drop them, by number: it cannot add a step, so every step and pitfall it keeps still
drills down to the node it came from (code keeps the reference; the model never sees or writes it).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.ports.llm import ChatMessage
from mnemoflow.skills.model import MAX_LINE, MAX_PITFALLS, MAX_STEPS, WHEN_MAX, Skill

VERSION = "skills/2"
_C = ConfigDict(extra="forbid")


class Rewritten(BaseModel):
    model_config = _C
    n: int = Field(ge=1, le=max(MAX_STEPS, MAX_PITFALLS), description="The number of the draft's item.")
    text: str = Field(min_length=1, max_length=MAX_LINE)


class SkillReply(BaseModel):
    model_config = _C
    name: str = Field(max_length=48, description="kebab-case name of the procedure, e.g. django-admin-inline-hook")
    when_to_use: str = Field(min_length=1, max_length=WHEN_MAX, description="The kind of request it answers.")
    steps: list[Rewritten] = Field(min_length=1, max_length=MAX_STEPS)
    pitfalls: list[Rewritten] = Field(default_factory=list, max_length=MAX_PITFALLS)


SYSTEM = (
    "You turn the record of a finished coding task into a reusable skill for the next similar task. You get the "
    "task's goal, the code area, and numbered steps and pitfalls drafted from what the agent did. Write: a short "
    "kebab-case name for the kind of task; when_to_use: one sentence, in your own words, describing the kind of "
    "request this skill answers, so that a similar request on another day finds it; steps: the draft's steps that "
    "matter, in order, each rewritten as an "
    "instruction that keeps its file paths and commands (give each its draft number n); pitfalls: the draft's "
    "pitfalls worth knowing, each as what failed and how to avoid it (with its draft number n). Drop steps that "
    "only looked around without result. Never invent a step, file or command. Write in the language of the goal. "
    "Reply with JSON only."
)


def build(draft: Skill) -> list[ChatMessage]:
    steps = "\n".join(f"{i}. {s.text}" for i, s in enumerate(draft.steps, start=1))
    pitfalls = "\n".join(f"{i}. {p.text}" for i, p in enumerate(draft.pitfalls, start=1)) or "(none)"
    user = (
        f"Goal: {draft.when_to_use}\nCode area: {draft.area or '(unknown)'}\n\nDraft steps:\n{steps}\n\n"
        f"Draft pitfalls:\n{pitfalls}"
    )
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=user)]
