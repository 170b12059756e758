"""Erase a session from the skills: what a skill learnt from it goes with it (docs/operations/data.md).

A skill drawn from that session alone is deleted; one drawn from others too loses the steps and pitfalls that came
from it and the session among its sources, and becomes a new version. Its history goes in both cases (an older
version may hold the erased session's text). Idempotent: a second run finds nothing of the session left.
"""

from __future__ import annotations

from datetime import datetime

from mnemoflow.ports.files import FileStore
from mnemoflow.skills.store import skill_stores


def forget_session(files: FileStore, tenant: str, session: str, now: datetime) -> int:
    """Remove ``session`` from every skill of ``tenant``; how many files were removed.

    The history goes first, then the skill is deleted or rewritten in one atomic write: an erase stopped between
    the two leaves the session among the skill's sources, so the retry does the rest."""
    removed = 0
    for store in skill_stores(files, tenant):
        for skill in store.all():
            if not any(src.split("#", 1)[0] == session for src in skill.sources):
                continue
            steps = tuple(s for s in skill.steps if s.source.session != session)
            pitfalls = tuple(p for p in skill.pitfalls if p.source.session != session)
            sources = tuple(src for src in skill.sources if src.split("#", 1)[0] != session)
            removed += store.drop_history(skill.name)
            if steps and sources:
                kept = {"steps": steps, "pitfalls": pitfalls, "sources": sources, "updated": now}
                store.put(skill.model_copy(update={**kept, "version": skill.version + 1}), keep_history=False)
            else:
                removed += store.delete(skill.name)
    return removed
