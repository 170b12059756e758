"""Whom an atom is about: the name its text starts with (``Caroline: I went ...``, ``Assistant: The GR-90 ...``).

L1 writes the subject into the text (the heuristic engine from the message's speaker ``name``, and ``Assistant``
for what the assistant answered), so a question naming the person finds the fact; dedup compares only atoms about
the same subject and recall boosts the subject a query names. It is read back from the text rather than kept in an
index column because the row schema is shared by the SQLite and Milvus adapters. A subject is a name only when it
looks like one (one to four capitalised words, or a short run of Han characters), so a URL or a sentence with a
colon in it is never one; a capitalised label such as ``Note:`` is.

The same text carries what a reader needs around the speaker's words (a short answer keeps the question it answers,
``(answering Mel: Where did you go?)``, and a resolved time ``(event: 2023-05-07)``): :func:`own_words` takes them
off again where only the speaker's words may be used (a scene's name, a persona line), and :func:`askers` reads who
asked, so that the other side of a conversation never becomes the user's trait.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mnemoflow.lexical import tagged_words
from mnemoflow.memory.l1.event_time import untagged

AI_SUBJECT = "Assistant"
"""The subject of what the assistant told the user."""

_SUBJECT = re.compile(r"^((?:[A-Z][\w'.-]*)(?: [A-Z][\w'.-]*){0,3}|[\u3400-\u4dbf\u4e00-\u9fff]{1,6}): ")


def subject(text: str) -> str | None:
    """The name an atom's text starts with (``Caroline`` in ``Caroline: I went ...``), if it starts with one."""
    m = _SUBJECT.match(text)
    return m.group(1) if m else None


_FOLD = " (answering"
_ASKER = re.compile(re.escape(_FOLD) + r"(?: ([^:()]{1,60}))?: ")


def fold(text: str, asker: str | None, question: str) -> str:
    """``text`` with the question it answers, as a reader needs it: ``Yes, twice (answering Mel: Been there?)``."""
    return f"{text}{_FOLD}{f' {asker}' if asker else ''}: {question})"


def own_words(text: str) -> str:
    """What the atom's speaker said: its text without the subject, the folded question and the event time."""
    m = _SUBJECT.match(text)
    words = text[m.end() :] if m else text
    cut = words.find(_FOLD)
    return " ".join(untagged(words[:cut] if cut != -1 else words).split())


def askers(text: str) -> set[str]:
    """The names of whoever asked the questions folded into ``text`` (the other side of a conversation)."""
    return {m.group(1).strip() for m in _ASKER.finditer(text) if m.group(1)}


def is_answer(text: str) -> bool:
    """Whether ``text`` answers a question folded into it (its words are about whoever was asked)."""
    return _FOLD + ":" in text or _ASKER.search(text) is not None


_GREETINGS = r"hey|hi|hello|thanks|thank you|wow|oh|yes|yeah|sorry|congrats|aw+"
_GREETING = re.compile(_GREETINGS, re.IGNORECASE)
_VOCATIVE = re.compile(
    rf"(?:^|[.!?]\s+)(?:(?:{_GREETINGS})[,!]?\s+)?"
    r"([A-Z][a-z]{2,})(?=[,!]\s)|,\s*([A-Z][a-z]{2,})(?=[.!?]|$)",
    re.IGNORECASE,
)
_VOCATIVE_ZH = re.compile(r"^([\u4e00-\u9fff]{2,3})[，,！!]")


def addressed(text: str) -> set[str]:
    """Names the speaker addresses ("Thanks, Mel!", "Hey Jo, guess what", "王磊，好消息"): the other side."""
    words = own_words(text)
    names = {m.group(1) or m.group(2) for m in _VOCATIVE.finditer(words)}
    names = {n for n in names if n[0].isupper() and not _GREETING.fullmatch(n)}
    zh = _VOCATIVE_ZH.match(words)
    if zh and tagged_words(zh.group(1))[:1] == [(zh.group(1), "nr")]:
        names.add(zh.group(1))
    return names


def people(texts: Iterable[str]) -> frozenset[str]:
    """Names in atom texts that are no trait of their user: the subjects (the user's own name; not the assistant),
    whoever asked the folded questions and whoever the user addresses (the other side of a conversation)."""
    names: set[str] = set()
    for text in texts:
        who = subject(text)
        if who and who != AI_SUBJECT:
            names.add(who)
        names |= askers(text) | addressed(text)
    return frozenset(names)
