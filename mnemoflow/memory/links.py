"""The atom links the heuristic engines write into L2 scenes and the L3 persona: ``<!-- atom-id -->`` after a line.

Why a comment: any Markdown viewer hides it and a prompt drops it, while drill-down reads the id from it. So the
bounds on those texts (``MAX_SCENE_CHARS``, ``MAX_PERSONA_CHARS``) count what a reader sees: a link never costs
a remembered line its place.
"""

from __future__ import annotations

import re

_COMMENT = re.compile(r"[ \t]*<!--.*?-->")


def strip_comments(text: str) -> str:
    """``text`` without its ``<!-- atom-id -->`` links: what a prompt or a reader sees."""
    return _COMMENT.sub("", text)


def visible_len(text: str) -> int:
    """Characters a reader (or a prompt) sees: the atom links in comments do not count toward a bound."""
    return len(strip_comments(text))
