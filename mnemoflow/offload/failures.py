"""Whether a tool call failed, and the one line that says why, read from the ways tools report failure.

A failed call becomes a ``blocked`` node on the canvas (the "cognitive tombstone": what not to retry), and the line
kept here is what the agent needs to recognise the dead end again. The signals, strongest first:

1. **an exit code the tool reports** (``[Command finished with exit code 1]``, ``exit status 2``,
   ``returncode=1``, ``退出码 1``), read in the trailing lines only, where tools put their status. Non-zero fails.
   Zero does not settle it: ``pytest … | tail`` reports the exit code of ``tail``, so (3) and (4) still apply;
2. **the tool's own error reply**: output that starts with ``ERROR:`` / ``Error:`` / ``error:`` / ``错误：``
   (editors refusing an edit, APIs refusing a request);
3. **an uncaught Python traceback**: ``Traceback (most recent call last):`` whose exception line is (about) the
   end of the output; a traceback the program printed and then went on from is not a failure of the call;
4. **a test run with failures**: a pytest summary with ``N failed`` / ``N error``, unittest's ``FAILED
   (failures=N)``, a jest/mocha ``N failing``;
5. when no exit code was reported: a compiler's or tool's ``error:`` line at the start of a line
   (``src/a.c:3:5: error: …``, ``error[E0308]: …``, ``fatal: …``, ``npm ERR! …``).

Line-start rules cannot fire inside a file an editor shows (``cat -n`` puts line numbers first), and a bracketed
status line is the tool's, not the program's, so it is skipped when the error line is chosen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from mnemoflow.offload.identifiers import clip_line, is_error_line

How = Literal["exit_code", "tool_error", "traceback", "tests", "error_line"]

_EXIT_RE = re.compile(
    r"(?:exit(?:ed)?(?: with)? (?:code|status)|return ?code|退出码|退出代码|返回码)\s*[:=：]?\s*(-?\d+)", re.I
)
_STATUS_LINE_RE = re.compile(r"^\s*\[[A-Z][^\[\]{}\"]*\]\s*$")  # ``[Command finished …]``, never a JSON list
_REPLY_ERROR_RE = re.compile(r"^\s*(?:ERROR|Error|error|错误|报错)\s*[:：]\s*(?P<rest>.*)$")
_TRACEBACK = "Traceback (most recent call last):"
_TESTS_RE = re.compile(
    r"^=+ .*\b[1-9]\d* (?:failed|errors?)\b.* =+$"  # pytest summary
    r"|^FAILED \((?:failures|errors)=\d+"  # unittest
    r"|^\s*[1-9]\d* (?:failing|failed)\b"  # mocha / jest
    r"|^Tests?:.*\b[1-9]\d* failed\b",
    re.M,
)
_FAILED_TEST_RE = re.compile(r"^(?:FAILED|ERROR) \S+::\S+.*$|^FAIL: .+$|^ERROR: test\S* .+$", re.M)
_LINE_ERROR_RE = re.compile(
    r"^(?:\S+?:\d+(?::\d+)?: (?:fatal )?error\b.*"  # gcc, clang, mypy, tsc: file:line[:col]: error
    r"|error(?:\[E\d+\])?: .+"  # rustc, many CLIs
    r"|ERROR[: ].+"
    r"|fatal: .+"  # git
    r"|npm ERR! .+"
    r"|(?:错误|报错)[:：].+)$",
    re.M,
)
_ERRORISH_RE = re.compile(
    r"error|exception|failed|failure|fatal|denied|not found|no such|cannot|can't|invalid|refused|timed out|"
    r"错误|失败|异常|无法|找不到",
    re.I,
)
_TAIL_LINES = 6
_AFTER_EXCEPTION = 3


@dataclass(frozen=True, slots=True)
class Failure:
    """A failed call: which signal said so, the exit code if one was reported, and the line to keep."""

    how: How
    line: str
    exit_code: int | None = None

    def describe(self) -> str:
        """``exit 1: KeyError: 'x'`` or just the line: the text a canvas node and a summary keep."""
        return f"exit {self.exit_code}: {self.line}" if self.exit_code not in (None, 0) else self.line


def exit_code(lines: list[str]) -> int | None:
    """The last exit code reported in the trailing lines, where tools print their status (None: none)."""
    for line in reversed(lines[-_TAIL_LINES:]):
        if match := _EXIT_RE.search(line):
            return int(match.group(1))
    return None


def body_lines(lines: list[str]) -> list[str]:
    """The program's output: blank lines and the tool's trailing ``[...]`` status lines removed."""
    end = len(lines)
    while end and (not lines[end - 1].strip() or _STATUS_LINE_RE.match(lines[end - 1])):
        end -= 1
    return [ln for ln in lines[:end] if ln.strip()]


def _exception_line(body: list[str]) -> tuple[str, int] | None:
    """The exception line of the last traceback and how many non-blank lines follow it (None: no traceback)."""
    starts = [i for i, ln in enumerate(body) if ln.strip() == _TRACEBACK]
    if not starts:
        return None
    for i in range(starts[-1] + 1, len(body)):
        line = body[i]
        if not line.startswith((" ", "\t")) and not line.startswith("During handling"):
            return clip_line(line), len(body) - i - 1
    return None


def _reply_error(lines: list[str]) -> str | None:
    """The message of an ``ERROR: …`` reply (the next line when the first says only ``ERROR:``)."""
    first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
    if first is None or not (match := _REPLY_ERROR_RE.match(lines[first])):
        return None
    if match["rest"].strip():
        return clip_line(match["rest"])
    rest = next((ln for ln in lines[first + 1 :] if ln.strip()), "")
    return clip_line(rest) if rest else "error"


def _best_line(body: list[str], text: str) -> str | None:
    """The line that best says why: an exception, a failing test, an error line, an error-ish line (the last)."""
    if found := _exception_line(body):
        return found[0]
    for pattern in (_FAILED_TEST_RE, _LINE_ERROR_RE):
        if match := pattern.search(text):
            return clip_line(match.group())
    if exceptions := [ln for ln in body if is_error_line(ln)]:
        return clip_line(exceptions[-1])
    if errorish := [ln for ln in body if _ERRORISH_RE.search(ln)]:
        return clip_line(errorish[-1])
    return None


def failure(output: str) -> Failure | None:
    """How ``output`` says its call failed, or None when nothing in it does (see the module docstring)."""
    lines = output.splitlines()
    body = body_lines(lines)
    text = "\n".join(body)
    code = exit_code(lines)
    if code not in (None, 0):
        return Failure("exit_code", _best_line(body, text) or (clip_line(body[-1]) if body else "no output"), code)
    if code is None and (reply := _reply_error(lines)) is not None:
        return Failure("tool_error", reply)
    if (found := _exception_line(body)) is not None and found[1] <= _AFTER_EXCEPTION:
        return Failure("traceback", found[0], code)
    if match := _TESTS_RE.search(text):
        return Failure("tests", _best_line(body, text) or clip_line(match.group()), code)
    if code is None and (match := _LINE_ERROR_RE.search(text)):
        return Failure("error_line", clip_line(match.group()))
    return None
