"""Whom an atom is about: the name its text starts with (``Caroline: I went ...``, ``Assistant: The GR-90 ...``).

L1 writes the subject into the text (the heuristic engine from the message's speaker ``name``, and ``Assistant``
for what the assistant answered), so a question naming the person finds the fact; dedup compares only atoms about
the same subject and recall boosts the subject a query names. It is read back from the text rather than kept in an
index column because the row schema is shared by the SQLite and Milvus adapters. A subject is a name only when it
looks like one (one to four capitalised words, or a short run of Han characters), so a URL or a sentence with a
colon in it is never one; a capitalised label such as ``Note:`` is.
"""

from __future__ import annotations

import re

AI_SUBJECT = "Assistant"
"""The subject of what the assistant told the user."""

_SUBJECT = re.compile(r"^((?:[A-Z][\w'.-]*)(?: [A-Z][\w'.-]*){0,3}|[\u3400-\u4dbf\u4e00-\u9fff]{1,6}): ")


def subject(text: str) -> str | None:
    """The name an atom's text starts with (``Caroline`` in ``Caroline: I went ...``), if it starts with one."""
    m = _SUBJECT.match(text)
    return m.group(1) if m else None
