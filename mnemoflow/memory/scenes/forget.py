"""Take atoms a user deleted (or replaced by an edit) out of their scenes, before the next scene pass.

Why before the pass and not by the engine: a scene pass only adds what is new since its cursor; nothing would
ever take a deleted fact out of a scene body. The templated body of the deterministic engine names each item's
atom (``<!-- id -->``), so its items are removed exactly, the summary re-rendered from what is left, and a scene
left with nothing is tombstoned. A model-written body does not name its atoms per line: its META list loses the
ids now, and its text is rewritten at the scene's next model pass (the model is told only the live atoms).
Atoms replaced by L1 itself (update, merge) are left to the passes as before: their successor joins the scene.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.salience import salient_terms
from mnemoflow.memory.scenes.heuristic import SUMMARY_TERMS, summarise
from mnemoflow.memory.scenes.model import SceneBlock
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.memory.scenes.text import parse_items, render_items


def forgotten(records: Sequence[L1Record]) -> set[str]:
    """Atoms the user removed: deleted ones, and versions replaced by a manual edit."""
    by_id = {r.id: r for r in records}
    return {
        r.id
        for r in records
        if r.deleted_at is not None
        or (r.superseded_by is not None and getattr(by_id.get(r.superseded_by), "origin", "") == "manual")
    }


def _without(block: SceneBlock, gone: set[str], now: datetime, background: list[str]) -> SceneBlock:
    items = parse_items(block.body)
    kept = [i for i in items if i.id not in gone]
    ids = tuple(i for i in block.atom_ids if i not in gone)
    if items and not kept:
        return block.tombstone(now)
    if not items:  # a model-written body: the ids go now, the text at the scene's next model pass
        return replace(block, atom_ids=ids, updated=now)
    summary = summarise(kept, salient_terms([i.content for i in kept], background, k=SUMMARY_TERMS))
    return replace(block, body=render_items(kept), summary=summary, atom_ids=ids, updated=now)


def forget_in_scenes(store: SceneStore, records: Sequence[L1Record], now: datetime) -> list[str]:
    """Rewrite (one journaled commit) the scenes that hold forgotten atoms; returns their names."""
    gone = forgotten(records)
    if not gone:
        return []
    background = [r.content for r in records if r.live]
    writes = {
        name: _without(block, gone, now, background)
        for name, block in store.load().items()
        if gone & set(block.atom_ids) or any(i.id in gone for i in parse_items(block.body))
    }
    store.commit(writes, f"forget-{now.isoformat()}")
    return sorted(writes)
