"""The manifests pass every tier, and each tier refuses what it must (tools/k8s/negative/*.yaml)."""

from __future__ import annotations

from pathlib import Path

import k8scheck
import pytest

# A cold tools build (fixture k8s_bin) may take longer than the suite default of 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

NEGATIVE = k8scheck.negative_cases()


@pytest.mark.parametrize("overlay", k8scheck.OVERLAYS)
def test_schema_tier_accepts_the_overlay(k8s_bin: Path, rendered: dict[str, str], overlay: str) -> None:
    result = k8scheck.schema_check(k8s_bin, rendered[overlay])
    assert result.ok, result.output


@pytest.mark.parametrize("overlay", k8scheck.OVERLAYS)
def test_api_server_accepts_every_object(control_plane, rendered: dict[str, str], overlay: str) -> None:
    result = k8scheck.server_check(control_plane, rendered[overlay])
    assert result.ok, result.output
    # Every rendered object went through the server (kubectl prints one line per object).
    assert result.output.count("(server dry run)") == len(k8scheck.objects(rendered[overlay])), result.output


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_schema_tier_refuses_what_it_must(k8s_bin: Path, case: str) -> None:
    text, refused_by = NEGATIVE[case]
    result = k8scheck.schema_check(k8s_bin, text)
    assert result.ok is ("schema" not in refused_by), result.output


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_api_server_refuses_what_it_must(control_plane, case: str) -> None:
    text, refused_by = NEGATIVE[case]
    result = k8scheck.server_check(control_plane, text)
    assert "server" in refused_by and not result.ok, result.output


def test_every_negative_case_is_refused_by_the_server() -> None:
    """The API server is the tier that must catch everything: each case names it."""
    assert NEGATIVE and all("server" in tiers for _, tiers in NEGATIVE.values())
