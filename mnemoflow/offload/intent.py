"""What a tool call is for, read from the call alone: the intent behind the canvas stages, without a model.

Agents working on a task move through the same few intents (explore, reproduce, edit, test, verify), and the call
says which: an editor's ``view`` explores and its ``str_replace`` edits; ``grep`` explores, ``pytest`` tests,
``pip install`` sets up, and running a script reproduces before the first edit and verifies after it. Tools that are
not shells or editors (an airline API, a search API) are read by the verb their name starts with (``get_…``
explores, ``cancel_…`` acts). A script the agent writes to reproduce the problem (``reproduce_bug.py``,
``debug_x.py``) belongs to reproducing, not to editing the code, and a test file to testing.

The rules read the command a shell runs after ``cd … &&`` and environment prefixes, segment by segment; the first
segment that says something decides (``cd repo && python -m pytest -x | tail`` tests).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Literal

Intent = Literal["explore", "run", "edit", "test", "setup", "act", "plan"]

_EDITOR_READ = frozenset({"view", "read", "open", "show", "cat", "list", "ls", "find", "search"})
_EDITOR_WRITE = frozenset({"create", "str_replace", "insert", "undo_edit", "write", "append", "replace", "edit"})
_EXPLORE_PROGRAMS = frozenset(
    "ls ll tree find fd grep egrep rg ag ack cat head tail less more wc file stat du which whereis type pwd "
    "diff cmp awk locate env printenv echo".split()
)
_EDIT_PROGRAMS = frozenset({"patch", "tee", "mv", "cp", "rm", "touch", "ln", "chmod", "truncate"})
_SETUP_PROGRAMS = frozenset(
    "pip pip3 uv conda mamba apt apt-get yum apk brew npm yarn pnpm poetry pipenv make cmake mkdir virtualenv".split()
)
_TEST_PROGRAMS = frozenset({"pytest", "py.test", "tox", "nox", "jest", "mocha", "vitest", "ctest", "phpunit", "rspec"})
_GIT_EXPLORE = frozenset({"log", "show", "diff", "status", "grep", "blame", "branch", "ls-files", "rev-parse"})
_GIT_EDIT = frozenset({"apply", "am", "checkout", "restore", "reset", "stash", "commit", "cherry-pick", "revert"})
_SUBCOMMAND_TEST = frozenset({"test", "tests", "check"})
_SHELL_SPLIT_RE = re.compile(r"&&|\|\||;|\n")
_REDIRECT_RE = re.compile(r"(?<![0-9&<])>>?\s*(?!&)(?!/dev/)\S")
_VERB_RE = re.compile(r"[a-z]+|[A-Z][a-z]*")
_SCRIPT_RE = re.compile(r"(?:^|[/_.-])(?:repro|reproduce|reproduction|debug|demo|scratch)", re.I)
_TEST_FILE_RE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test\.\w+|[^/]*\.test\.\w+|conftest\.py)$|(?:^|/)tests?/")
_VERBS: dict[str, Intent] = {
    **dict.fromkeys(
        "get search list find read view fetch lookup query show describe open browse check count calculate "
        "compute inspect load".split(),
        "explore",
    ),
    **dict.fromkeys("think plan note reflect".split(), "plan"),
}
_SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "execute", "run", "cmd", "exec", "command"})


@dataclass(frozen=True, slots=True)
class CallIntent:
    """The intent of one call and what it is about (``target``: the file or command, for the node's action)."""

    intent: Intent
    target: str
    path: str | None = None


def call_arguments(raw: str) -> dict[str, object]:
    """A call's JSON arguments as a dict; {} when they are not a JSON object."""
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def _program_intent(words: list[str], segment: str) -> Intent | None:
    """The intent of one shell segment, or None when it says nothing (``cd``, ``export``, ``source``)."""
    while words and ("=" in words[0] and not words[0].startswith("=") or words[0] in ("sudo", "time", "env")):
        words = words[1:]
    if not words:
        return None
    program = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    if program in ("cd", "export", "source", ".", "set", "unset", "alias", "true", ":"):
        return None
    if program in _TEST_PROGRAMS or "runtests" in program or (args and args[0] in _SUBCOMMAND_TEST):
        return "test"
    if program.startswith("python") or program in ("node", "ruby", "perl", "bash", "sh", "zsh", "deno", "bun"):
        return _interpreter_intent(program, args)
    if program in ("sed", "perl") and any(a.startswith("-i") for a in args):
        return "edit"
    if program == "git" and args:
        return "explore" if args[0] in _GIT_EXPLORE else "edit" if args[0] in _GIT_EDIT else "setup"
    if program in _EXPLORE_PROGRAMS or program == "sed":
        return "edit" if _REDIRECT_RE.search(segment) and program in ("cat", "echo", "printf") else "explore"
    if program in _EDIT_PROGRAMS:
        return "edit"
    if program in _SETUP_PROGRAMS:
        return "setup"
    return "run"


def _interpreter_intent(program: str, args: list[str]) -> Intent:
    """``python -m pytest`` tests, ``python setup.py develop`` sets up, ``python -m pip`` too, else it runs."""
    if len(args) >= 2 and args[0] == "-m":
        module = args[1]
        if module in ("pytest", "unittest", "tox", "nose", "nox"):
            return "test"
        if module in ("pip", "venv", "ensurepip"):
            return "setup"
    script = next((a for a in args if not a.startswith("-")), "")
    if script.endswith("setup.py"):
        return "setup"
    if "runtests" in script or (script.endswith("manage.py") and "test" in args):
        return "test"
    if script and _TEST_FILE_RE.search(script) and not _SCRIPT_RE.search(script):
        return "test"
    return "run"


def shell_intent(command: str) -> Intent:
    """The intent of a shell command line: the first segment that says something (see the module docstring)."""
    for segment in _SHELL_SPLIT_RE.split(command):
        head = segment.split("|", 1)[0].strip()
        if head and (intent := _program_intent(_words(head), head)) is not None:
            return intent
    return "explore" if command.strip().startswith("cd") else "run"


def _path_intent(path: str, default: Intent) -> Intent:
    """An edit of a reproduction script belongs to running it; of a test file, to testing."""
    if _SCRIPT_RE.search(path.rsplit("/", 1)[-1]):
        return "run"
    if _TEST_FILE_RE.search(path):
        return "test"
    return default


def strip_shell_prefix(command: str) -> str:
    """The command without leading ``cd dir &&`` hops: what a reader wants to see of it."""
    text = " ".join(command.split())
    while (match := re.match(r"cd\s+\S+\s*(?:&&|;)\s*", text)) is not None:
        text = text[match.end() :]
    return text


def call_intent(tool_name: str, arguments: str) -> CallIntent:
    """The intent of one call (see the module docstring); ``target`` is a short description of what it touches."""
    args = call_arguments(arguments)
    name = tool_name.lower()
    command = args.get("command") or args.get("cmd") or args.get("script")
    path = args.get("path") or args.get("file") or args.get("file_path") or args.get("filename")
    path = path if isinstance(path, str) else None
    if isinstance(command, str) and path is None and (name in _SHELL_TOOLS or any(w in name for w in _SHELL_TOOLS)):
        return CallIntent(shell_intent(command), strip_shell_prefix(command))
    if path is not None:
        verb = command if isinstance(command, str) else name
        if verb in _EDITOR_READ:
            return CallIntent("explore", f"{verb} {path}", path)
        if verb in _EDITOR_WRITE or any(w in name for w in ("write", "edit", "create", "patch", "replace")):
            return CallIntent(_path_intent(path, "edit"), f"{verb} {path}", path)
        if any(w in name for w in ("read", "view", "open", "cat")):
            return CallIntent("explore", f"{verb} {path}", path)
    verbs = _VERB_RE.findall(tool_name)
    first = verbs[0].lower() if verbs else name
    return CallIntent(_VERBS.get(first, "act"), tool_name + (f" {path}" if path else ""), path)
