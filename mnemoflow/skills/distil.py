"""Distil one finished long task into a skill, without a model (the heuristic engine).

What a skill needs is already on the task's canvas: its stages in order, ``done`` and ``blocked`` nodes, and the
tool calls behind each node, whose arguments say which commands ran and which files changed. The rules:

* **Success.** Only a task whose last verifying call (a test, or a script run after the first edit) passed becomes
  a skill; a task with no edit or no verification is not known to have worked. A task that did not succeed still
  yields its pitfalls, which :mod:`mnemoflow.skills.merge` may add to a skill that exists.
* **Steps** are the task's non-failed nodes in the order their first call ran (a node still ``doing`` when the
  task succeeded counts as done): the stage, then the files it changed or read and the commands it ran, with the
  last passing command for a test stage (the one that showed the fix). A node that only wrote a throwaway script
  (``reproduce.py``) is not a step: its run is.
* **Pitfalls** are the ``blocked`` nodes of shell calls: the command and the failure line the canvas kept. An
  editor's refusal (``old_str`` not found, file exists) is about using the tool, and a search that found nothing
  (``grep`` exits 1) about the search; neither is about the task, and both are left out.
* **When to use** is the task's goal (the request that opened it) and the code area it changed: the deepest
  folder the changed non-test files share, relative to the project root (``django/contrib/admin``).

Paths are shown relative to the project root (``/workspace/django__django__3.0``; see :func:`project_root`), so a
skill learnt in one checkout reads the same in another.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from mnemoflow.lexical import is_chinese
from mnemoflow.offload.boundary import make_label
from mnemoflow.offload.canvas.model import Canvas, CanvasNode
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.offload.intent import CallIntent, call_arguments, call_intent, strip_shell_prefix
from mnemoflow.skills.model import (
    MAX_LINE,
    MAX_PITFALLS,
    MAX_STEPS,
    NodeRef,
    Pitfall,
    Skill,
    SkillStep,
    task_key,
    within_budget,
)

_TEST_PATH_RE = re.compile(r"(?:^|/)(?:tests?|testing)/|(?:^|/)test_[^/]*$|_test\.\w+$|(?:^|/)conftest\.py$")
_SCRATCH_RE = re.compile(r"(?:^|/)(?:repro|reproduce|reproduction|debug|demo|scratch)[^/]*$", re.I)
_ABS_PATH_RE = re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)*[\w.@+-]+")
_ITEMS = 3
_NAME_WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*|[\u4e00-\u9fff]+")
_STAGES_ZH = {
    "Explore": "探索",
    "Reproduce": "复现",
    "Edit": "修改",
    "Test": "测试",
    "Verify": "验证",
    "Setup": "准备环境",
    "Act": "操作",
    "Plan": "计划",
}
"""The heuristic canvas's stage names (:data:`mnemoflow.offload.canvas_heuristic.STAGES`) in a Chinese skill."""
_LAYOUT_DIRS = frozenset({"lib", "src", "source", "pkg", "packages", "python", "app", "apps"})
"""Folders of a project's layout, not its name: ``lib/matplotlib`` names its skills ``matplotlib-…``."""
_CD_RE = re.compile(r"(?:^|&&|;|\n)\s*cd\s+(/[^\s;&|]+)")


@dataclass(frozen=True, slots=True)
class TaskTrace:
    """One long task as the distiller reads it: its canvas, the calls on it, and which of them failed.

    ``failures`` maps a tool_call_id to its failure line (None: it did not fail); the caller fills it from the
    offload entries' ``error`` and, where a call was not summarised yet, from its raw output."""

    session: str
    canvas_name: str
    canvas: Canvas
    entries: Mapping[str, OffloadEntry]
    failures: Mapping[str, str | None]

    @property
    def key(self) -> str:
        return task_key(self.session, self.canvas.prefix or "000")


@dataclass(frozen=True, slots=True)
class Distilled:
    """What a task taught: its skill, which only a task that ``succeeded`` may store (the pitfalls of one that did
    not may still join a skill that exists); ``reason`` says why it did or did not. ``skill`` is None for a task
    with no calls."""

    skill: Skill | None
    succeeded: bool
    reason: str


@dataclass(frozen=True, slots=True)
class _Call:
    entry: OffloadEntry
    intent: CallIntent
    failed: str | None


def _calls(trace: TaskTrace, node: CanvasNode) -> list[_Call]:
    calls = [
        _Call(e, call_intent(e.tool_name, e.arguments), trace.failures.get(e.tool_call_id))
        for tid in node.tool_call_ids
        if (e := trace.entries.get(tid)) is not None
    ]
    return sorted(calls, key=lambda c: c.entry.seq)


def project_root(paths: Sequence[str], changed: Sequence[str] = (), cd_targets: Sequence[str] = ()) -> str:
    """The folder paths are shown relative to (see the module docstring); ``""`` when there are no absolute ones.

    Start from the deepest folder the agent ``cd``-ed into that holds most changed code files (agents run commands
    from the project root), else the common parent of every path; then go down into the one folder holding the
    changed code when all else there is loose files (``/workspace`` with a checkout and a ``reproduce.py``), but
    not when it has other folders (a checkout's ``django/`` beside its ``tests/``) or the folder is a package."""
    absolute = sorted({p for p in [*paths, *changed] if p.startswith("/")})
    if not absolute:
        return ""
    code = [p for p in changed if p.startswith("/") and _is_code(p)]
    holding = [
        t.rstrip("/") for t in set(cd_targets) if 2 * sum(p.startswith(t.rstrip("/") + "/") for p in code) > len(code)
    ]
    root = max(holding, key=len) if holding and code else posixpath.commonpath(absolute)
    inside = [p[len(root) :].strip("/") for p in absolute if p.startswith(root + "/")]
    nested = [p[len(root) :].strip("/") for p in code if p.startswith(root + "/")]
    children = {r.split("/", 1)[0] for r in nested}
    if len(children) == 1 and all("/" in r for r in nested):  # one folder, not a file, holds the code
        child = children.pop()
        loose = [r for r in inside if r != child and not r.startswith(child + "/")]
        # A package folder (an identifier: ``django``, ``sklearn``) is code, not a checkout to go into.
        if loose and all("/" not in r for r in loose) and not child.isidentifier():
            return posixpath.join(root, child)
    return root


def _cd_targets(calls: Sequence[_Call]) -> list[str]:
    """Absolute folders the calls' shell commands ``cd`` into."""
    return [t for c in calls for t in _CD_RE.findall(str(call_arguments(c.entry.arguments).get("command") or ""))]


def _relative(text: str, root: str) -> str:
    if not root or root == "/":
        return text
    return text.replace(root + "/", "").replace(root, ".")


def _mentioned_paths(calls: Sequence[_Call]) -> list[str]:
    found: list[str] = []
    for call in calls:
        if call.intent.path:
            found.append(call.intent.path)
        found += _ABS_PATH_RE.findall(call.intent.target)
    return found


def _is_code(path: str) -> bool:
    return not _TEST_PATH_RE.search(path) and not _SCRATCH_RE.search(path)


def code_area(changed: Sequence[str]) -> str:
    """The deepest folder the changed files share (at most three levels), e.g. ``django/contrib/admin``."""
    dirs = [posixpath.dirname(p) for p in changed if p and not p.startswith(("/", "."))]
    if not dirs:
        return ""
    common = posixpath.commonpath(dirs) if len(dirs) > 1 else dirs[0]
    return "/".join(common.split("/")[:3])


def _step_text(stage: str, calls: Sequence[_Call], root: str, changed: set[str]) -> str:
    """``Edit: django/contrib/admin/options.py (str_replace)``: what a stage did that a next task can repeat."""
    items: list[str] = []
    edits = [c for c in calls if c.intent.intent == "edit" and c.intent.path and not _SCRATCH_RE.search(c.intent.path)]
    runs = [c for c in calls if c.intent.intent in ("test", "run") and not c.failed]
    if edits:
        verbs: dict[str, list[str]] = {}
        for c in edits:
            verb = c.intent.target.split(" ", 1)[0]
            done = verbs.setdefault(_relative(c.intent.path or "", root), [])
            if verb not in done:
                done.append(verb)
        items += [f"{path} ({', '.join(v)})" for path, v in verbs.items()]
    if runs:
        items.append(_relative(strip_shell_prefix(runs[-1].intent.target), root))
    if not items and all(c.intent.intent == "edit" for c in calls):
        return ""  # only a throwaway script written: not a step a next task repeats
    if not items:
        read = [_relative(c.intent.path, root) for c in calls if c.intent.path]
        read.sort(key=lambda p: p not in changed)  # the files the task went on to change first
        items += list(dict.fromkeys(read))
        items += [_relative(strip_shell_prefix(c.intent.target), root) for c in calls if not c.intent.path]
    items = list(dict.fromkeys(i for i in items if i))
    shown: list[str] = []
    for item in items[:_ITEMS]:
        if shown and len(stage) + sum(len(s) + 2 for s in [*shown, item]) > MAX_LINE - 14:
            break
        shown.append(item)
    more = len(items) - len(shown)
    return f"{stage}: {'; '.join(shown)}" + (f" (+{more} more)" if more > 0 else "")


def _name(trace: TaskTrace, area: str) -> str:
    """A slug: the project folder's first part and the canvas label (``django-add-modeladmin-get-inlines``)."""
    label = trace.canvas_name.removesuffix(".mmd")
    label = label.split("-", 1)[1] if re.match(r"\d{3}-", label) else label
    goal = trace.canvas.task_goal
    head = next((part.lower() for part in area.split("/") if part.lower() not in _LAYOUT_DIRS), "")
    if is_chinese([goal]):  # the canvas label keeps only the Latin words of a Chinese goal
        words = [w for w in _NAME_WORD_RE.findall(goal) if w.lower() != head]
        label = "-".join(words)[:20].rstrip("-") or label
    elif label in ("", "task"):
        label = make_label(goal)
    name = label if not head or label.startswith(head) else f"{head}-{label}"
    name = re.sub(r"[^a-z0-9\u4e00-\u9fff-]+", "-", name.lower()).strip("-")
    return re.sub(r"-{2,}", "-", name)[:48].rstrip("-") or "skill"


def _verified(calls: Sequence[_Call]) -> tuple[bool, str]:
    """Whether the last verifying call after the first edit passed (see the module docstring)."""
    first_edit = next((i for i, c in enumerate(calls) if c.intent.intent == "edit"), None)
    if first_edit is None:
        return False, "no edit"
    checks = [c for c in calls[first_edit:] if c.intent.intent in ("test", "run")]
    if not checks:
        return False, "no verification after the last edit"
    if checks[-1].failed:
        return False, f"the last check failed: {checks[-1].failed}"
    return True, "verified"


def pitfalls_of(trace: TaskTrace, root: str) -> tuple[Pitfall, ...]:
    """The blocked shell calls of the task, one per distinct failure, oldest first."""
    out: dict[str, Pitfall] = {}
    for node in trace.canvas.nodes:
        if node.status != "blocked":
            continue
        for call in _calls(trace, node):
            # An editor's refusal is about the tool, and a search that found nothing about the search, not the task.
            if not call.failed or call.intent.path or call.intent.intent == "explore":
                continue
            failure = _relative(call.failed, root)
            command = _relative(strip_shell_prefix(call.intent.target), root)
            if failure not in out:
                out[failure] = Pitfall(
                    text=f"{command[:60]} → {failure}", source=NodeRef(session=trace.session, node_id=node.id)
                )
    return tuple(sorted(out.values(), key=lambda p: int(p.source.node_id.rsplit("N", 1)[1]))[:MAX_PITFALLS])


def distil(trace: TaskTrace, now: datetime) -> Distilled:
    """The skill of ``trace`` and whether it succeeded (see the module docstring)."""
    by_node = {n.id: _calls(trace, n) for n in trace.canvas.nodes}
    every = sorted((c for calls in by_node.values() for c in calls), key=lambda c: c.entry.seq)
    if not every:
        return Distilled(None, False, "no calls")
    edits = [c for c in every if c.intent.intent == "edit" and c.intent.path]
    edited = [c.intent.path or "" for c in edits]
    root = project_root(_mentioned_paths(every), edited, _cd_targets(every))
    ok, reason = _verified(every)
    changed = [_relative(p, root) for p in edited]
    # Files the task modified say where the fix is; files it created (a test app, a helper) only when none were.
    modified = [_relative(c.intent.path or "", root) for c in edits if not c.intent.target.startswith("create ")]
    area = code_area([p for p in modified if _is_code(p)] or [p for p in changed if _is_code(p)])
    live = [n for n in trace.canvas.nodes if n.status != "blocked" and by_node[n.id]]
    live.sort(key=lambda n: by_node[n.id][0].entry.seq)
    chinese = is_chinese([trace.canvas.task_goal])
    stage = {n.id: _STAGES_ZH.get(n.stage, n.stage) if chinese else n.stage for n in live}
    texts = {n.id: _step_text(stage[n.id], by_node[n.id], root, set(changed)) for n in live}
    steps = [
        SkillStep(text=texts[n.id], source=NodeRef(session=trace.session, node_id=n.id)) for n in live if texts[n.id]
    ]
    goal = trace.canvas.task_goal
    skill = within_budget(
        Skill(
            name=_name(trace, area),
            when_to_use=f"{goal} ({area})" if area else goal,
            area=area,
            steps=tuple(_fit_steps(steps)),
            pitfalls=pitfalls_of(trace, root),
            tools=tuple(dict.fromkeys(c.entry.tool_name for c in every)),
            sources=(trace.key,),
            created=now,
            updated=now,
        )
    )
    return Distilled(skill, ok, reason)


def _fit_steps(steps: list[SkillStep]) -> list[SkillStep]:
    """At most :data:`MAX_STEPS`: the first, the last and those with the most content between."""
    if len(steps) <= MAX_STEPS:
        return steps
    middle = sorted(range(1, len(steps) - 1), key=lambda i: -len(steps[i].text))[: MAX_STEPS - 2]
    return [steps[0], *(steps[i] for i in sorted(middle)), steps[-1]]
