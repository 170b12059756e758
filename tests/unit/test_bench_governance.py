"""Smoke test of bench/governance.py: a small run (hashing embedder) gives the fields the issue names, an erase
with no residue, and recall that agrees after import and reindex."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import governance


def test_a_quick_run_reports_every_field(tmp_path: Path) -> None:
    if not governance.EVAL.exists():
        pytest.skip("LoCoMo data not found")
    out = governance.run(atoms=300, days=5, embedder_name="hashing", workdir=tmp_path)
    for field in ("erase_s", "export_atoms_per_s", "import_atoms_per_s", "reindex_atoms_per_s"):
        assert out[field] > 0, field
    assert out["recall_agreement"] == {"import": 1.0, "reindex": 1.0}
    assert out["residue_bytes_after_erase"] == 0 and out["residue_files"] == []
    assert out["erase_result"]["index_rows_removed"] == 300 and all(out["others_untouched"].values())
