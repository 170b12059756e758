"""L3 persona: ``persona.md`` = a body of at most 2,000 characters + the scene navigation the engine appends.

Why the engine owns the file: the model (or the template) only returns the body text; code bounds it, escapes
the tags recall wraps it in (so a persona cannot close ``<user-persona>`` and inject instructions), appends a
fresh heat-sorted navigation, keeps the previous file in a rotating backup and replaces it atomically. The
2,000-character bound is on the body (docs/tdam-spec.md §3.6); the navigation adds about 150 characters per scene.
The file's first line, ``<!-- engine: llm -->``, names the engine that wrote the body (``heuristic`` also where the
model's reply fell back); it is a comment, so no prompt shows it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from mnemoflow.memory.links import strip_comments, visible_len
from mnemoflow.memory.persona.trigger import (
    PersonaState,
    after_generation,
    after_skip,
    changed_scenes,
    persona_trigger,
)
from mnemoflow.memory.scenes.model import SceneBlock, format_ts
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.ports import FileStore
from mnemoflow.scopes import SHARED

log = logging.getLogger(__name__)

MAX_PERSONA_CHARS = 2000
NAV_HEADER = "## 🗺️ Scene Navigation (Scene Index)"
_NAV_START = "\n---\n" + NAV_HEADER
_TAGS = re.compile(
    r"</?\s*(user-persona|relevant-memories|scene-navigation|relevant-scenes|memory-tools-guide|system|assistant)\s*>",
    re.IGNORECASE,
)
_NAV_PATH = re.compile(r"^### Path: (?:scenes/)?(\S+\.md)$", re.MULTILINE)
_ENGINE_LINE = re.compile(r"\A<!-- engine: (?P<engine>\w+) -->\n")


def escape_tags(text: str) -> str:
    """Our wrapper tags, opening or closing, become inert ``&lt;…&gt;`` text."""
    return _TAGS.sub(lambda m: "&lt;" + m.group(0)[1:-1] + "&gt;", text)


def strip_navigation(text: str) -> str:
    cut = text.find(NAV_HEADER)
    if cut == -1:
        return text.strip()
    head = text[:cut].rstrip()
    return head[: -len("---")].rstrip() if head.endswith("---") else head


def bound(text: str, limit: int = MAX_PERSONA_CHARS) -> str:
    """``text`` cut to ``limit`` visible characters at the last line break before it (code points, never bytes)."""
    text = text.strip()
    if visible_len(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for line in text.splitlines():
        size = visible_len(line) + 1
        if used + size > limit + 1:
            break
        kept.append(line)
        used += size
    if used > limit // 2:
        return "\n".join(kept).rstrip()
    plain = strip_comments(text)
    return plain[:limit].rstrip()


def _flames(heat: int) -> str:
    return "🔥" * sum(heat >= t for t in (50, 100, 200, 500, 1000))


def render_navigation(scenes: dict[str, SceneBlock], prefix: str = "scenes/", framed: bool = True) -> str:
    """The navigation tail (docs/tdam-spec.md §3.5): hottest first; ``prefix`` is relative in the file, absolute in
    recall. Unframed: the scene entries alone, for a part of recall's navigation that follows a framed one."""
    live = sorted((b for b in scenes.values() if not b.deleted), key=lambda b: (-b.heat, b.filename))
    lines = ["---", NAV_HEADER, "*Scene files hold the details behind this profile; open one when a topic comes up.*"]
    if not framed:
        lines = []
    for b in live:
        updated = format_ts(b.updated) if b.updated else "?"
        flames = " " + _flames(b.heat) if b.heat >= 50 else ""
        lines += [
            "",
            f"### Path: {prefix}{b.filename}",
            f"heat: {b.heat}{flames} | updated: {updated}",
            f"Summary: {b.summary}",
        ]
    if framed:
        lines += ["", "*heat: how often the scene was updated or merged; updated: last change (UTC).*"]
    return "\n".join(lines).strip("\n")


def navigation_scenes(persona_text: str) -> list[str]:
    """Scene file names listed in a persona's navigation, in order (drill-down persona → scene)."""
    return _NAV_PATH.findall(persona_text)


class PersonaStore:
    """``persona.md`` of one user in one scope, with ``backup_slots`` rotating backups of the previous file."""

    def __init__(self, files: FileStore, tenant: str, user: str, scope: str = SHARED, *, backup_slots: int = 3) -> None:
        self.files = files
        self.paths = ScenePaths(tenant, user, scope)
        self.backup_slots = backup_slots

    def read(self) -> str:
        data = self.files.read_bytes(self.paths.persona)
        return "" if data is None else data.decode("utf-8", errors="replace")

    def read_body(self) -> str:
        return body_of(self.read())

    def written_by(self) -> str:
        return written_by(self.read())

    def read_for_prompt(self) -> str:
        """The body as a prompt shows it: no navigation, no atom links."""
        return strip_comments(self.read_body()).strip()

    def write(self, body: str, scenes: dict[str, SceneBlock], engine: str = "") -> str:
        """Bound, escape, append navigation, back up the old file, replace atomically; returns the file text."""
        clean = bound(escape_tags(body_of(body.lstrip())))
        if not clean:
            raise ValueError("empty persona body")
        text = _engine_line(engine) + clean + "\n\n" + render_navigation(scenes) + "\n"
        previous = self.files.read_bytes(self.paths.persona)
        if previous is not None:
            seq_path = f"{self.paths.persona_backups}/seq"
            seq = int((self.files.read_bytes(seq_path) or b"0").decode() or 0)
            self.files.write_atomic(self.paths.persona_backup(seq % self.backup_slots), previous)
            self.files.write_atomic(seq_path, str(seq + 1).encode())
        self.files.write_atomic(self.paths.persona, text.encode())
        return text

    def refresh_navigation(self, scenes: dict[str, SceneBlock]) -> bool:
        """After an L2 pass: re-render the navigation tail if a persona body exists (docs/tdam-spec.md §3.5 step 8)."""
        current = self.read()
        body = body_of(current)
        if not body:
            return False
        text = _engine_line(written_by(current)) + body + "\n\n" + render_navigation(scenes) + "\n"
        self.files.write_atomic(self.paths.persona, text.encode())
        return True


def body_of(persona_text: str) -> str:
    """A persona file's body: without its engine line and its scene navigation."""
    return strip_navigation(_ENGINE_LINE.sub("", persona_text))


def written_by(persona_text: str) -> str:
    """The engine that wrote a persona file's body (``llm``, ``heuristic``), or "" for a file written without one."""
    found = _ENGINE_LINE.match(persona_text)
    return found["engine"] if found else ""


def _engine_line(engine: str) -> str:
    return f"<!-- engine: {engine} -->\n" if engine else ""


@dataclass(frozen=True, slots=True)
class PersonaDraft:
    """What a persona engine returns: the body, and which engine wrote it (a model engine's fallback names the
    heuristic)."""

    body: str
    engine: str


@dataclass(frozen=True, slots=True)
class PersonaContext:
    """What a persona engine writes from. ``changed`` are the scenes to focus on (all on a first run)."""

    scenes: list[SceneBlock]
    changed: list[SceneBlock]
    current: str
    mode: Literal["first", "incremental"]
    reason: str
    total_memories: int
    now: datetime


class PersonaEngine(Protocol):
    name: str
    every_n: int | None
    """Memories between two personas this engine asks for; None takes the curator's (the spec's 50, which spares
    model calls). A model-free persona costs under a millisecond, so it follows every scene pass."""

    async def write(self, ctx: PersonaContext) -> PersonaDraft:
        """The new persona body (Markdown, ≤ 2,000 characters; longer is cut at a line break)."""
        ...


@dataclass(frozen=True, slots=True)
class PersonaOutcome:
    status: Literal["generated", "skipped"]
    reason: str
    chars: int = 0
    changed: tuple[str, ...] = ()


async def generate_persona(
    persona: PersonaStore,
    scenes: SceneStore,
    engine: PersonaEngine,
    state: PersonaState,
    *,
    now: datetime,
    every_n: int = 50,
    rewrite: str | None = None,
) -> tuple[PersonaState, PersonaOutcome]:
    """Evaluate the triggers and, if one fires and a scene changed, write a new persona. Returns the new state;
    persist it only after this returns (an exception leaves the old state, so the next run retries).

    ``rewrite``: the reason to write it anew from the scenes alone, whatever the triggers say (the user deleted
    memories, so the current text may still hold them)."""
    live = scenes.load()
    current = "" if rewrite else persona.read_body()
    every_n = engine.every_n or every_n
    reason = rewrite or persona_trigger(state, scene_count=len(live), persona_exists=bool(current), every_n=every_n)
    if reason is None:
        return state, PersonaOutcome("skipped", "no trigger")
    changed = changed_scenes(live, state.last_persona_time if current else None)
    if not changed and current:
        return after_skip(state), PersonaOutcome("skipped", f"{reason}; no scene changed")
    ctx = PersonaContext(
        scenes=sorted(live.values(), key=lambda b: (-b.heat, b.filename)),
        changed=changed,
        current=current,
        mode="incremental" if current else "first",
        reason=reason,
        total_memories=state.total_processed,
        now=now,
    )
    draft = await engine.write(ctx)
    text = persona.write(draft.body, live, draft.engine)
    chars = visible_len(strip_navigation(text))
    log.info("persona %s: %s (%s), %d chars by %s", persona.paths.persona, ctx.mode, reason, chars, draft.engine)
    return after_generation(state, now), PersonaOutcome("generated", reason, chars, tuple(b.filename for b in changed))
