"""L1.5 task boundary judge (docs/tdam-spec.md §5.4): on each new user message, continue / new long task / short task.

The decision and its boundary (from which entry seq on tool calls belong to which canvas) go into the session
state, which the caller saves: nothing lives in memory only, so a shard restart continues where it was (TDAM kept
boundaries in runtime arrays, docs/tdam-spec.md §9.10). Each user message is judged once (by fingerprint). The heuristic
judge is deterministic; the LLM judge validates its reply (an invalid reply is repaired once by the LLM port; after
that, or when the model does not answer, the caller judges that message with the heuristic: TDAM's fail-safe was a
plain "short", which lost a long task's canvas whenever the model failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from mnemoflow.offload.canvas import Canvas
from mnemoflow.offload.decisions import Boundary, BoundaryKind
from mnemoflow.offload.goal import task_goal
from mnemoflow.offload.session_state import SessionState
from mnemoflow.ports.llm import LLM
from mnemoflow.prompts import offload_boundary

_TASK_RE = re.compile(
    r"\b(fix|implement|add|refactor|debug|write|create|build|update|change|make|resolve|investigate|migrate|"
    r"issue|bug|repository|test|error|cancel|book|modify|exchange|return)\b"
    r"|修复|实现|添加|增加|重构|调试|编写|写一个|创建|构建|更新|修改|解决|排查|迁移|报错|错误|测试|预订|取消|退货|退款|更换",
    re.I,
)
_CONTINUE_RE = re.compile(
    r"^\s*((continue|go on|go ahead|yes|ok(ay)?|sure|try again|retry|proceed|next|thanks?)\b"
    r"|继续|接着|好的|好吧|是的|可以|再试|重试|下一步|谢谢|(好|对|行)(?=[，,。！!？?\s]|$))",
    re.I,
)
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_CJK_WEIGHT = 3
"""A Chinese character says about as much as three Latin letters (a word of 1.5 characters against one of 5 and a
space), so a request's length is counted in Latin letters: 100 characters of Chinese are a long request."""


def _length(text: str) -> int:
    return len(text) + (_CJK_WEIGHT - 1) * len(_CJK.findall(text))


_STOP = frozenset("the a an to of in on for and or is are be this that with i you me my please can could".split())


@dataclass(frozen=True, slots=True)
class Judgement:
    decision: BoundaryKind
    label: str | None = None
    goal: str | None = None
    source: str = "heuristic"


def make_label(text: str) -> str:
    """kebab-case label of at most 30 characters from the first significant words."""
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", text) if w.lower() not in _STOP]
    label = ""
    for w in words[:6]:
        nxt = f"{label}-{w}" if label else w
        if len(nxt) > 30:
            break
        label = nxt
    return label or "task"


def heuristic_judge(user_text: str, active_canvas: str | None) -> Judgement:
    """Short follow-ups continue; a long or task-like request starts a new long task, its goal and label taken from
    the request's own title or first sentence (:func:`~mnemoflow.offload.goal.task_goal`); the rest is short. In
    English and Chinese: the cue words of both, lengths counted as :func:`_length` counts them."""
    text = user_text.strip()
    size = _length(text)
    if active_canvas and (_CONTINUE_RE.match(text) or size < 40):
        return Judgement("continue")
    if size > 300 or (_TASK_RE.search(text) and size > 60):
        goal = task_goal(text)
        return Judgement("new_long", make_label(goal), goal)
    return Judgement("continue") if active_canvas else Judgement("short")


async def llm_judge(user_text: str, history: list[str], active_mermaid: str | None, llm: LLM) -> Judgement:
    reply = await llm.complete(
        offload_boundary.build(user_text, history, active_mermaid),
        offload_boundary.BoundaryReply,
        max_tokens=160,
        stage="offload_boundary",
    )
    decision: BoundaryKind = reply.decision
    if decision == "continue" and active_mermaid is None:
        decision = "short"
    if decision == "new_long":
        goal = reply.goal or task_goal(user_text)
        return Judgement("new_long", reply.label or make_label(goal), goal, "llm")
    return Judgement(decision, source="llm")


def apply_judgement(
    state: SessionState, judgement: Judgement, user_fingerprint: str, now: datetime, start: int | None = None
) -> tuple[SessionState, Canvas | None]:
    """The new state and, for a new long task, the empty canvas to save as ``state.active_canvas``.

    The boundary starts at ``start``: the first entry that answers a call made after the judged user message, when
    the log holds one already (the stream worker can store a task's first results before its first compaction),
    else the next entry (``last_seq + 1``). A boundary at the same seq replaces the previous one (several user
    messages before any tool call).
    """
    start = state.last_seq + 1 if start is None else start
    canvas: Canvas | None = None
    active, counter = state.active_canvas, state.canvas_counter
    if judgement.decision == "new_long":
        counter += 1
        prefix = f"{counter:03d}"
        active = f"{prefix}-{judgement.label or 'task'}.mmd"
        canvas = Canvas(task_goal=judgement.goal or judgement.label or "task", created=now, updated=now, prefix=prefix)
    elif judgement.decision == "short" or active is None:
        active = None
    boundary = Boundary(
        start_seq=start,
        kind="long" if active else "short",
        canvas=active,
        decision=judgement.decision,
        user_fingerprint=user_fingerprint,
        source=judgement.source,
        at=now,
    )
    kept = tuple(b for b in state.boundaries if b.start_seq != start)
    update = {
        "boundaries": (*kept, boundary),
        "active_canvas": active,
        "canvas_counter": counter,
        "last_user_fingerprint": user_fingerprint,
    }
    return state.model_copy(update=update), canvas


def canvas_for_seq(state: SessionState, seq: int) -> str | None:
    """The canvas an entry belongs to: the latest boundary starting at or before ``seq`` (None: short segment)."""
    owner = None
    for b in sorted(state.boundaries, key=lambda b: b.start_seq):
        if b.start_seq <= seq:
            owner = b.canvas
    return owner
