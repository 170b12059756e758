"""A skill as data and as its Markdown file: the procedure one or more finished tasks taught.

A skill file is Markdown with the META header the scenes use (:mod:`mnemoflow.memory.scenes.model`)::

    -----META-START-----
    name: django-admin-get-inlines
    created: 2025-01-01T00:00:00Z
    updated: 2025-01-02T00:00:00Z
    version: 2
    uses: 0
    engine: heuristic
    area: django/contrib/admin
    tools: execute_bash, str_replace_editor
    sources: sess-1#001, sess-2#002
    -----META-END-----
    # django-admin-get-inlines

    ## When to use
    A request like: add a ModelAdmin.get_inlines() hook … (django/contrib/admin)

    ## Steps
    1. Explore: view django/contrib/admin/options.py [from sess-1#001-N1]

    ## Pitfalls
    - python3 test_inlines.py: AppRegistryNotReady: Apps aren't loaded yet. [from sess-1#001-N4]

Why every step and pitfall ends with ``[from <session>#<node id>]``: that is the drill-down (skill → canvas node →
offload entries → raw refs, byte-exact), and a node id carries its canvas's number (``001-N4`` lives in
``canvases/001-*.mmd``), so the reference needs nothing else. ``sources`` (``<session>#<canvas number>``) lists the
tasks a skill was distilled from: distilling the same task twice finds it there and adds nothing.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from mnemoflow.ids import SafeId, check_id
from mnemoflow.lexical import is_chinese
from mnemoflow.memory.scenes.model import META_END, META_START, format_ts
from mnemoflow.offload.canvas.model import NODE_ID_PATTERN, NodeId

MAX_STEPS, MAX_PITFALLS, MAX_LINE = 8, 6, 160
"""Bounds on a skill's parts; :func:`within_budget` holds the whole file to :data:`SKILL_TOKENS`."""
SKILL_TOKENS = 800
WHEN_MAX = 240
NAME_PATTERN = r"[a-z0-9\u4e00-\u9fff][a-z0-9\u4e00-\u9fff-]{0,47}"
"""Lower-case slug (CJK allowed), at most 48 characters: the file name, the index entry and the API path part."""

RESERVED_NAMES = frozenset({"export"})
"""Words the API's ``GET /v1/skills/<word>`` routes take before a skill's name (the skills bundle): no skill is
stored under one, so every skill stays readable by name."""

SkillName = Annotated[str, StringConstraints(pattern=f"^{NAME_PATTERN}$")]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def _one_line(limit: int, value: str) -> str:
    text = " ".join(value.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


Line = Annotated[str, AfterValidator(lambda v: _one_line(MAX_LINE, v)), Field(min_length=1)]


class NodeRef(BaseModel):
    """Where a step or pitfall came from: a canvas node of a session (its canvas is the node id's prefix)."""

    model_config = _FROZEN

    session: SafeId
    node_id: NodeId

    def __str__(self) -> str:
        return f"{self.session}#{self.node_id}"

    @property
    def canvas_prefix(self) -> str:
        """``001`` of ``001-N4``: the number of the canvas file that holds the node."""
        return self.node_id.split("-", 1)[0]


class SkillStep(BaseModel):
    """One step of the procedure: the stage, what was done (commands, files), and the node it came from."""

    model_config = _FROZEN

    text: Line
    source: NodeRef


class Pitfall(BaseModel):
    """What failed on the way and why (a ``blocked`` node's failure), and the node it came from."""

    model_config = _FROZEN

    text: Line
    source: NodeRef


class Skill(BaseModel):
    """A versioned procedure: when to use it, its steps and pitfalls, the tools and the tasks it came from."""

    model_config = _FROZEN

    name: SkillName
    when_to_use: Annotated[str, AfterValidator(lambda v: _one_line(WHEN_MAX, v)), Field(min_length=1)]
    area: str = Field("", max_length=120, description="Where in a project it applies, e.g. django/contrib/admin.")
    steps: tuple[SkillStep, ...] = Field((), max_length=MAX_STEPS)
    pitfalls: tuple[Pitfall, ...] = Field((), max_length=MAX_PITFALLS)
    tools: tuple[str, ...] = ()
    sources: tuple[str, ...] = Field((), description="``<session>#<canvas number>`` of each task it came from.")
    created: datetime
    updated: datetime
    version: int = Field(1, ge=1)
    uses: int = Field(0, ge=0)
    engine: str = "heuristic"


def task_key(session: str, canvas_prefix: str) -> str:
    """The ``sources`` entry of one task: ``<session>#<canvas number>``."""
    return f"{check_id(session)}#{canvas_prefix}"


_REF_RE = re.compile(rf"\s*\[from ([A-Za-z0-9_.:@-]+)#({NODE_ID_PATTERN})\]\s*$")
_STEP_RE = re.compile(r"^\d+\.\s+(.*)$")
_CHINESE_HEADINGS = {"when": "适用场景", "steps": "步骤", "pitfalls": "坑与教训"}
_ENGLISH_HEADINGS = {"when": "When to use", "steps": "Steps", "pitfalls": "Pitfalls"}


def headings(chinese: bool) -> dict[str, str]:
    """Section headings in the task's language (a Chinese task's skill reads in Chinese)."""
    return _CHINESE_HEADINGS if chinese else _ENGLISH_HEADINGS


def render_skill(skill: Skill) -> str:
    """The file text of ``skill``; :func:`parse_skill` gives it back (times to the second)."""
    h = headings(is_chinese([skill.when_to_use]))
    meta = [
        META_START,
        f"name: {skill.name}",
        f"created: {format_ts(skill.created)}",
        f"updated: {format_ts(skill.updated)}",
        f"version: {skill.version}",
        f"uses: {skill.uses}",
        f"engine: {skill.engine}",
        f"area: {skill.area}",
        f"tools: {', '.join(skill.tools)}",
        f"sources: {', '.join(skill.sources)}",
        META_END,
    ]
    body = [f"# {skill.name}", "", f"## {h['when']}", skill.when_to_use, "", f"## {h['steps']}"]
    body += [f"{i}. {s.text} [from {s.source}]" for i, s in enumerate(skill.steps, start=1)]
    if skill.pitfalls:
        body += ["", f"## {h['pitfalls']}"]
        body += [f"- {p.text} [from {p.source}]" for p in skill.pitfalls]
    return "\n".join(meta + body) + "\n"


def _ref(line: str) -> tuple[str, NodeRef] | None:
    match = _REF_RE.search(line)
    if match is None:
        return None
    return line[: match.start()].strip(), NodeRef(session=match.group(1), node_id=match.group(2))


def _list(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def _time(value: str | None) -> datetime:
    if not value:
        return datetime.fromtimestamp(0, UTC)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def parse_skill(text: str) -> Skill:
    """Parse a skill file (raises ``ValueError`` with the reason when it is not one: a hand edit that broke it)."""
    start, end = text.find(META_START), text.find(META_END)
    if start == -1 or end < start:
        raise ValueError("no META header")
    fields: dict[str, str] = {}
    for line in text[start + len(META_START) : end].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    section, when, steps, pitfalls = "", [], [], []
    titles = {v: k for k, v in {**_ENGLISH_HEADINGS}.items()} | {v: k for k, v in _CHINESE_HEADINGS.items()}
    for line in text[end + len(META_END) :].splitlines():
        if line.startswith("## "):
            section = titles.get(line[3:].strip(), "")
        elif section == "when" and line.strip():
            when.append(line.strip())
        elif section == "steps" and (match := _STEP_RE.match(line)) and (ref := _ref(match.group(1))):
            steps.append(SkillStep(text=ref[0], source=ref[1]))
        elif section == "pitfalls" and line.startswith("- ") and (ref := _ref(line[2:])):
            pitfalls.append(Pitfall(text=ref[0], source=ref[1]))
    return Skill(
        name=fields.get("name", ""),
        when_to_use=" ".join(when),
        area=fields.get("area", ""),
        steps=tuple(steps),
        pitfalls=tuple(pitfalls),
        tools=_list(fields.get("tools", "")),
        sources=_list(fields.get("sources", "")),
        created=_time(fields.get("created")),
        updated=_time(fields.get("updated")),
        version=int(fields.get("version") or 1),
        uses=int(fields.get("uses") or 0),
        engine=fields.get("engine", "heuristic"),
    )


def parse_edit(text: str, name: str) -> Skill:
    """A person's edit of skill ``name`` (the API's body, the dashboard's form, the CLI's file): ValueError with the
    reason when it is not a skill file or names another skill."""
    try:
        edited = parse_skill(text)
    except ValueError as exc:
        raise ValueError(f"not a skill file: {exc}") from exc
    if edited.name != name:
        raise ValueError(f"the file names skill {edited.name!r}, not {name!r}")
    return edited


def within_budget(skill: Skill, budget: int = SKILL_TOKENS) -> Skill:
    """``skill`` with its last pitfalls, then its middle steps, left out until its file is ``budget`` o200k tokens
    or fewer (a step or pitfall left out still drills down from the canvas it came from)."""
    from mnemoflow.tokens import count_tokens  # the tokenizer loads only where a skill is written

    while count_tokens(render_skill(skill)) > budget:
        if skill.pitfalls:
            skill = skill.model_copy(update={"pitfalls": skill.pitfalls[:-1]})
        elif len(skill.steps) > 2:
            skill = skill.model_copy(update={"steps": (*skill.steps[:-2], skill.steps[-1])})
        else:
            break
    return skill
