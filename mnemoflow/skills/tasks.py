"""Read a session's finished long tasks from its files: each canvas with the calls on it and their failures."""

from __future__ import annotations

from mnemoflow.offload.annotations import annotated_entries
from mnemoflow.offload.canvas_update import canvas_names, load_canvas
from mnemoflow.offload.entries import read_ref
from mnemoflow.offload.failures import failure
from mnemoflow.ports.files import FileStore
from mnemoflow.skills.distil import TaskTrace


def task_traces(files: FileStore, tenant: str, session: str) -> list[TaskTrace]:
    """Every canvas of ``tenant/session`` as a :class:`TaskTrace`, oldest first.

    A call's failure is its offload entry's ``error`` once the entry was summarised; a call not summarised yet
    (the last ones of a task, when it ends) is judged from its raw output, as the summariser would."""
    entries = {e.tool_call_id: e for e in annotated_entries(files, tenant, session)}
    traces = []
    for name in canvas_names(files, tenant, session):
        canvas = load_canvas(files, tenant, session, name)
        if canvas is None:
            continue
        mine = {t: entries[t] for n in canvas.nodes for t in n.tool_call_ids if t in entries}
        failures: dict[str, str | None] = {}
        for tid, entry in mine.items():
            if entry.summary or entry.error is not None:
                failures[tid] = entry.error
            else:
                raw = read_ref(files, tenant, session, tid)
                found = failure(raw.decode("utf-8", "replace")) if raw is not None else None
                failures[tid] = found.describe() if found else None
        traces.append(TaskTrace(session, name, canvas, mine, failures))
    return traces
