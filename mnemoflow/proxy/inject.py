"""Recall injected into the array the upstream receives. Pure.

``system_context`` (persona, scene navigation, skills index, tool guide) is appended to the first system message,
or becomes one: it changes rarely, so the prompt's cached prefix survives. Each user message's recall block (the
memories recalled when it was the latest, :mod:`mnemoflow.proxy.pins`) goes at its head, as the recall API's
``prepend_context`` intends, which keeps roles alternating for chat templates that insist on it; a message keeps
its block on every later request, so the prompt only grows. The agent never sees either: its own array is
untouched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from mnemoflow.memory.recall.recaller import RecallResult
from mnemoflow.offload.messages import fingerprint, is_injected
from mnemoflow.tokens import count_tokens

Message = dict[str, Any]


def _prefixed(content: Any, text: str, before: bool) -> Any:
    if isinstance(content, list):
        part = {"type": "text", "text": text}
        return [part, *content] if before else [*content, part]
    content = content or ""
    return f"{text}\n\n{content}" if before else f"{content}\n\n{text}" if content else text


def _blocks_of(messages: list[Message], blocks: Mapping[str, str]) -> Iterator[tuple[int, str]]:
    """(index, block) of each user message of ``messages`` that has a block."""
    if not blocks:
        return
    for i, m in enumerate(messages):
        if m.get("role") == "user" and not is_injected(m) and (text := blocks.get(fingerprint(m))):
            yield i, text


def inject_recall(messages: list[Message], system_context: str, blocks: Mapping[str, str]) -> list[Message]:
    """A new array with ``system_context`` in the system part and each user message's block (``blocks``: by the
    message's fingerprint) at its head; ``messages`` is not changed."""
    out = list(messages)
    for i, text in list(_blocks_of(out, blocks)):
        out[i] = {**out[i], "content": _prefixed(out[i].get("content"), text, before=True)}
    if system_context:
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": _prefixed(out[0].get("content"), system_context, before=False)}
        else:
            out.insert(0, {"role": "system", "content": system_context})
    return out


def injected_tokens(messages: list[Message], system_context: str, blocks: Mapping[str, str]) -> int:
    """What :func:`inject_recall` adds to ``messages``, in the tokens compaction budgets with."""
    texts = [system_context, *(text for _, text in _blocks_of(messages, blocks))]
    return sum(count_tokens(t) + 2 for t in texts if t)


def recall_tokens(recall: RecallResult) -> int:
    """What one recall adds when injected (its system context and its block): the size compaction reserves."""
    return sum(count_tokens(t) + 2 for t in (recall.system_context, recall.prepend_context) if t)
