"""bench/recall_scale.py runs end to end at a small size on both backends (SQLite in process, Milvus Lite's server
over TCP) and writes every figure it publishes, so the 10^6-atom benchmark cannot rot between its long runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_quick_run_writes_build_size_memory_and_latency_for_both_backends(tmp_path: Path) -> None:
    pytest.importorskip("milvus_lite")
    out = tmp_path / "recall_scale.json"
    cmd = [sys.executable, "bench/recall_scale.py", "--quick", "--sizes", "2000", "--queries", "20", "--out", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["report"]["benchmark"] == "recall_scale" and data["sizes"] == [2000]
    results = data["results"]["2000"]
    assert set(results) == {"sqlite", "milvus"}
    for name, r in results.items():
        assert (r["atoms"], r["users"]) == (2000, 20)
        assert r["build_s"] > 0 and r["atoms_per_s"] > 0 and r["disk_mib"] > 0 and r["rss_mib"] > 0, name
        for part in ("recall", "dense", "bm25"):
            assert 0 < r[part]["p50_ms"] <= r[part]["p99_ms"], (name, part)
        assert isinstance(r["meets_target"], bool)
    assert results["milvus"]["server_rss_mib"] > 0 and results["sqlite"]["server_rss_mib"] is None
    assert len(data["report"]["tables"][0]["rows"]) == 2
