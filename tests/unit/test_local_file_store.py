import os
from pathlib import Path

import pytest

from mnemoflow.errors import InvalidInput
from mnemoflow.storage import LocalFileStore, local


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


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path fsynced, in call order (files and folders), with what existed at that moment.

    syncfs is off here, so every path the store makes durable shows up as its own fsync."""
    calls: list[str] = []
    real = os.fsync
    monkeypatch.setattr(local, "_SYNCFS", None)

    def spy(fd: int) -> None:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def test_an_append_is_durable_on_return_file_and_new_folders_too(tmp_path: Path, synced: list[str]) -> None:
    files = LocalFileStore(tmp_path)
    files.append_lines("a/b/c.jsonl", ["one"])
    assert sorted(synced) == sorted(
        str(p) for p in (tmp_path / "a/b/c.jsonl", tmp_path / "a/b", tmp_path / "a", tmp_path)
    )
    synced.clear()
    files.append_lines("a/b/c.jsonl", ["two"])
    assert synced == [str(tmp_path / "a/b/c.jsonl")]  # an existing name: only the file's bytes


def test_a_group_commit_syncs_each_file_and_folder_once_when_it_exits(tmp_path: Path, synced: list[str]) -> None:
    files = LocalFileStore(tmp_path)
    files.append_lines("u/x.jsonl", ["seed"])
    synced.clear()
    with files.group_commit():
        for i in range(3):
            files.append_lines("u/x.jsonl", [f"x{i}"])
            files.append_lines("u/y.jsonl", [f"y{i}"])
        with files.group_commit():  # nested: joins the outer one
            files.append_lines("u/x.jsonl", ["nested"])
        assert synced == []
    assert sorted(synced) == sorted(str(tmp_path / p) for p in ("u/x.jsonl", "u/y.jsonl", "u"))


def test_a_group_commit_still_syncs_what_was_written_when_its_block_fails(tmp_path: Path, synced: list[str]) -> None:
    files = LocalFileStore(tmp_path)
    with pytest.raises(RuntimeError), files.group_commit():
        files.append_lines("z.jsonl", ["written before the error"])
        raise RuntimeError("the next write failed")
    assert str(tmp_path / "z.jsonl") in synced


def test_atomic_writes_sync_the_bytes_before_the_rename_and_the_folder_after(tmp_path: Path, synced: list[str]) -> None:
    files = LocalFileStore(tmp_path)
    files.write_atomic_many({"r/a.md": b"A", "r/b.md": b"B"})
    temps = [p for p in synced if p.endswith(".tmp")]
    assert len(temps) == 2 and all(Path(p).parent == tmp_path / "r" for p in temps)  # before the rename
    assert synced.index(str(tmp_path / "r")) > max(synced.index(p) for p in temps)
    assert files.read_bytes("r/a.md") == b"A" and files.list_dir("r") == ["a.md", "b.md"]


def test_fsync_off_syncs_nothing(tmp_path: Path, synced: list[str]) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    with files.group_commit():
        files.append_lines("a.jsonl", ["x"])
    files.write_atomic("b.json", b"{}")
    assert synced == []


def test_a_large_group_is_made_durable_by_one_syncfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if local._SYNCFS is None:
        pytest.skip("no syncfs(2) on this platform: the store fsyncs each path")
    calls: list[str] = []
    real = local._SYNCFS

    def spy(fd: int) -> int:
        calls.append(os.readlink(f"/proc/self/fd/{fd}"))
        return int(real(fd))

    monkeypatch.setattr(local, "_SYNCFS", spy)
    files = LocalFileStore(tmp_path)
    with files.group_commit():
        for i in range(20):
            files.append_lines(f"users/u{i}/l0.jsonl", ["x"])
    assert len(calls) == 1 and Path(calls[0]).is_relative_to(tmp_path)


def test_removing_a_folder_also_removes_what_a_writer_added_meanwhile(tmp_path: Path, monkeypatch) -> None:
    """An erase removes a user's folder while a curator may be writing a backup into it: rmtree then fails with
    'Directory not empty' on the entry it never listed; the removal goes on and takes that entry too."""
    import errno
    import shutil

    files = LocalFileStore(tmp_path)
    files.write_atomic("t/users/u/scenes/a.md", b"scene")
    real = shutil.rmtree
    calls = []

    def racing_rmtree(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 1:
            (tmp_path / "t/users/u/scenes/.backup").mkdir()
            (tmp_path / "t/users/u/scenes/.backup/a.md").write_bytes(b"late")
            raise OSError(errno.ENOTEMPTY, "Directory not empty", ".backup")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", racing_rmtree)
    assert files.remove("t/users/u") == 1
    assert not (tmp_path / "t/users/u").exists() and len(calls) == 2


def test_read_tail_reads_from_an_offset_and_tells_a_replaced_file(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    assert files.read_tail("d.jsonl", 0) is None
    files.append_lines("d.jsonl", ["one", "two"])
    first = files.read_tail("d.jsonl", 0)
    assert first is not None and first.lines == ["one", "two"] and first.end == first.size == 8
    with (tmp_path / "d.jsonl").open("ab") as fh:
        fh.write(b"thr")  # torn: left for a later read
    files.repair_tail("d.jsonl")
    files.append_lines("d.jsonl", ["three"])
    more = files.read_tail("d.jsonl", first.end)
    assert more is not None and more.lines == ["three"] and more.end == 14 and more.file_id == first.file_id
    files.write_atomic("d.jsonl", b"x\n")
    replaced = files.read_tail("d.jsonl", more.end)
    assert replaced is not None and replaced.file_id != first.file_id and replaced.size == 2 and replaced.lines == []


def test_stat_dir_gives_the_ids_and_sizes_read_tail_gives(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path)
    assert files.stat_dir("c") == {}
    files.append_lines("c/2026-01-02.jsonl", ["abc"])
    files.append_lines("c/2026-01-01.jsonl", ["a", "b"])
    files.write_atomic("c/.hidden", b"x")
    (tmp_path / "c" / "sub").mkdir()
    found = files.stat_dir("c")
    assert list(found) == ["2026-01-01.jsonl", "2026-01-02.jsonl"]
    tail = files.read_tail("c/2026-01-01.jsonl", 0)
    assert tail is not None and (found["2026-01-01.jsonl"].file_id, found["2026-01-01.jsonl"].size) == (
        tail.file_id,
        tail.size,
    )
