"""On kwok fake nodes: the worker Deployment rolls out and over, a drain evicts workers within their budget, and
the Ray head's budget stops a drain (tools/k8s/rollout.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import fakenodes
import k8scheck
import pytest
import rollout

# A cold tools build (fixture k8s_bin) may take longer than the suite default of 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def live_plane(k8s_bin: Path) -> Iterator[k8scheck.ControlPlane]:
    with k8scheck.ControlPlane(k8s_bin) as cp:
        fakenodes.start(cp)
        k8scheck.install_crds(cp)
        yield cp


def test_workers_roll_out_and_drain_within_their_budgets(live_plane, rendered: dict[str, str]) -> None:
    seen = rollout.run(live_plane, rendered["small"])
    print("\n".join(seen))
    assert len(seen) == 4
