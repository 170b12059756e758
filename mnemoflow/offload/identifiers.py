"""The identifiers an agent reuses from tool output: file paths, test ids, dotted symbols, error types and lines.

One extractor serves two readers: the summariser keeps these in a summary (an agent that saw a traceback comes back
for the file, the exception and the failing test, rarely for the prose around them), and ``bench/offload.py`` scores
how many of the identifiers a removed output introduced are still visible when the agent uses them again. The rules
follow how tools print these things, so they hold for any repository and language mix:

* a **path** has a ``/`` between name characters (``pkg/mod.py``, ``./a/b``, ``/abs/c.txt``) or is a bare file name
  with a known extension (``setup.cfg``); URLs and e-mail addresses are neither paths nor symbols;
* a **test id** is pytest's ``path.py::Class::test_name`` (with an optional ``[param]``), or a bare ``test_*`` name;
* a **dotted symbol** is two or more names joined by dots (``np.zeros``, ``django.db.models``), not a file name
  and not a version number;
* an **error type** is a CamelCase name ending in ``Error``, ``Exception``, ``Warning``, ``Exit`` or ``Interrupt``;
* an **error line** is a line that starts with an exception name and a colon (``KeyError: 'x'``).

Matching is ASCII-only on purpose: Python's ``\\w`` also matches CJK characters, and a Chinese sentence with a slash
in it is not a path. Bare names (``_cstack``) are not identifiers here: in a file listing every word is one, and a
summary could not keep them all (the README says so beside the retention figure).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Kind = Literal["path", "test", "symbol", "error_type", "error_line"]

# Extensions of source, build and data files: a bare ``name.ext`` is only taken as a file with one of these
# (otherwise ``self.rows`` and ``np.zeros`` would be files too). Endings that are also common attribute names
# (``.log``, ``.env``, ``.lock``, ``.patch``, ``.h``) are left out; such files still count when a slash is present.
_EXTENSIONS = (
    "py pyi pyx pxd ipynb c cc cpp cxx hpp rs go java kt scala js mjs cjs ts tsx jsx vue rb php swift sh bash zsh "
    "ps1 bat sql lua md rst txt toml yaml yml json jsonl cfg ini xml html htm css scss csv tsv tex proto graphql "
    "cmake gradle"
).split()
_EXTENSION_SET = frozenset(_EXTENSIONS)
_EXT = "|".join(sorted(_EXTENSIONS, key=len, reverse=True))
_NAME = r"[A-Za-z0-9_.@+~-]"
_RECEIVERS = frozenset({"self", "cls", "this"})
_ERROR_SUFFIX = r"(?:Error|Exception|Warning|Exit|Interrupt)"

_TOKEN_RE = re.compile(
    rf"""
    (?P<url>\b[a-z][a-z0-9+.-]*://\S+|\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)
  | (?P<test>(?:{_NAME}+/)*{_NAME}+\.py::[A-Za-z_][A-Za-z0-9_]*(?:::[A-Za-z_][A-Za-z0-9_]*)*(?:\[[^\]\s]{{1,60}}\])?)
  | (?P<path>(?:~|\.{{1,2}})?/?(?:{_NAME}+/)+{_NAME}*[A-Za-z0-9_]
        | \b[A-Za-z0-9_][A-Za-z0-9_.-]*\.(?:{_EXT})\b)
  | (?P<symbol>\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b)
  | (?P<error_type>\b[A-Z][A-Za-z0-9]*{_ERROR_SUFFIX}\b)
  | (?P<test_name>\btest_[A-Za-z0-9_]+\b)
    """,
    re.VERBOSE | re.ASCII,
)
# ``Name: text`` where Name is an exception: ends like one, or is qualified by its module (``a.b.AppRegistryNotReady``).
_ERROR_LINE_RE = re.compile(r"^(?P<name>(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9]*): \S", re.ASCII)
_ERROR_NAME_RE = re.compile(
    rf"(?:.*\.)?[A-Z][A-Za-z0-9]*{_ERROR_SUFFIX}|[a-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.[A-Z][A-Za-z0-9]+",
    re.ASCII,
)
ERROR_LINE_MAX = 160
_KINDS: dict[str, Kind] = {
    "test": "test",
    "test_name": "test",
    "path": "path",
    "symbol": "symbol",
    "error_type": "error_type",
}
_ORDER: dict[Kind, int] = {"error_line": 0, "error_type": 1, "test": 2, "path": 3, "symbol": 4}


@dataclass(frozen=True, slots=True)
class Identifier:
    """One identifier as it appears in the text (``text``), and what kind of thing it names."""

    text: str
    kind: Kind


def _path_ok(text: str) -> bool:
    """A real path, not prose (``and/or``), a fraction (``1/2``) or a date (``2024/05/01``): rooted (``/``, ``./``,
    ``~/``), two slashes deep, or ending in a known extension."""
    core = text.strip("./~")
    if len(core) < 3 or not any(c.isalpha() for c in core):
        return False
    return text.startswith(("/", "./", "../", "~/")) or text.count("/") >= 2 or _has_extension(text)


def _has_extension(text: str) -> bool:
    name = text.rsplit("/", 1)[-1]
    return "." in name and name.rsplit(".", 1)[-1].lower() in _EXTENSION_SET


def _symbol_ok(text: str) -> bool:
    """Not an abbreviation (``e.g``, ``i.e``): some part is longer than one letter."""
    return any(len(part) > 1 for part in text.split("."))


def is_error_line(line: str) -> bool:
    """``KeyError: 'x'``, ``django.core.exceptions.AppRegistryNotReady: ...``: an exception name, a colon, text."""
    match = _ERROR_LINE_RE.match(line.strip())
    return match is not None and _ERROR_NAME_RE.fullmatch(match["name"]) is not None


def clip_line(line: str, limit: int = ERROR_LINE_MAX) -> str:
    """One line, whitespace collapsed, at most ``limit`` characters."""
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def error_lines(text: str) -> list[str]:
    """Lines that report an exception (see :func:`is_error_line`), clipped, in order, each once."""
    return list(dict.fromkeys(clip_line(line) for line in text.splitlines() if is_error_line(line)))


def extract(text: str) -> list[Identifier]:
    """Every identifier of ``text`` in order of first appearance, each once; error lines after the tokens."""
    found: dict[tuple[str, Kind], None] = {}
    for match in _TOKEN_RE.finditer(text):
        value = match.group().rstrip(".,:;")
        kind = match.lastgroup
        if kind == "url" or not value:
            continue
        if kind == "path" and "/" not in value and value.split(".", 1)[0] in _RECEIVERS:
            kind = "symbol"  # ``self.cfg`` is an attribute, not the file ``x.cfg``
        elif kind == "path" and not _path_ok(value):
            continue
        if kind == "symbol" and not _symbol_ok(value):
            continue
        found[(value, _KINDS[str(kind)])] = None
    for line in error_lines(text):
        found[(line, "error_line")] = None
    return [Identifier(value, kind) for value, kind in found]


def ranked(text: str, known: Iterable[str] = ()) -> list[Identifier]:
    """The identifiers of ``text`` that ``known`` does not contain, most telling first: error lines, error types,
    test ids, paths (with a directory before bare file names), symbols; within a kind, the ones the text repeats
    most first (ties in order of appearance).

    ``known`` is what the agent already wrote (the call's arguments): a summary need not repeat the file it opened.
    """
    known_text = "\n".join(known)
    items = [i for i in extract(text) if i.text not in known_text]
    counts = Counter(m.group().rstrip(".,:;") for m in _TOKEN_RE.finditer(text))
    return sorted(items, key=lambda i: (_ORDER[i.kind], "/" not in i.text, -counts[i.text]))
