"""Where L2 scenes and the L3 persona live (docs/DESIGN.md §5), and the check that keeps a file name inside them.

Why a separate module: :mod:`mnemoflow.storage.layout` belongs to the storage owners; these paths extend it
under the same user folder. Why a second check on top of the FileStore's root check: the root check only
keeps a path inside the *data root*; a scene name must stay inside *that user's* scenes folder. The check is
on the normalised path with ``commonpath`` (never a string prefix, docs/tdam-spec.md §9.8: ``scenes_x/…`` would pass a
prefix test), and, when the store exposes a local ``root``, again on the resolved path, so a symlink planted
in the folder cannot lead outside it either.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from mnemoflow.errors import InvalidInput
from mnemoflow.ids import is_id
from mnemoflow.memory.scenes.model import SAFE_SCENE_NAME
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED, scope_parts
from mnemoflow.storage import Layout

SCOPE_FOLDERS = {"agent": "agents", "team": "teams"}
"""The folder under a user's that holds each private kind of scope's scenes and persona (docs/concepts/scopes.md)."""


class ScenePaths:
    """Relative paths (under the FileStore root) of one user's L2/L3 files, in one scope.

    The shared scope's files keep their place in the user's folder; a team's are under ``teams/<team>/`` and an
    agent's under ``agents/<agent>/``, with the same names inside. The curation state is one file per user."""

    def __init__(self, tenant: str, user: str, scope: str = SHARED) -> None:
        self.user_dir = Layout.user_dir(tenant, user)  # checks both ids
        self.scope = scope
        self.base = self.user_dir if scope == SHARED else f"{self.user_dir}/{scope_folder(scope)}"
        self.scenes_dir = f"{self.base}/scenes"
        self.persona = f"{self.base}/persona.md"
        self.journal = f"{self.scenes_dir}/.backup/journal.json"
        self.state = f"{self.user_dir}/.l2l3_state.json"
        self.persona_backups = f"{self.base}/.persona_backup"
        scoped = tuple(f"{self.user_dir}/{folder}" for folder in SCOPE_FOLDERS.values())
        self.derived = (self.scenes_dir, self.persona, self.persona_backups, self.state, *scoped)
        """Everything L2/L3 writes (rebuilt from L1; what an erase during a pass must not leave behind)."""

    def scopes_on_disk(self, files: FileStore) -> list[str]:
        """The private scopes that have a folder of scenes or persona under this user, sorted."""
        return sorted(
            f"{kind}:{name}"
            for kind, folder in SCOPE_FOLDERS.items()
            for name in files.list_dir(f"{self.user_dir}/{folder}")
            if is_id(name)
        )

    def scene_backup(self, slot: int) -> str:
        return f"{self.scenes_dir}/.backup/pass-{slot:02d}.json"

    def persona_backup(self, slot: int) -> str:
        return f"{self.persona_backups}/persona-{slot}.md"

    def scene(self, name: str, files: FileStore | None = None) -> str:
        """The path of scene file ``name``; :class:`InvalidInput` if it is not a plain name inside the folder."""
        if not SAFE_SCENE_NAME.fullmatch(name) or ".." in name:
            raise InvalidInput(f"scene name {name[:80]!r} is not a normalised scene file name")
        joined = posixpath.normpath(posixpath.join(self.scenes_dir, name))
        if posixpath.commonpath([self.scenes_dir, joined]) != self.scenes_dir or joined == self.scenes_dir:
            raise InvalidInput(f"scene name {name[:80]!r} leaves the scenes folder")
        confine_resolved(files, self.scenes_dir, joined)
        return joined


def scope_folder(scope: str) -> str:
    """``agents/<agent>`` or ``teams/<team>`` for a private scope; :class:`InvalidInput` for anything else."""
    kind, name = scope_parts(scope)
    if kind not in SCOPE_FOLDERS or not is_id(name):
        raise InvalidInput(f"{scope[:80]!r} is not a team or agent scope")
    return f"{SCOPE_FOLDERS[kind]}/{name}"


def confine_resolved(files: FileStore | None, folder: str, path: str) -> None:
    """If ``files`` is local (has a ``root``), refuse ``path`` when its resolved form leaves ``folder``'s."""
    root = getattr(files, "root", None)
    if not isinstance(root, Path):
        return
    base = (root / folder).resolve()
    if not (root / path).resolve().is_relative_to(base):
        raise InvalidInput(f"{path!r} resolves outside {folder!r}")
