"""A scripted agent task for the skill tests: the offload pipeline draws its canvas as for a real session."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.offload.messages import last_user
from mnemoflow.offload.session import compact_session
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ROOT = "/work/proj"
EN = "Fix the crash in dateparse.parse_date when the input has a timezone offset like +05:30."
ZH = "修复 dateparse 解析带时区偏移（例如 +05:30）的日期时崩溃的问题。"


def _call(i: int, tool: str, **args: Any) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}


def trajectory(request: str, fixed: bool = True) -> list[dict[str, Any]]:
    """An agent fixing a bug: search, read, reproduce (fails), a failing pytest, edit, test (passes or not)."""
    steps: list[tuple[dict[str, Any], str]] = [
        (_call(1, "execute_bash", command=f"cd {ROOT} && grep -rn parse_date dateparse/"), "dateparse/core.py:10"),
        (_call(2, "str_replace_editor", command="view", path=f"{ROOT}/dateparse/core.py"), "def parse_date(s):\n"),
        (
            _call(3, "execute_bash", command=f"cd {ROOT} && python reproduce.py"),
            "Traceback (most recent call last):\nValueError: bad tz offset '+05:30'\n[exit code 1]",
        ),
        (
            _call(4, "execute_bash", command=f"cd {ROOT} && pip install -e ."),
            "Successfully installed dateparse\n[exit code 0]",
        ),
        (
            _call(
                5,
                "str_replace_editor",
                command="str_replace",
                path=f"{ROOT}/dateparse/core.py",
                old_str="a",
                new_str="b",
            ),
            "The file has been edited.",
        ),
        (
            _call(6, "execute_bash", command=f"cd {ROOT} && python -m pytest tests/test_core.py"),
            "3 passed in 0.1s\n[exit code 0]"
            if fixed
            else "1 failed, 2 passed\nFAILED tests/test_core.py::t\n[exit code 1]",
        ),
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    messages.append({"role": "user", "content": request})
    for call, output in steps:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    messages.append({"role": "assistant", "content": "Done."})
    return messages


async def replay(files: LocalFileStore, session: str, messages: list[dict[str, Any]], tenant: str = "t") -> None:
    clock, writer = ManualClock(NOW), OffloadWriter(files)
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and last_user(messages[:i]) is not None:
            await compact_session(files, tenant, session, messages[:i], 32_000, clock=clock, writer=writer)
            clock.advance(10)


def replayed(tmp_path: Path, session: str, request: str, fixed: bool = True, tenant: str = "t") -> LocalFileStore:
    files = LocalFileStore(tmp_path)
    asyncio.run(replay(files, session, trajectory(request, fixed), tenant))
    return files
