"""Where and how the task canvas enters the prompt (docs/tdam-spec.md §5.6).

The active canvas goes right after the latest user message when that message is in the second half of the array
(the agent reads its task, then its map); otherwise at the start of the trailing tool loop, but at most
``tail`` messages from the end, so it stays near the model's attention. It never lands between an assistant tool
call and its results. History canvases (finished tasks whose messages were dropped) go just before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mnemoflow.offload.messages import Message, is_injected, last_user, system_prefix
from mnemoflow.tokens import message_tokens


@dataclass(frozen=True, slots=True)
class CanvasText:
    """A rendered canvas and what the injected message says about it."""

    name: str
    mermaid: str
    goal: str = ""


def insertion_point(messages: list[Message], tail: int = 30) -> int:
    """Index at which to insert the active canvas message (``messages`` holds no earlier injection)."""
    n = len(messages)
    floor = system_prefix(messages)
    if n <= 2:
        return max(floor, min(n, 1)) if n else 0
    u = last_user(messages)
    if u is not None and u >= n // 2:
        idx = u + 1
    else:
        loop = n
        while (
            loop > 0 and messages[loop - 1].get("role") in ("tool", "assistant") and not is_injected(messages[loop - 1])
        ):
            loop -= 1
        idx = min(max(loop, n - tail), n - 1)
    # pair guard: step back over tool results to their assistant call
    while 0 < idx < n and messages[idx].get("role") == "tool":
        idx -= 1
    return max(idx, floor)


_NODE = re.compile(r'^\s*([A-Za-z0-9_-]+)\["(.*)"\]\s*$')


def node_index(mermaid: str) -> list[str]:
    """``id: Stage: action (status)`` per node of a rendered canvas: the spec's meta-only view. Summaries are left
    out, except a tombstone's (``(blocked: <error line>)``): it is what tells the agent not to walk that path again.
    """
    out = []
    for line in mermaid.splitlines():
        match = _NODE.match(line)
        if not match:
            continue
        parts = match.group(2).split("<br/>")
        field = {k: v.strip() for k, _, v in (p.partition(":") for p in parts[1:])}
        status = field.get("status", "")
        if status == "blocked" and field.get("summary"):
            status = f"blocked: {field['summary']}"
        out.append(f"{match.group(1)}: {parts[0]}" + (f" ({status})" if status else ""))
    return out


def active_message(canvas: CanvasText, budget: int | None = None) -> Message:
    """The user-role message carrying the active task canvas; over ``budget`` tokens, its node index only."""
    goal = f"task goal: {canvas.goal}\n" if canvas.goal else ""
    text = (
        f'<current_task_context file="{canvas.name}">\n'
        "Staged record of the active task (may lag the latest tool calls; reference only).\n"
        f"{goal}"
        "Each node lists its tool_call_ids; drill down by node_id to read the raw tool outputs.\n"
        f"```mermaid\n{canvas.mermaid.rstrip()}\n```\n"
        "`doing` nodes are the current focus, `done` are finished, `blocked` are calls that failed (the summary "
        "says why): do not repeat them unchanged.\n"
        "</current_task_context>"
    )
    message: Message = {"role": "user", "content": text}
    if budget is None or message_tokens(message) <= budget:
        return message
    index = "\n".join(node_index(canvas.mermaid))
    text = (
        f'<current_task_context file="{canvas.name}" mode="meta-only">\n'
        "Staged record of the active task (may lag the latest tool calls; reference only).\n"
        f"{goal}"
        "nodes (drill down by node_id for summaries, tool_call_ids and raw outputs):\n"
        f"{index}\n"
        "`doing` nodes are the current focus, `done` are finished, `blocked` are calls that failed (the summary "
        "says why): do not repeat them unchanged.\n"
        "</current_task_context>"
    )
    return {"role": "user", "content": text}


def history_message(canvas: CanvasText, meta_only: bool = False) -> Message:
    """A finished or paused task's canvas: full, or (``meta_only``, docs/tdam-spec.md §5.6) its node index ``id:
    label``."""
    mode = ' mode="meta-only"' if meta_only else ""
    goal = f"task goal: {canvas.goal}\n" if canvas.goal else ""
    if meta_only:
        body = "nodes (drill down by node_id for summaries and raw outputs):\n" + "\n".join(node_index(canvas.mermaid))
    else:
        body = f"```mermaid\n{canvas.mermaid.rstrip()}\n```"
    text = (
        f'<history_task_context file="{canvas.name}"{mode}>\n'
        "State graph of an earlier task whose messages were removed from this context.\n"
        f"{goal}{body}\n</history_task_context>"
    )
    return {"role": "user", "content": text}


def history_messages(canvases: list[CanvasText], budget: int, full: bool = True) -> list[Message]:
    """History canvas messages within ``budget`` tokens: full if it fits (and ``full``), else meta-only, else
    skipped."""
    out: list[Message] = []
    left = budget
    for canvas in canvases:
        for meta_only in (False, True) if full else (True,):
            message = history_message(canvas, meta_only)
            cost = message_tokens(message)
            if cost <= left:
                out.append(message)
                left -= cost
                break
    return out


def inject(messages: list[Message], active: Message | None, history: list[Message], tail: int = 30) -> list[Message]:
    """``messages`` with history canvases and then the active canvas inserted at :func:`insertion_point`."""
    extra = [*history, *([active] if active else [])]
    if not extra:
        return list(messages)
    idx = insertion_point(messages, tail)
    return [*messages[:idx], *extra, *messages[idx:]]
