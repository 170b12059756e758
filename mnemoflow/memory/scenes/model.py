"""L2 scene blocks as data: the atoms a pass consumes, the block with its META header, and file names.

Why its own input model: L1 atoms are built elsewhere and may change shape; L2 needs only a handful of their
fields, so :class:`SceneInput` is the documented seam (an L1 record maps onto it field by field).

A scene file is Markdown with the META header of docs/tdam-spec.md §3.5::

    -----META-START-----
    created: 2025-01-01T00:00:00Z
    updated: 2025-01-02T00:00:00Z
    summary: one-line index summary
    heat: 3
    atoms: id1, id2
    engine: heuristic
    -----META-END-----
    ## core narrative
    ...

``atoms`` (our addition) lists the L1 atom ids the scene absorbed, so drill-down persona → scene → atom works
without asking a model; ``engine`` (ours too) names the engine that last wrote the body (``llm`` or
``heuristic``, the latter also where the model's plan fell back). ``deleted: true`` marks a soft-deleted scene (a
tombstone): the FileStore port has no delete, and a tombstone also keeps the old name taken so a later scene cannot
silently inherit its history.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from mnemoflow.ids import SafeId
from mnemoflow.memory.l1.event_time import span, tagged

MAX_SCENES = 15
"""Live scenes per user (docs/tdam-spec.md §3.5); enforced in code, not only asked of the model."""
MAX_SCENE_CHARS = 1500
"""Body characters per scene (spec template limit); keeps the L2 prompt and the persona input bounded."""
MAX_SCENE_ATOM_IDS = 400
"""Atom ids kept in META per scene, newest last; bounds the header when a scene lives for years."""
META_START = "-----META-START-----"
META_END = "-----META-END-----"
DELETED_MARKER = "[DELETED]"

AtomType = Literal["persona", "episodic", "instruction"]


class SceneInput(BaseModel):
    """One L1 atom as L2 sees it. Map an L1 record: id, type, priority, content, created/updated times."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: SafeId
    type: AtomType
    priority: int = Field(50, ge=-1, le=100)
    content: str = Field(min_length=1, max_length=4000)
    created_at: AwareDatetime
    updated_at: AwareDatetime | None = None
    said_at: AwareDatetime | None = None
    """When the fact was said (the latest of the L1 record's source message times), if known."""

    @property
    def ts(self) -> datetime:
        """The time that orders atoms and advances the L2 cursor (last update, else creation)."""
        return (self.updated_at or self.created_at).astimezone(UTC)

    @property
    def event_day(self) -> str:
        """The day the atom is about, as a scene dates it: the event day L1 resolved into the text
        (``(event: 2023-05-07)``), else the day it was said, else the day it was stored. A scene replayed or
        processed late is then dated by the conversation, not by the day the pass ran."""
        label = tagged(self.content)
        found = span(label) if label else None
        if found and found.first == found.last:  # a day, not a week, month or year
            return found.first.isoformat()
        return (self.said_at or self.ts).astimezone(UTC).date().isoformat()


@dataclass(frozen=True, slots=True)
class SceneBlock:
    """One scene file, parsed. ``created``/``updated`` are None when the header is missing or unreadable."""

    filename: str
    summary: str
    body: str
    heat: int = 0
    created: datetime | None = None
    updated: datetime | None = None
    atom_ids: tuple[str, ...] = field(default=())
    deleted: bool = False
    engine: str = ""

    def tombstone(self, now: datetime) -> SceneBlock:
        return replace(self, body=DELETED_MARKER, deleted=True, updated=now)


def format_ts(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_ts(value: str) -> datetime | None:
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render_scene(block: SceneBlock) -> str:
    """The file text of ``block``; ``parse_scene(render_scene(b))`` gives ``b`` back (times to the second)."""
    meta = [META_START]
    if block.created:
        meta.append(f"created: {format_ts(block.created)}")
    if block.updated:
        meta.append(f"updated: {format_ts(block.updated)}")
    meta += [f"summary: {_one_line(block.summary)}", f"heat: {block.heat}"]
    if block.atom_ids:
        meta.append(f"atoms: {', '.join(block.atom_ids[-MAX_SCENE_ATOM_IDS:])}")
    if block.engine:
        meta.append(f"engine: {block.engine}")
    if block.deleted:
        meta.append("deleted: true")
    meta.append(META_END)
    return "\n".join(meta) + "\n" + block.body.strip() + "\n"


def render_for_prompt(block: SceneBlock) -> str:
    """The scene as a prompt shows it: its summary, heat and last change above the body, without the META markers,
    the atom ids it absorbed or the engine that wrote it. The engine keeps those; a model needs none of them (a new
    edit lists only new memories' ids), and Qwen2.5 0.5B copied the META block, atom ids included, into the
    persona it wrote."""
    updated = format_ts(block.updated) if block.updated else "?"
    return f"summary: {_one_line(block.summary)}\nheat: {block.heat} | updated: {updated}\n\n{block.body.rstrip()}\n"


def parse_scene(filename: str, text: str) -> SceneBlock:
    """Parse a scene file leniently: no markers means the whole file is the body (docs/tdam-spec.md §3.5).

    A file whose body is empty or exactly ``[DELETED]`` counts as deleted, as the spec's cleanup rule says.
    """
    fields: dict[str, str] = {}
    body = text
    start, end = text.find(META_START), text.find(META_END)
    if start != -1 and end > start:
        for line in text[start + len(META_START) : end].splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip()
        body = text[end + len(META_END) :]
    body = body.strip()
    try:
        heat = int(fields.get("heat", "0"))
    except ValueError:
        heat = 0
    atoms = tuple(a.strip() for a in fields.get("atoms", "").split(",") if a.strip())
    deleted = fields.get("deleted", "").lower() == "true" or body in ("", DELETED_MARKER)
    return SceneBlock(
        filename=filename,
        summary=fields.get("summary", ""),
        body=body,
        heat=max(0, heat),
        created=_parse_ts(fields["created"]) if "created" in fields else None,
        updated=_parse_ts(fields["updated"]) if "updated" in fields else None,
        atom_ids=atoms,
        deleted=deleted,
        engine=fields.get("engine", ""),
    )


_DROP_CHARS = set("()[]{}<>'\"`,;:!?*|/\\=&%$#@^~+")
_REPEATS = re.compile(r"([-_.])\1+")
SAFE_SCENE_NAME = re.compile(r"[^\W_][\w.-]{0,95}\.md", re.UNICODE)
"""What a normalised name looks like: word characters (CJK included), ``-``, ``_``, ``.``, ending ``.md``."""


_TEXT_SUFFIX = re.compile(r"(?:\.(?:md|markdown|txt))+$", re.IGNORECASE)
"""Text-file suffixes a model adds to a proposed name (Qwen2.5 0.5B: ``new_scene1.txt``); ``.md`` is added back."""


def normalize_filename(raw: str, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """docs/tdam-spec.md §3.5 step 6: a safe, unique ``.md`` name from whatever the model (or a keyword list) proposed.

    Whitespace becomes ``-``; punctuation and path characters are dropped (so ``../x`` cannot survive);
    repeated separators collapse; an empty stem becomes ``scene``; collisions with ``taken`` get ``-2``, ``-3``….
    """
    name = _TEXT_SUFFIX.sub("", unicodedata.normalize("NFKC", raw).strip())
    out = []
    for ch in name:
        if ch.isspace():
            out.append("-")
        elif ch in _DROP_CHARS or unicodedata.category(ch).startswith("C"):
            continue
        elif ch.isalnum() or ch in "-_.":
            out.append(ch.lower())
    stem = _REPEATS.sub(r"\1", "".join(out)).strip("-_.")[:80].strip("-_.") or "scene"
    candidate = f"{stem}.md"
    n = 2
    while candidate in taken:
        if n > 1000:
            raise ValueError(f"no free scene name for {raw!r}")
        candidate = f"{stem}-{n}.md"
        n += 1
    return candidate
