"""What a call is for (its canvas stage) and a task's one-line goal, both without a model."""

from __future__ import annotations

import json

import pytest

from mnemoflow.offload.goal import task_goal
from mnemoflow.offload.intent import call_intent, shell_intent, strip_shell_prefix


@pytest.mark.parametrize(
    ("command", "intent"),
    [
        ("cd /repo && python -m pytest tests/test_a.py -x | tail -20", "test"),
        ("pytest -q", "test"),
        ("cd /repo && ./tests/runtests.py admin_inlines", "test"),
        ("python manage.py test app", "test"),
        ("npm test", "test"),
        ("grep -rn 'def load' src/", "explore"),
        ("find . -name '*.py' | xargs grep -l foo", "explore"),
        ("git diff HEAD~1", "explore"),
        ("sed -n '10,20p' a.py", "explore"),
        ("sed -i 's/a/b/' a.py", "edit"),
        ("cat > /tmp/x.py << 'EOF'\nprint(1)\nEOF", "edit"),
        ("git apply fix.patch", "edit"),
        ("pip install -e .", "setup"),
        ("python setup.py develop", "setup"),
        ("PYTHONPATH=/repo python3 reproduce_bug.py", "run"),
        ("python -c 'import pkg; print(pkg.__file__)'", "run"),
        ("cd /repo", "explore"),
    ],
)
def test_shell_intent(command: str, intent: str) -> None:
    assert shell_intent(command) == intent


@pytest.mark.parametrize(
    ("tool", "arguments", "intent"),
    [
        ("str_replace_editor", {"command": "view", "path": "/repo/pkg/a.py"}, "explore"),
        ("str_replace_editor", {"command": "str_replace", "path": "/repo/pkg/a.py"}, "edit"),
        ("str_replace_editor", {"command": "create", "path": "/repo/reproduce_issue.py"}, "run"),
        ("str_replace_editor", {"command": "create", "path": "/repo/tests/test_a.py"}, "test"),
        ("execute_bash", {"command": "cd /repo && pytest"}, "test"),
        ("write_file", {"path": "notes.md", "content": "x"}, "edit"),
        ("get_reservation_details", {"reservation_id": "X1"}, "explore"),
        ("searchFlights", {}, "explore"),
        ("cancel_reservation", {"reservation_id": "X1"}, "act"),
        ("think", {"thought": "..."}, "plan"),
    ],
)
def test_call_intent(tool: str, arguments: dict[str, str], intent: str) -> None:
    assert call_intent(tool, json.dumps(arguments)).intent == intent


def test_strip_shell_prefix() -> None:
    assert strip_shell_prefix("cd /repo &&  cd sub ; python  run.py") == "python run.py"


HOST = (
    "<uploaded_files>\n/workspace/repo__1.0\n</uploaded_files>\n"
    "I've uploaded a python code repository in the directory repo__1.0. Consider the following issue description:\n\n"
    "<issue_description>\nParser drops quoted `tokens` in nested lists\nWhen a list holds a quoted string ...\n"
    "</issue_description>\n\nCan you help me implement the necessary changes? Follow these steps: ..."
)


@pytest.mark.parametrize(
    ("request_text", "goal"),
    [
        (HOST, "Parser drops quoted tokens in nested lists"),
        ("Hi! I'd like to change my flight reservation. My id is X.", "I'd like to change my flight reservation."),
        ("# Fix flaky test\n\nThe test `test_x` fails sometimes.", "Fix flaky test"),
        ("Please make the cache thread-safe. It races under load.", "Please make the cache thread-safe."),
        ("你好！我想把明天的航班改到后天。另外加一件行李。", "我想把明天的航班改到后天。"),
        ("<task>修复解析器测试失败的问题：分词器丢失了引号</task>", "修复解析器测试失败的问题：分词器丢失了引号"),
        (
            "Alright, thank you. I also want to book a flight to Paris tomorrow.",
            "I also want to book a flight to Paris tomorrow.",
        ),
        ("好的，谢谢！我还想订一张去巴黎的机票。", "我还想订一张去巴黎的机票。"),
        ("   ", "task"),
    ],
)
def test_task_goal(request_text: str, goal: str) -> None:
    assert task_goal(request_text) == goal


def test_task_goal_is_one_bounded_line() -> None:
    goal = task_goal("word " * 200)
    assert "\n" not in goal and len(goal) <= 160 and goal.endswith("…")
