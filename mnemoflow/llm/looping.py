"""Refuse model text that loops: a small model under a grammar can repeat one line until its length bound.

A grammar keeps a reply well-formed, not meaningful: Qwen2.5 0.5B filled a persona's 2,000 characters with one
heading repeated (``bench/model_engine.py``). That passes the schema, so the check is a validator on the reply
models of free-text stages: the reply is refused with the reason, the repair try sees it, and a second loop falls
back to the stage's heuristic engine like any invalid reply.
"""

from __future__ import annotations

import zlib
from collections import Counter
from typing import Annotated

from pydantic import AfterValidator

MIN_LINE_CHARS = 8
MAX_SAME_LINE = 2
MIN_BYTES_FOR_RATIO = 300
MIN_COMPRESSION_RATIO = 0.2
"""Written Markdown, English or Chinese, compresses to 0.4-0.7 of its UTF-8 bytes (our personas and scenes); the
looping persona above compressed to 0.04."""


def loop_problem(text: str) -> str | None:
    """Why ``text`` looks like a loop, or None."""
    lines = Counter(s for line in text.splitlines() if len(s := line.strip()) >= MIN_LINE_CHARS)
    if lines:
        line, n = lines.most_common(1)[0]
        if n > MAX_SAME_LINE:
            return f"the line {line[:60]!r} is written {n} times: write each point once"
    data = text.encode()
    if len(data) >= MIN_BYTES_FOR_RATIO and len(zlib.compress(data)) < MIN_COMPRESSION_RATIO * len(data):
        return "the text repeats itself: write each point once"
    return None


def _no_loop(text: str) -> str:
    if problem := loop_problem(text):
        raise ValueError(problem)
    return text


NotLooping = Annotated[str, AfterValidator(_no_loop)]
"""A ``str`` field type that refuses looping text."""
