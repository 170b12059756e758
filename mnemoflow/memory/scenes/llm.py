"""The model scene engine: one structured call per window through the LLM port.

Why the model sees only some scenes in full: fifteen scenes of 1,500 characters would dominate the prompt.
It gets the whole index plus the full text of the ``editable`` scenes (the most word-overlapping with the new
atoms, and at capacity also the coldest, the usual merge candidates), and may update or merge only those, so a
scene is never rewritten from its one-line summary. That rule, and everything :func:`apply_plan` checks, is
fed back once when broken (``rejection_retries``).
"""

from __future__ import annotations

from datetime import datetime

from mnemoflow.errors import MnemoflowError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.memory.salience import content_words
from mnemoflow.memory.scenes.model import SceneBlock, SceneInput
from mnemoflow.memory.scenes.passes import SceneEngine
from mnemoflow.memory.scenes.plan import ScenePlan, ScenePlanRejected, ScenePolicy
from mnemoflow.ports import LLM
from mnemoflow.prompts.scenes import SceneContext, SceneReply, build_scene_messages


def editable_scenes(scenes: dict[str, SceneBlock], atoms: list[SceneInput], k: int, max_scenes: int) -> list[str]:
    """Up to ``k`` scene names by shared words with the atoms; at or near capacity the two coldest are added."""
    atom_words = {w for a in atoms for w in content_words(a.content)}
    scored = sorted(
        scenes.values(),
        key=lambda b: (-len(atom_words & set(content_words(b.summary + " " + b.body))), -b.heat, b.filename),
    )
    chosen = [b.filename for b in scored[:k]]
    if len(scenes) >= max_scenes - 1:
        coldest = sorted(scenes.values(), key=lambda b: (b.heat, b.filename))[:2]
        chosen += [b.filename for b in coldest if b.filename not in chosen]
    return chosen


class LLMSceneEngine:
    """Implements the scene-engine protocol of :mod:`mnemoflow.memory.scenes.passes` with any LLM engine; a window
    it fails goes to ``fallback`` (the heuristic engine)."""

    name = "llm"
    rejection_retries = 1

    def __init__(
        self,
        llm: LLM,
        *,
        fallback: SceneEngine | None = None,
        editable: int = 4,
        max_tokens: int = 4096,
        language: str | None = None,
    ) -> None:
        self.llm = llm
        self.fallback = fallback
        self.editable = editable
        self.max_tokens = max_tokens
        self.language = language

    async def plan(
        self,
        scenes: dict[str, SceneBlock],
        atoms: list[SceneInput],
        now: datetime,
        policy: ScenePolicy,
        feedback: str | None = None,
    ) -> ScenePlan:
        editable = editable_scenes(scenes, atoms, self.editable, policy.max_scenes)
        ctx = SceneContext(
            atoms=atoms,
            scenes=scenes,
            editable=editable,
            now=now,
            max_scenes=policy.max_scenes,
            max_creates=policy.max_creates,
            feedback=feedback,
            **({"language": self.language} if self.language else {}),
        )
        reply = await self.llm.complete(
            build_scene_messages(ctx), SceneReply, max_tokens=self.max_tokens, stage="l2_scenes"
        )
        hidden = [
            f"{edit.filename}: {edit.action} names {name}, which is not among the editable scenes {editable}"
            for edit in reply.edits
            if edit.action in ("update", "merge", "delete")
            for name in ([edit.filename] if edit.action != "merge" else edit.sources)
            if name in scenes and name not in editable
        ]
        new = {a.id for a in atoms}
        if new and not any(new.intersection(edit.atom_ids) for edit in reply.edits):
            # A small model's easy way out (Qwen2.5 0.5B and 1.5B, bench/model_engine.py): first no edit at all (the
            # reply's schema now asks for one), then a scene that cites none of the new memories ("scene1.txt"
            # holding an assistant's reply). Memories that no scene reflects would never reach L2 or the persona.
            hidden.append(
                f"no edit lists any of the {len(new)} new memories in atom_ids: update an editable scene or create one "
                "that reflects them, and list their ids"
            )
        if hidden:
            raise ScenePlanRejected(hidden)
        return ScenePlan(edits=reply.edits, persona_update_reason=reply.persona_update_reason)

    def fallback_for(self, error: MnemoflowError) -> SceneEngine | None:
        if self.fallback is not None:
            fell_back(self.llm, "l2_scenes", error)
        return self.fallback
