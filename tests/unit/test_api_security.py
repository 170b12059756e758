"""Keys and rate limits through the HTTP API: several keys per tenant, rotation, 429 with Retry-After."""

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mnemoflow.config import Settings
from mnemoflow.testing import ListBus, ManualClock
from serving.api import create_api


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def api(tmp_path: Path, clock: ManualClock | None = None, **settings: Any) -> TestClient:
    clock = clock or ManualClock()
    return TestClient(create_api(Settings(data_dir=tmp_path, **settings), ListBus(), timer=clock.monotonic))


def conversations(client: TestClient, key: str) -> int:
    return client.get("/v1/users/u1/conversations", headers=bearer(key)).status_code


def test_every_key_of_a_tenant_works_and_a_rotated_out_key_does_not(tmp_path: Path) -> None:
    during = api(tmp_path, api_keys={"acme": ["old", "new"], "other": "k-other"})
    assert conversations(during, "old") == 200 and conversations(during, "new") == 200
    assert conversations(during, "k-other") == 200 and conversations(during, "nope") == 401
    after = api(tmp_path, api_keys={"acme": ["new"], "other": "k-other"})
    assert conversations(after, "new") == 200 and conversations(after, "old") == 401


def test_a_tenant_over_its_limit_gets_429_with_retry_after_and_a_reason(tmp_path: Path) -> None:
    clock = ManualClock()
    client = api(tmp_path, clock, api_keys={"acme": "k"}, rate_limit_per_second=0.5, rate_limit_burst=2)
    assert [conversations(client, "k") for _ in range(2)] == [200, 200]
    refused = client.get("/v1/users/u1/conversations", headers=bearer("k"))
    assert refused.status_code == 429 and refused.headers["retry-after"] == "2"
    assert "rate limit of tenant acme exceeded" in refused.json()["detail"]
    clock.advance(1.0)
    assert conversations(client, "k") == 429
    clock.advance(1.0)
    assert conversations(client, "k") == 200


def test_limits_are_per_tenant_and_overrides_apply(tmp_path: Path) -> None:
    client = api(
        tmp_path,
        api_keys={"acme": "ka", "vip": "kv"},
        rate_limit_per_second=1,
        rate_limit_burst=1,
        rate_limits={"vip": {"per_second": 1, "burst": 5}},
    )
    assert [conversations(client, "ka") for _ in range(2)] == [200, 429]
    assert [conversations(client, "kv") for _ in range(6)] == [200] * 5 + [429]  # acme's limit is not vip's


@pytest.mark.parametrize("path", ["/health", "/health/live", "/metrics"])
def test_unauthenticated_routes_are_not_limited(tmp_path: Path, path: str) -> None:
    client = api(tmp_path, api_keys={"acme": "k"}, rate_limit_per_second=1, rate_limit_burst=1)
    assert [client.get(path).status_code for _ in range(3)] == [200] * 3


def test_unknown_keys_are_401_not_429_and_do_not_spend_a_tenant_budget(tmp_path: Path) -> None:
    client = api(tmp_path, api_keys={"acme": "k"}, rate_limit_per_second=1, rate_limit_burst=1)
    assert [conversations(client, "wrong") for _ in range(3)] == [401] * 3
    assert conversations(client, "k") == 200
