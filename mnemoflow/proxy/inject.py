"""Recall injected into the array the upstream receives. Pure.

``system_context`` (persona, scene navigation, tool guide) is appended to the first system message, or becomes
one: it changes rarely, so the prompt's cached prefix survives. ``prepend_context`` (the memories recalled for
this user turn) goes at the head of the latest user message, as the recall API intends, which keeps roles
alternating for chat templates that insist on it. The agent never sees either: its own array is untouched.
"""

from __future__ import annotations

from typing import Any

from mnemoflow.memory.recall.recaller import RecallResult
from mnemoflow.offload.messages import last_user
from mnemoflow.tokens import count_tokens

Message = dict[str, Any]


def _prefixed(content: Any, text: str, before: bool) -> Any:
    if isinstance(content, list):
        part = {"type": "text", "text": text}
        return [part, *content] if before else [*content, part]
    content = content or ""
    return f"{text}\n\n{content}" if before else f"{content}\n\n{text}" if content else text


def inject_recall(messages: list[Message], recall: RecallResult) -> list[Message]:
    """A new array with the recall blocks in place; ``messages`` is not changed."""
    out = list(messages)
    if recall.system_context:
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": _prefixed(out[0].get("content"), recall.system_context, before=False)}
        else:
            out.insert(0, {"role": "system", "content": recall.system_context})
    if recall.prepend_context and (i := last_user(out)) is not None:
        out[i] = {**out[i], "content": _prefixed(out[i].get("content"), recall.prepend_context, before=True)}
    return out


def recall_tokens(recall: RecallResult) -> int:
    """What injecting ``recall`` adds to the prompt, in the tokens compaction budgets with."""
    return sum(count_tokens(t) + 2 for t in (recall.system_context, recall.prepend_context) if t)
