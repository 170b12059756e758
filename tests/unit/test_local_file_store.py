from pathlib import Path

import pytest

from mnemoflow.errors import InvalidInput
from mnemoflow.storage import LocalFileStore


def test_append_and_read_lines(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    files.append_lines("a/b.jsonl", ["one", "two"])
    files.append_lines("a/b.jsonl", ["three"])
    assert list(files.read_lines("a/b.jsonl")) == ["one", "two", "three"]
    assert list(files.read_lines("missing.jsonl")) == []


def test_torn_last_line_is_skipped_and_repaired(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    files.append_lines("x.jsonl", ["whole"])
    with (tmp_path / "x.jsonl").open("ab") as fh:
        fh.write(b'{"torn": ')
    assert list(files.read_lines("x.jsonl")) == ["whole"]
    assert files.repair_tail("x.jsonl") is True
    assert (tmp_path / "x.jsonl").read_bytes() == b"whole\n"
    assert files.repair_tail("x.jsonl") is False


def test_repair_of_a_file_without_any_newline_empties_it(tmp_path: Path) -> None:
    (tmp_path / "y.jsonl").write_bytes(b"partial")
    assert LocalFileStore(tmp_path).repair_tail("y.jsonl") is True
    assert (tmp_path / "y.jsonl").read_bytes() == b""


def test_write_atomic_is_byte_exact(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    data = "é\r\n\x00tail  ".encode() + bytes(range(256))
    files.write_atomic("r/ref.md", data)
    assert files.read_bytes("r/ref.md") == data
    assert files.list_dir("r") == ["ref.md"]  # no temp file left behind


@pytest.mark.parametrize("escape", ["../outside", "/etc/passwd", "a/../../b"])
def test_paths_cannot_leave_the_root(tmp_path: Path, escape: str) -> None:
    with pytest.raises(InvalidInput):
        LocalFileStore(tmp_path / "root").append_lines(escape, ["x"])


def test_lines_with_newlines_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput):
        LocalFileStore(tmp_path).append_lines("x.jsonl", ["a\nb"])
