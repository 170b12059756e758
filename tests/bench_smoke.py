"""Smoke runs of the benchmarks: each ``bench/`` script run as a user runs it (its own interpreter, from the
checkout), in its smallest mode, its result file read back and checked for the shape the docs page publishes.

A figure measured here says nothing (tiny data, a test machine's load); what the smoke run proves is that the
script still starts, runs to the end and writes a well-formed result, so that no benchmark the README cites rots
between the runs that publish it. Every run writes to a temporary path: a benchmark that wrote under
``bench/results/`` here would replace a published result, so :func:`run_bench` fails it.

This module does not import pytest (like ``tests/services.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.report import RESULTS, Report
from mnemoflow.cli.stack import LOCAL_RAY_ENV

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"
"""The evaluation data beside the checkout (``bench/`` reads it from there); a smoke run that needs it skips without."""

sys.path.insert(0, str(ROOT / "tools" / "docs"))
import pages  # noqa: E402  (tools/docs is not a package)


def run_bench(
    script: str, *args: str, out: Path, timeout: float = 300, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``python bench/<script>.py *args --out <out>`` from the checkout; returns the JSON it wrote to ``out``.

    Fails with the tail of its output when it exits non-zero or writes nothing, and when it touched
    ``bench/results/``. The one-machine Ray setting the tests' conftest makes is not passed on: a script must make
    it itself before it imports Ray, as it must when a user runs it (``bench/serving.py`` once did not)."""
    before = _results()
    inherited = {k: v for k, v in os.environ.items() if k != LOCAL_RAY_ENV}
    done = subprocess.run(
        [sys.executable, f"bench/{script}.py", *args, "--out", str(out)],
        cwd=ROOT,
        env={**inherited, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    said = f"bench/{script}.py {' '.join(args)}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert done.returncode == 0, said
    assert out.exists(), said
    assert _results() == before, f"bench/{script}.py wrote under bench/results/: {said}"
    return dict(json.loads(out.read_text()))


def check_report(result: dict[str, Any], benchmark: str, keys: set[str]) -> Report:
    """``result`` carries ``keys`` and a report (``bench/report.py``) of ``benchmark`` whose tables are whole and
    render on the benchmarks page as ``make docs-pages`` would render them."""
    assert keys <= result.keys(), f"missing {sorted(keys - result.keys())}"
    report = Report.model_validate(result["report"])
    assert report.benchmark == benchmark and report.tables, report
    assert any(table.rows for table in report.tables), "no table has a row"
    for table in report.tables:
        assert all(len(row) == len(table.columns) for row in table.rows), table
    assert pages._report_section(f"{benchmark}.json", result["report"], "")  # what the docs page shows of it
    return report


def _results() -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in RESULTS.iterdir()} if RESULTS.exists() else {}
