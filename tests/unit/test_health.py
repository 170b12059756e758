"""Readiness: the aggregation in the core, ``/health`` and ``/health/live`` with fake checks, ``mnemoflow status``."""

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mnemoflow.cli import app as cli
from mnemoflow.config import Settings
from mnemoflow.health import Check, CheckResult, aggregate, consumer_lag, run_checks
from mnemoflow.testing import ListBus
from serving.api import create_api


async def fine() -> str:
    return "3 broker(s)"


async def broken() -> str:
    raise ConnectionError("connection refused")


async def hangs() -> str:
    await asyncio.sleep(3600)
    return "never"


def test_all_checks_passing_is_ok() -> None:
    report = asyncio.run(run_checks({"broker": fine, "index": fine}))
    assert report.ok and report.status == "ok" and report.failing == []
    assert [(c.name, c.ok, c.detail) for c in report.checks] == [
        ("broker", True, "3 broker(s)"),
        ("index", True, "3 broker(s)"),
    ]
    assert report.payload() == {"status": "ok", "checks": [c.model_dump() for c in report.checks]}


def test_one_failing_check_degrades_the_report_and_says_why() -> None:
    report = asyncio.run(run_checks({"broker": fine, "worker": broken}))
    assert report.status == "degraded" and report.failing == ["worker"]
    assert report.checks[1].detail == "ConnectionError: connection refused"
    assert report.payload()["failing"] == ["worker"]


def test_a_hanging_check_times_out_is_reported_failing_and_holds_nothing_up() -> None:
    started = time.perf_counter()
    report = asyncio.run(run_checks({"shards": hangs, "broker": fine}, timeout=0.1))
    assert time.perf_counter() - started < 1.0
    assert report.failing == ["shards"] and report.checks[0].detail == "no answer within 0.1s"
    assert report.checks[0].latency_ms == 100.0 and report.checks[1].ok


def test_checks_run_concurrently_under_one_deadline() -> None:
    async def slow() -> str:
        await asyncio.sleep(0.2)
        return "ok"

    started = time.perf_counter()
    report = asyncio.run(run_checks({f"c{i}": slow for i in range(5)}, timeout=1.0))
    assert report.ok and time.perf_counter() - started < 0.6  # five 0.2 s checks, not one after another


def test_aggregate_of_nothing_is_ok() -> None:
    assert aggregate([]).ok and asyncio.run(run_checks({})).payload() == {"status": "ok", "checks": []}


def test_consumer_lag_is_end_minus_committed_per_topic() -> None:
    end = {("turns", 0): 10, ("turns", 1): 5, ("jobs", 0): 7, ("jobs", 1): 3}
    committed = {("turns", 0): 4, ("turns", 1): 5, ("jobs", 0): -1}  # jobs/0 has -1, jobs/1 no commit at all
    beginning = {("turns", 0): 0, ("turns", 1): 0, ("jobs", 0): 2, ("jobs", 1): 0}
    assert consumer_lag(end, committed, beginning) == {"jobs": 5 + 3, "turns": 6}
    assert consumer_lag({("t", 0): 3}, {("t", 0): 9}, {}) == {"t": 0}  # a truncated log is not negative lag


def client_with(tmp_path: Path, checks: dict[str, Check]) -> TestClient:
    settings = Settings(data_dir=tmp_path, api_keys={"acme": "k"}, health_timeout_seconds=0.1)
    return TestClient(create_api(settings, ListBus(), health_checks=lambda deps: checks))


def test_health_route_is_200_when_every_check_passes(tmp_path: Path) -> None:
    response = client_with(tmp_path, {"broker": fine}).get("/health")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    assert [c["name"] for c in response.json()["checks"]] == ["broker"] and "failing" not in response.json()


def test_health_route_is_503_when_a_dependency_fails_or_hangs(tmp_path: Path) -> None:
    response = client_with(tmp_path, {"broker": fine, "worker": broken, "shards": hangs}).get("/health")
    body = response.json()
    assert response.status_code == 503 and body["status"] == "degraded" and body["failing"] == ["worker", "shards"]
    assert {c["name"]: c["ok"] for c in body["checks"]} == {"broker": True, "worker": False, "shards": False}


def test_liveness_does_not_depend_on_any_check(tmp_path: Path) -> None:
    assert client_with(tmp_path, {"worker": broken}).get("/health/live").json() == {"status": "ok"}


def test_the_checks_are_built_from_the_api_collaborators(tmp_path: Path) -> None:
    seen: list[Any] = []

    def build(deps: Any) -> dict[str, Check]:
        seen.append(deps)
        return {}

    create_api(Settings(data_dir=tmp_path), ListBus(), health_checks=build)
    assert seen and seen[0].files.root == tmp_path


REPORT = {
    "status": "degraded",
    "failing": ["worker"],
    "checks": [
        {"name": "broker", "ok": True, "detail": "1 broker(s), controller 1", "latency_ms": 3.2},
        {
            "name": "worker",
            "ok": False,
            "detail": "no Faust worker consuming: group mnemoflow Empty",
            "latency_ms": 9.0,
        },
    ],
}


def fake_get(status: int, body: dict | None = None, error: Exception | None = None) -> Any:
    def get(url: str, timeout: float) -> httpx.Response:
        if error is not None:
            raise error
        return httpx.Response(status, json=body, request=httpx.Request("GET", url))

    return get


def test_status_prints_one_row_per_check_and_exits_1_when_degraded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpx, "get", fake_get(503, REPORT))
    result = CliRunner().invoke(cli, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    assert "degraded" in result.output and "broker" in result.output and "failing" in result.output
    assert "group mnemoflow Empty" in result.output and "9 ms" in result.output


def test_status_exits_0_when_ok_and_1_when_down(monkeypatch: pytest.MonkeyPatch) -> None:
    ok = {"status": "ok", "checks": [CheckResult(name="broker", ok=True, detail="fine", latency_ms=1).model_dump()]}
    monkeypatch.setattr(httpx, "get", fake_get(200, ok))
    result = CliRunner().invoke(cli, ["status"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "broker" in result.output and "ok" in result.output
    monkeypatch.setattr(httpx, "get", fake_get(0, error=httpx.ConnectError("refused")))
    result = CliRunner().invoke(cli, ["status"])
    assert result.exit_code == 1 and "down" in result.output
