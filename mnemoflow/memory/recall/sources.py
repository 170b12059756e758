"""Where recall reads persona and scene navigation from: a small port, with the L2/L3 stores as the default.

Why a port: recall only needs two strings per user, and tests can hand it fixed ones. The default reads through
the same :class:`~mnemoflow.memory.persona.generate.PersonaStore` and :class:`~mnemoflow.memory.scenes.store.SceneStore`
that write the files, so the format has one parser.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from mnemoflow.memory.persona.generate import PersonaStore, render_navigation
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.ports import FileStore


class ContextSource(Protocol):
    def persona(self, tenant: str, user: str) -> str:
        """The user's persona text without any navigation block; empty when there is none."""
        ...

    def navigation(self, tenant: str, user: str) -> str:
        """The scene navigation (live scenes, hottest first, paths under the user's folder); empty when none."""
        ...


class FileContextSource:
    """Reads ``persona.md`` and ``scenes/*.md`` (docs/DESIGN.md §5) through the L2/L3 stores."""

    def __init__(self, files: FileStore) -> None:
        self._files = files

    def persona(self, tenant: str, user: str) -> str:
        return PersonaStore(self._files, tenant, user).read_for_prompt()

    def navigation(self, tenant: str, user: str) -> str:
        scenes = SceneStore(self._files, tenant, user).load()
        if not scenes:
            return ""
        return render_navigation(scenes, prefix=ScenePaths(tenant, user).scenes_dir + "/")


def context_digest(files: FileStore, tenant: str, user: str) -> str:
    """What recall's system context is made of (the persona and scene files, read raw), hashed: any rewrite
    changes it, so a recall kept for reuse is dropped when the context it rendered changed."""
    paths, digest = ScenePaths(tenant, user), hashlib.blake2b(digest_size=16)
    for path in (paths.persona, *(paths.scene(name) for name in SceneStore(files, tenant, user).names())):
        digest.update(path.encode() + b"\0" + (files.read_bytes(path) or b"") + b"\0")
    return digest.hexdigest()
