"""Smoke run of bench/governance.py (``--quick``: 500 atoms, hashing embedder, as a script writing to a temporary
path): the fields the issue names, an erase with no residue, and recall that agrees after import and reindex."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_smoke import EVAL, check_report, run_bench


def test_a_quick_run_reports_every_field(tmp_path: Path) -> None:
    if not (EVAL / "locomo" / "locomo-dev.json").exists():
        pytest.skip("LoCoMo data not found")
    out = run_bench("governance", "--quick", out=tmp_path / "governance.json")
    check_report(out, "governance", {"erase_result", "recall_agreement", "others_untouched"})
    for field in ("erase_s", "export_atoms_per_s", "import_atoms_per_s", "reindex_atoms_per_s"):
        assert out[field] > 0, field
    assert out["recall_agreement"] == {"import": 1.0, "reindex": 1.0}
    assert out["residue_bytes_after_erase"] == 0 and out["residue_files"] == []
    assert out["erase_result"]["index_rows_removed"] == 500 and all(out["others_untouched"].values())
