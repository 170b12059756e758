"""Whether to (re)generate the L3 persona (docs/tdam-spec.md §3.6 P1–P4), as pure functions of a persisted state.

Improvements on the original (docs/tdam-spec.md §9.20): the counter counts atoms that L2 consumed (not every L1 write),
the triggers can be evaluated at any time (the curator checks after L2 and may check after L1), and an explicit
request is cleared when generation is skipped because no scene changed, so it cannot stick forever.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import AwareDatetime, BaseModel, ConfigDict

from mnemoflow.memory.scenes.model import SceneBlock

EVERY_N = 50


class PersonaState(BaseModel):
    """Per-user L3 bookkeeping (persist as JSON beside :class:`~mnemoflow.memory.scenes.schedule.L2Timer`)."""

    model_config = ConfigDict(frozen=True)

    scenes_processed: int = 0
    """L2 passes that applied at least one change."""
    total_processed: int = 0
    """Atoms consumed by L2 passes, ever."""
    memories_since_last_persona: int = 0
    last_persona_at: int = 0
    """``total_processed`` when the persona was last generated; 0 = never."""
    last_persona_time: AwareDatetime | None = None
    request_reason: str | None = None
    rewrite_pending: bool = False
    """Memories were deleted from the scenes: write the persona anew from them at the next chance."""


def after_scene_pass(state: PersonaState, *, atoms: int, applied: bool, reason: str | None) -> PersonaState:
    """Count an L2 pass (``atoms`` consumed) and keep the model's persona-update request, if any."""
    return state.model_copy(
        update={
            "scenes_processed": state.scenes_processed + (1 if applied else 0),
            "total_processed": state.total_processed + atoms,
            "memories_since_last_persona": state.memories_since_last_persona + atoms,
            "request_reason": reason or state.request_reason,
        }
    )


def persona_trigger(
    state: PersonaState, *, scene_count: int, persona_exists: bool, every_n: int = EVERY_N
) -> str | None:
    """The reason to generate now, highest priority first, or None."""
    if scene_count == 0:
        return None
    if state.request_reason:
        return f"requested: {state.request_reason}"
    if state.scenes_processed > 0 and state.last_persona_time is None:
        return "cold start"
    if state.last_persona_time is not None and not persona_exists:
        return "recovery: persona missing"
    if state.scenes_processed == 1 and state.memories_since_last_persona > 0:
        return "first scene"
    if state.memories_since_last_persona >= every_n:
        return f"{state.memories_since_last_persona} memories since the last persona"
    return None


def changed_scenes(scenes: dict[str, SceneBlock], since: datetime | None) -> list[SceneBlock]:
    """Live scenes updated after ``since`` (all when never generated; an unreadable time counts as changed)."""
    live = [b for b in scenes.values() if not b.deleted]
    if since is None:
        return sorted(live, key=lambda b: (-b.heat, b.filename))
    return sorted((b for b in live if b.updated is None or b.updated > since), key=lambda b: (-b.heat, b.filename))


def after_generation(state: PersonaState, now: datetime) -> PersonaState:
    return state.model_copy(
        update={
            "last_persona_at": state.total_processed,
            "last_persona_time": now,
            "memories_since_last_persona": 0,
            "request_reason": None,
            "rewrite_pending": False,
        }
    )


def after_skip(state: PersonaState) -> PersonaState:
    """Nothing changed since the last persona: drop a pending request rather than retrying it forever."""
    return state.model_copy(update={"request_reason": None})
