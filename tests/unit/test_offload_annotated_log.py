"""AnnotatedLog (what a session shard keeps of a session's log between compactions) reads what annotated_entries
reads: after appends to either file, after the log is replaced (retention rewrites it) and after it is removed."""

from datetime import UTC, datetime
from pathlib import Path

from mnemoflow.events import ToolResultEvent
from mnemoflow.offload.annotations import AnnotatedLog, Annotation, annotated_entries, append_annotations
from mnemoflow.offload.entries import OffloadWriter
from mnemoflow.storage import Layout, LocalFileStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _write(files: LocalFileStore, *ids: str) -> None:
    OffloadWriter(files).write(
        ToolResultEvent(tenant="t", session="s", tool_call_id=i, tool_name="bash", arguments="{}", content=i, ts=NOW)
        for i in ids
    )


def test_annotated_log_reads_what_annotated_entries_reads(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    log = AnnotatedLog()
    assert log.read(files, "t", "s") == annotated_entries(files, "t", "s") == []
    _write(files, "a", "b")
    assert log.read(files, "t", "s") == annotated_entries(files, "t", "s")
    append_annotations(files, "t", "s", [Annotation(tool_call_id="a", summary="first", score=3)])
    _write(files, "c")
    append_annotations(files, "t", "s", [Annotation(tool_call_id="c", node_id="001-n1")])
    append_annotations(files, "t", "s", [Annotation(tool_call_id="a", node_id="001-n2")])
    got = log.read(files, "t", "s")
    assert got == annotated_entries(files, "t", "s")
    assert (got[0].summary, got[0].score, got[0].node_id, got[2].node_id) == ("first", 3, "001-n2", "001-n1")
    path = Layout.offload("t", "s")
    lines = list(files.read_lines(path))
    files.write_atomic(path, ("\n".join(lines[1:]) + "\n").encode())  # replaced: one entry fewer
    assert log.read(files, "t", "s") == annotated_entries(files, "t", "s")
    assert [e.tool_call_id for e in log.read(files, "t", "s")] == ["b", "c"]
    files.remove(Layout.session_dir("t", "s"))
    assert log.read(files, "t", "s") == [] == annotated_entries(files, "t", "s")
