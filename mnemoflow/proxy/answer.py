"""The upstream's answer text, read beside the bytes the proxy passes on unchanged. Pure.

Streaming answers are Server-Sent Events (``data: {chunk}`` lines, ``data: [DONE]`` at the end); the text is the
first choice's ``delta.content`` pieces in order. A line the parser does not understand is skipped: the client
gets the stream as the upstream sent it either way, only the captured turn would lack that piece.
"""

from __future__ import annotations

import json
from typing import Any


class StreamedAnswer:
    """Feed it the stream's bytes as they pass; ``text`` is the answer so far."""

    def __init__(self) -> None:
        self._buffer = b""
        self._parts: list[str] = []

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return
        try:
            choices = json.loads(payload).get("choices") or []
        except (ValueError, AttributeError):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                piece = (choice.get("delta") or {}).get("content")
                if isinstance(piece, str):
                    self._parts.append(piece)

    @property
    def text(self) -> str:
        if self._buffer:  # a last line without its newline
            self._line(self._buffer.strip())
            self._buffer = b""
        return "".join(self._parts)


def answer_text(body: bytes) -> str:
    """The first choice's message text of a non-streaming answer ('' when there is none)."""
    try:
        data: Any = json.loads(body)
        content = data["choices"][0]["message"].get("content")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""
    return content if isinstance(content, str) else ""
