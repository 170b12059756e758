"""What a benchmark publishes: the tables it prints, with the command, the commit, the machine and its load.

Every benchmark ends with :meth:`Run.finish`: it prints the tables and writes its result file with a ``report``
beside the benchmark's own figures. The result files under ``bench/results/`` are committed, and the
documentation's benchmarks page is generated from their reports (``tools/docs/pages.py``), so a figure in the docs
is always the file's, with where and when it was measured. The load is sampled while the benchmark runs, because on
a shared 2-core machine the same code measures two to five times apart at load 1 and at load 15.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from rich.console import Console
from rich.table import Table as RichTable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


def result_path(name: str, out: str | Path | None = None, *, smoke: bool = False, quick: bool = False) -> Path:
    """Where a benchmark writes its result: ``out`` (its ``--out``) when given; for a ``--smoke`` run the temp
    folder, never ``bench/results/`` (a smoke run, tiny data and few iterations, what the tests run so that no
    benchmark rots, says that the benchmark runs, not what it measures, so it must not replace a published result);
    else ``bench/results/<name>.json``, ``<name>-quick.json`` for a ``--quick`` run. ``name``: the benchmark's
    module name, with the variant the run measured where it has one (``model_engine-qwen2.5-0.5b``)."""
    if out:
        return Path(out)
    if smoke:
        return Path(tempfile.gettempdir()) / f"mnemoflow-bench-{name}-smoke.json"
    return RESULTS / f"{name}{'-quick' if quick else ''}.json"


class Table(BaseModel):
    title: str
    columns: list[str]
    rows: list[list[str]]


class Machine(BaseModel):
    cpus: int
    cpu_model: str
    memory_gib: float
    python: str
    system: str


class Load(BaseModel):
    """The 1-minute load average at the start, at the end, and the highest sampled (every 5 s) in between."""

    start: float
    end: float
    peak: float


class Report(BaseModel):
    benchmark: str = Field(description="the module's name: ingest, locomo_recall, …")
    title: str
    command: str
    commit: str = Field(description="short hash of HEAD, with -dirty when the tree held other changes")
    finished: datetime
    seconds: float
    machine: Machine
    load: Load
    tables: list[Table]
    notes: list[str] = []


def machine() -> Machine:
    model, memory = platform.processor() or platform.machine(), 0.0
    cpuinfo, meminfo = Path("/proc/cpuinfo"), Path("/proc/meminfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line]
        model = names[0] if names else model
    if meminfo.exists():
        total = next(line for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:"))
        memory = round(int(total.split()[1]) / 2**20, 1)
    return Machine(
        cpus=os.cpu_count() or 1,
        cpu_model=model,
        memory_gib=memory,
        python=platform.python_version(),
        system=platform.system(),
    )


def commit() -> str:
    """HEAD, marked dirty when files outside ``bench/results/`` differ from it (what ran is then not HEAD)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = [line for line in git("status", "--porcelain").splitlines() if "bench/results/" not in line]
    return f"{head}-dirty" if changed else head


class Run:
    """One benchmark run: started when made, sampling the load; :meth:`finish` publishes it."""

    def __init__(self, benchmark: str, title: str) -> None:
        self.benchmark, self.title = benchmark, title
        self.command = " ".join(["python", f"bench/{benchmark}.py", *sys.argv[1:]])
        self._commit = commit()  # what runs is the code at the start: a commit made during a long run is not in it
        self._started = time.monotonic()
        self._start_load = self._peak = os.getloadavg()[0]
        self._stop = threading.Event()
        threading.Thread(target=self._sample, name="load-sampler", daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(5.0):
            self._peak = max(self._peak, os.getloadavg()[0])

    def finish(self, tables: list[Table], result: dict[str, Any], out: Path, notes: list[str] | None = None) -> Report:
        """Print the tables and write ``result`` with its report to ``out``."""
        self._stop.set()
        end = os.getloadavg()[0]
        report = Report(
            benchmark=self.benchmark,
            title=self.title,
            command=self.command,
            commit=self._commit,
            finished=datetime.now(UTC).replace(microsecond=0),
            seconds=round(time.monotonic() - self._started, 1),
            machine=machine(),
            load=Load(start=round(self._start_load, 2), end=round(end, 2), peak=round(max(self._peak, end), 2)),
            tables=tables,
            notes=notes or [],
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"report": report.model_dump(mode="json"), **result}, indent=1, ensure_ascii=False))
        console = Console()
        for table in tables:
            shown = RichTable(title=table.title)
            for column in table.columns:
                shown.add_column(column)
            for row in table.rows:
                shown.add_row(*row)
            console.print(shown)
        console.print(
            f"{report.commit}, load {report.load.start} → {report.load.end} (peak {report.load.peak}); wrote {out}"
        )
        return report
