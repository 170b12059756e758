"""Identifiers an agent reuses (paths, test ids, dotted symbols, error types and lines) and why a call failed."""

from __future__ import annotations

import pytest

from mnemoflow.offload.failures import failure
from mnemoflow.offload.identifiers import error_lines, extract, is_error_line, ranked

TRACEBACK = """Traceback (most recent call last):
  File "/repo/pkg/loader.py", line 12, in load
    return config.settings.value
pkg.errors.ConfigMissing: no settings
"""


def kinds(text: str) -> dict[str, str]:
    return {i.text: i.kind for i in extract(text)}


def test_each_kind_is_recognised_as_tools_print_it() -> None:
    found = kinds(
        TRACEBACK + "FAILED tests/test_io.py::TestRead::test_bytes[utf-8] - AssertionError: boom\n"
        "see setup.cfg, src/a.rs and ./build; np.zeros and self.cfg; KeyError; test_round_trip\n"
    )
    assert found["/repo/pkg/loader.py"] == "path"
    assert found["config.settings.value"] == "symbol"
    assert found["pkg.errors.ConfigMissing"] == "symbol"
    assert found["pkg.errors.ConfigMissing: no settings"] == "error_line"
    assert found["tests/test_io.py::TestRead::test_bytes[utf-8]"] == "test"
    assert found["test_round_trip"] == "test"
    assert found["AssertionError"] == found["KeyError"] == "error_type"
    assert found["setup.cfg"] == found["src/a.rs"] == found["./build"] == "path"
    assert found["np.zeros"] == found["self.cfg"] == "symbol"  # an attribute, not the file x.cfg


@pytest.mark.parametrize(
    "text",
    [
        "input and/or output",  # prose, not a path
        "on 2024/05/01",  # a date
        "ratio 1/2",
        "version 4.3.1 and v1.2",
        "e.g. this, i.e. that",
        "https://example.org/a/b.py",
        "mail ann.lee@example.com",
        "中文/路径 与 错误",  # \\w would match CJK; the rules are ASCII-only
    ],
)
def test_what_is_not_an_identifier(text: str) -> None:
    assert extract(text) == []


def test_chinese_text_keeps_its_ascii_identifiers() -> None:
    assert set(kinds("在 src/app/main.py 里调用 os.path.join 时报错 ValueError")) == {
        "src/app/main.py",
        "os.path.join",
        "ValueError",
    }


def test_error_lines_need_an_exception_name() -> None:
    assert is_error_line("KeyError: 'x'")
    assert is_error_line("django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet.")
    assert not is_error_line("Note: this is fine")
    assert not is_error_line("Summary: 3 passed")
    assert error_lines("a\nValueError: bad\nValueError: bad\n") == ["ValueError: bad"]


def test_ranked_puts_failures_first_and_skips_what_the_call_named() -> None:
    text = "view /repo/pkg/loader.py\n" + TRACEBACK + "pkg.util.helper pkg.util.helper pkg.util.other helper.py"
    order = [i.text for i in ranked(text, ["/repo/pkg/loader.py"])]
    assert order[0] == "pkg.errors.ConfigMissing: no settings"
    assert "/repo/pkg/loader.py" not in order
    assert order.index("pkg.util.helper") < order.index("pkg.util.other")  # repeated more
    assert order.index("helper.py") < order.index("pkg.util.helper")  # paths before symbols


STATUS = "[Current working directory: /repo]\n[Command finished with exit code {code}]"


@pytest.mark.parametrize(
    ("output", "how", "line"),
    [
        (TRACEBACK + STATUS.format(code=1), "exit_code", "pkg.errors.ConfigMissing: no settings"),
        (
            "python: can't open file 'x.py': [Errno 2] No such file or directory\n" + STATUS.format(code=2),
            "exit_code",
            "python: can't open file 'x.py': [Errno 2] No such file or directory",
        ),
        # a pipe into tail reports tail's exit code: the test summary still says the run failed
        (
            "FAILED tests/t.py::test_a - assert 1 == 2\n=== 1 failed, 3 passed in 0.2s ===\n" + STATUS.format(code=0),
            "tests",
            "FAILED tests/t.py::test_a - assert 1 == 2",
        ),
        (
            "ERROR:\nNo replacement was performed, old_str `x` did not appear verbatim in /repo/a.py.",
            "tool_error",
            "No replacement was performed, old_str `x` did not appear verbatim in /repo/a.py.",
        ),
        ("Error: payment method not found", "tool_error", "payment method not found"),
        ("错误：找不到文件 config.yaml", "tool_error", "找不到文件 config.yaml"),
        (
            "src/a.c:3:5: error: expected ';' before '}' token\n1 error generated.",
            "error_line",
            "src/a.c:3:5: error: expected ';' before '}' token",
        ),
        ("编译失败\n退出码: 2", "exit_code", "编译失败"),
        (TRACEBACK, "traceback", "pkg.errors.ConfigMissing: no settings"),
    ],
)
def test_failures_as_tools_report_them(output: str, how: str, line: str) -> None:
    found = failure(output)
    assert found is not None and (found.how, found.line) == (how, line)


@pytest.mark.parametrize(
    "output",
    [
        "all good\n" + STATUS.format(code=0),
        # a script that printed a traceback and went on is not a failed call
        TRACEBACK + "recovered, continuing\nstep 2 ok\nstep 3 ok\nstep 4 ok\ndone\n" + STATUS.format(code=0),
        # an editor showing a file: every line starts with its number, so no line-start rule can fire
        "Here's the result of running `cat -n` on /repo/a.py:\n     1\tERROR: not a reply\n     2\traise KeyError",
        # with exit code 0 reported, an ERROR line is the program talking, not the call failing
        "ERROR: optional plugin missing, using the default\n" + STATUS.format(code=0),
        '[{"id": "HAT139", "status": "available"}]',  # a JSON list is not a [status] line
    ],
)
def test_outputs_that_did_not_fail(output: str) -> None:
    assert failure(output) is None


def test_failure_describe_keeps_the_exit_code() -> None:
    found = failure("boom\n" + STATUS.format(code=3))
    assert found is not None and found.describe() == "exit 3: boom"
