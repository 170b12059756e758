"""The templated scene text of the heuristic engine, and reading it back.

Why re-parseable: the heuristic engine has no model to rewrite a scene, so an update re-renders the scene from
its items (old ones parsed back from the body, new atoms added). Each item is one line
``- [YYYY-MM-DD] content <!-- atom-id -->``: readable in any Markdown viewer (the comment is hidden), and the id
makes drill-down exact. Sections follow the spec template's headings that a template can honestly fill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mnemoflow.memory.links import visible_len
from mnemoflow.memory.scenes.model import MAX_SCENE_CHARS

SECTIONS = (("persona", "## core traits"), ("instruction", "## preferences"), ("episodic", "## core narrative"))
_ITEM = re.compile(r"^- \[(\d{4}-\d{2}-\d{2})\] (.*) <!-- (\S+) -->$")


@dataclass(frozen=True, slots=True)
class Item:
    """One remembered line of a scene: the atom it came from, its type, day and text."""

    id: str
    type: str
    day: str
    content: str
    priority: int = 50


def parse_items(body: str) -> list[Item]:
    """Items of a templated body; lines of a model-written body that do not match are ignored."""
    kind = "episodic"
    items = []
    for line in body.splitlines():
        line = line.strip()
        for section_type, heading in SECTIONS:
            if line == heading:
                kind = section_type
        m = _ITEM.match(line)
        if m:
            items.append(Item(id=m.group(3), type=kind, day=m.group(1), content=m.group(2)))
    return items


def _line(item: Item) -> str:
    text = " ".join(item.content.replace("<!--", "").replace("-->", "").split())
    return f"- [{item.day}] {text} <!-- {item.id} -->"


def render_items(items: list[Item], limit: int = MAX_SCENE_CHARS) -> str:
    """Sections of items, chronological inside each; the lowest-priority, oldest items drop out past ``limit``
    characters as a reader sees them (the ``<!-- atom-id -->`` links do not count, :mod:`mnemoflow.memory.links`).

    A dropped item stays in the scene's META ``atoms`` list and in L1, so drill-down still reaches it.
    """
    keep = list(dict.fromkeys(items))
    while True:
        parts = []
        for kind, heading in SECTIONS:
            lines = [_line(i) for i in sorted((i for i in keep if i.type == kind), key=lambda i: (i.day, i.id))]
            if lines:
                parts.append(heading + "\n" + "\n".join(lines))
        text = "\n\n".join(parts)
        if visible_len(text) <= limit:
            return text
        if len(keep) <= 1:
            return text[:limit]
        keep.remove(min(keep, key=lambda i: (i.priority, i.day, i.id)))
