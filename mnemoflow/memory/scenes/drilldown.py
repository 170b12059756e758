"""Drill-down persona → scene → atom ids, read from the files alone (no model, no index).

Why from files: the persona's navigation names scene files, and each scene's META lists the atom ids it absorbed,
so a reader (the recall API, an operator, an agent tool) can always go one layer down; the atom ids then lead to
L1 records and their ``source_message_ids`` in L0, which is the recall side's business.
"""

from __future__ import annotations

from dataclasses import dataclass

from mnemoflow.errors import InvalidInput
from mnemoflow.memory.persona.generate import PersonaStore, navigation_scenes
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.memory.scenes.text import parse_items
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED


@dataclass(frozen=True, slots=True)
class SceneRef:
    """One scene as drill-down shows it; ``visible_atom_ids`` are the ones still quoted in the body, ``engine`` the
    one that last wrote it (``llm``, ``heuristic``; "" for a scene written before engines were recorded)."""

    filename: str
    summary: str
    heat: int
    atom_ids: tuple[str, ...]
    visible_atom_ids: tuple[str, ...]
    engine: str = ""


def scene_ref(scenes: SceneStore, filename: str) -> SceneRef | None:
    """The scene ``filename`` (a name outside the user's scenes folder is refused), or None if absent/deleted."""
    block = scenes.read(filename)
    if block is None or block.deleted:
        return None
    visible = tuple(i.id for i in parse_items(block.body))
    return SceneRef(block.filename, block.summary, block.heat, block.atom_ids, visible, block.engine)


def drill_down(files: FileStore, tenant: str, user: str, scope: str = SHARED) -> list[SceneRef]:
    """Every scene the persona of ``scope`` navigates to, in navigation order (hottest first), with its atom ids.

    Without a persona yet, the live scenes themselves, hottest first.
    """
    scenes = SceneStore(files, tenant, user, scope)
    names = navigation_scenes(PersonaStore(files, tenant, user, scope).read())
    if not names:
        names = [b.filename for b in sorted(scenes.load().values(), key=lambda b: (-b.heat, b.filename))]
    refs = []
    for name in names:
        try:
            ref = scene_ref(scenes, name)
        except InvalidInput:
            continue  # a hand-edited navigation line naming something outside the folder
        if ref is not None:
            refs.append(ref)
    return refs


def atom_scenes(files: FileStore, tenant: str, user: str, atom_id: str) -> list[str]:
    """The reverse step: which live scenes absorbed ``atom_id`` (for "why does the persona say this?")."""
    return sorted(b.filename for b in SceneStore(files, tenant, user).load().values() if atom_id in b.atom_ids)
