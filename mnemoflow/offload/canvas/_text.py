"""Text rules shared by the model, the renderer and the parser.

Text is normalised once, when a canvas is built (controls and line breaks become spaces, long text is clipped with
an ellipsis), so rendering never has to drop anything and render -> parse gives back the same canvas. Escaping
then only has to make each character safe inside a quoted Mermaid label, in one reversible pass.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

ELLIPSIS = "…"
# Characters that break a one-line label: the Unicode categories Cc (controls), Cs (lone surrogates), Zl and Zp
# (the line/paragraph separators that a JavaScript regex `.` does not match; Mermaid's directive regex relies on
# `.`), spelled as ranges: those categories have held the same characters since Unicode 2.0, and one regex pass is
# ~25x faster than a category lookup per character (every field of a canvas is cleaned when it is parsed, and
# compaction parses canvases on every request; ``test_canvas_render`` checks the ranges against ``unicodedata``).
BREAKING_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

# Characters that mean something to Mermaid's preprocessing or lexer even inside a quoted label:
# '"' ends the string, '#' starts an entity, '%' can start a directive ("%%{"), '<' '>' make HTML tags (or a
# user-typed <br>), '`' turns the label into a markdown string, '&' starts an HTML entity, ';' ends a statement.
_ESCAPES = {
    '"': "#quot;",
    "#": "#35;",
    "%": "#37;",
    "<": "#lt;",
    ">": "#gt;",
    "`": "#96;",
    "&": "#amp;",
    ";": "#59;",
}
_STAGE_ESCAPES = {**_ESCAPES, ":": "#58;"}  # the stage ends at the first ": " of the label
_UNESCAPES = {code: char for char, code in _STAGE_ESCAPES.items()}
_ESCAPE_RE = re.compile("[" + re.escape("".join(_ESCAPES)) + "]")
_STAGE_ESCAPE_RE = re.compile("[" + re.escape("".join(_STAGE_ESCAPES)) + "]")
_TOKEN_RE = re.compile(r"#\w+;|[#;\"%<>`&]")


def clean(value: str, limit: int) -> str:
    """Make ``value`` a single line without controls, stripped, at most ``limit`` characters (idempotent)."""
    text = BREAKING_RE.sub(" ", value).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + ELLIPSIS
    return text


def escape(text: str, *, stage: bool = False) -> str:
    """Escape ``text`` with Mermaid entity codes so it is inert inside ``"…"``."""
    table, pattern = (_STAGE_ESCAPES, _STAGE_ESCAPE_RE) if stage else (_ESCAPES, _ESCAPE_RE)
    return pattern.sub(lambda m: table[m.group()], text)


def unescape(text: str) -> str:
    """Invert :func:`escape`. Raises ValueError on an entity we never emit or a bare special character."""

    def one(match: re.Match[str]) -> str:
        token = match.group()
        if token in _UNESCAPES:
            return _UNESCAPES[token]
        what = "unknown entity" if len(token) > 1 else "unescaped character"
        raise ValueError(f"{what} {token!r} in label")

    return _TOKEN_RE.sub(one, text)


def to_utc(value: datetime) -> datetime:
    """UTC at second precision: the canvas is read by a model, and whole seconds keep it short and exact."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamp must be timezone-aware")
    return value.astimezone(UTC).replace(microsecond=0)


def format_time(value: datetime) -> str:
    """``2025-01-31T09:30:00Z`` for a UTC datetime."""
    return value.isoformat().replace("+00:00", "Z")
