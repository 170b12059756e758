"""Fixtures of the manifest checks: the tools (built from Go modules by tools/k8s/build.sh, cached by version),
the rendered overlays, and one real API server for the module. A tool that cannot be built fails the tests with
build.sh's reason; nothing here is skipped."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "k8s"))

import k8scheck  # noqa: E402


@pytest.fixture(scope="session")
def k8s_bin() -> Path:
    started = time.monotonic()
    try:
        bin_dir = k8scheck.tools()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    print(f"k8s tools ready in {time.monotonic() - started:.1f} s: {bin_dir}")
    return bin_dir


@pytest.fixture(scope="session")
def rendered(k8s_bin: Path) -> dict[str, str]:
    return {name: k8scheck.render(k8s_bin, name) for name in k8scheck.OVERLAYS}


@pytest.fixture(scope="session")
def control_plane(k8s_bin: Path) -> Iterator[k8scheck.ControlPlane]:
    with k8scheck.ControlPlane(k8s_bin) as cp:
        k8scheck.install_crds(cp)
        yield cp
