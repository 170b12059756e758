"""Where recall reads persona and scene navigation from: a small port, with the L2/L3 stores as the default.

Why a port: recall only needs two strings per user, and tests can hand it fixed ones. The default reads through
the same :class:`~mnemoflow.memory.persona.generate.PersonaStore` and :class:`~mnemoflow.memory.scenes.store.SceneStore`
that write the files, so the format has one parser.
"""

from __future__ import annotations

from typing import Protocol

from mnemoflow.memory.persona.generate import PersonaStore, render_navigation
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED


class ContextSource(Protocol):
    def persona(self, tenant: str, user: str, scope: str = SHARED) -> str:
        """The persona text of one scope of the user without any navigation block; empty when there is none."""
        ...

    def navigation(self, tenant: str, user: str, scope: str = SHARED) -> str:
        """One scope's scene navigation (live scenes, hottest first, paths under the user's folder); empty when
        none."""
        ...


class FileContextSource:
    """Reads ``persona.md`` and ``scenes/*.md`` (docs/DESIGN.md §5) of each scope through the L2/L3 stores."""

    def __init__(self, files: FileStore) -> None:
        self._files = files

    def persona(self, tenant: str, user: str, scope: str = SHARED) -> str:
        """A private scope's persona loses its title line: recall gives the part a heading that names the scope."""
        text = PersonaStore(self._files, tenant, user, scope).read_for_prompt()
        return text if scope == SHARED or not text.startswith("# ") else text.partition("\n")[2].strip()

    def navigation(self, tenant: str, user: str, scope: str = SHARED) -> str:
        """A private scope's entries come without the navigation's frame, which the shared part already has."""
        scenes = SceneStore(self._files, tenant, user, scope).load()
        if not scenes:
            return ""
        prefix = ScenePaths(tenant, user, scope).scenes_dir + "/"
        return render_navigation(scenes, prefix=prefix, framed=scope == SHARED)
