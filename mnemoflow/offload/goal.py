"""A task's goal in one line, from the request that started it: what a person would write at the top of the canvas.

Agent hosts wrap the request in markup (``<uploaded_files>…</uploaded_files>``, ``<issue_description>…``) and
boilerplate ("I've uploaded a repository … Consider the following issue:"). The goal is the request's own title
or first sentence:

* tags are removed; when the text introduces a tagged block ("Consider the following issue:") the largest block is
  the embedded request and the goal is taken from inside it; a block of paths only (the uploaded files) is dropped;
* a first line that reads as a title (short, no sentence end, more text below it) is the goal;
* otherwise the first sentence, ended by ``.`` ``!`` ``?`` or the Chinese ``。！？``, or a line break;
  a greeting or thanks ("Hi!", "Alright, thank you.", "你好！") is not the request, so sentences of one or two
  words, or of such words only, are skipped;
* Markdown emphasis and heading marks are dropped, whitespace collapsed, and the line clipped.
"""

from __future__ import annotations

import re

GOAL_CHARS = 160

_BLOCK_RE = re.compile(r"<(?P<tag>[A-Za-z][\w-]*)(?:\s[^>]*)?>(?P<body>.*?)</(?P=tag)\s*>", re.S)
_TAG_RE = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^>]*)?/?>")
_PATHS_ONLY_RE = re.compile(r"^(?:\s*[\w./~:-]+/[\w./~:-]*\s*)+$")
_SENTENCE_RE = re.compile(r".+?(?:[.!?](?=\s|$)|[。！？]|$)", re.S)
_MARKDOWN_RE = re.compile(r"^\s*(?:#+|[-*>]|\d+[.)])\s+|(?<!\w)[*_]{1,3}(?=\S)|(?<=\S)[*_]{1,3}(?!\w)|`")
_CJK_RE = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_TITLE_MAX = 120
_PHATIC = frozenset(
    "hi hello hey dear thanks thank you ok okay alright all right sure great good fine yes yeah no well so please "
    "morning afternoon evening there 你好 您好 谢谢 好的 好 嗯 是的 麻烦你 请问".split()
)


def _clean(line: str) -> str:
    return " ".join(_MARKDOWN_RE.sub("", line).split())


def _words(text: str) -> int:
    """Words of a sentence; each CJK character counts as half a word (no spaces between Chinese words)."""
    return len(text.split()) + len(_CJK_RE.findall(text)) // 2


def _phatic(sentence: str) -> bool:
    """A sentence of greetings and thanks only ("Alright, thank you.", "好的，谢谢！"): it asks for nothing."""
    words = re.findall(r"[A-Za-z']+|[\u3400-\u9fff]+", sentence.lower())
    return bool(words) and all(w in _PHATIC for w in words)


def _request(text: str) -> str:
    """The request without markup: the content of the largest block when the text introduces it (the words just
    before it end with a colon, as in "Consider the following issue:"), else the text around the blocks."""
    blocks = [m for m in _BLOCK_RE.finditer(text) if not _PATHS_ONLY_RE.match(m["body"])]
    if blocks:
        main = max(blocks, key=lambda m: len(m["body"]))
        before = _TAG_RE.sub(" ", text[: main.start()]).rstrip()
        if before.endswith((":", "：")) or not before:
            return _TAG_RE.sub(" ", main["body"])
    stripped = _BLOCK_RE.sub(lambda m: " " if _PATHS_ONLY_RE.match(m["body"]) else m.group(), text)
    return _TAG_RE.sub(" ", stripped)


def _clip(text: str) -> str:
    return text if len(text) <= GOAL_CHARS else text[: GOAL_CHARS - 1].rstrip() + "…"


def task_goal(text: str) -> str:
    """The one-line goal of the request ``text`` (see the module docstring); ``"task"`` for an empty request."""
    request = _request(text)
    lines = [_clean(ln) for ln in request.splitlines()]
    lines = [ln for ln in lines if ln]
    if not lines:
        return "task"
    first = lines[0]
    if len(lines) > 1 and len(first) <= _TITLE_MAX and not re.search(r"[.!?。！？:：]$", first) and _words(first) >= 3:
        return _clip(first)
    body = " ".join(lines)
    sentences = [s.strip() for s in _SENTENCE_RE.findall(body) if s.strip()]
    chosen = next((s for s in sentences if _words(s) > 2 and not _phatic(s)), sentences[0] if sentences else body)
    return _clip(chosen)
