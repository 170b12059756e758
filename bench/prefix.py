"""Prefix reuse: how much of a prompt an upstream's prefix cache can serve again from the previous prompt of the
same conversation. Counted by whole messages (the tokens of the leading messages equal to the previous prompt's,
o200k with the per-message overhead), as the offload and proxy benchmarks both report it: a cache keyed on tokens
also reuses the unchanged start of the first changed message, and vLLM's and OpenAI's round down to a block (16 and
128 tokens), neither of which this counts."""

from __future__ import annotations

from typing import Any

from mnemoflow.tokens import message_tokens

Message = dict[str, Any]


def shared_prefix(previous: list[Message], prompt: list[Message]) -> tuple[int, int, int | None]:
    """(tokens of ``prompt``'s leading messages equal to ``previous``'s, tokens of ``prompt``, the index of the
    first message of ``previous`` that ``prompt`` changed or dropped, None when ``prompt`` begins with all of it)."""
    tokens = [message_tokens(m) for m in prompt]
    same, broke = 0, None
    for i, before in enumerate(previous):
        if i >= len(prompt) or prompt[i] != before:
            broke = i
            break
        same += tokens[i]
    return same, sum(tokens), broke
