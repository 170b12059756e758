"""serving.builder in the cluster shape: actors it creates detached outlive the process that created them (a
Serve build task in a RayService), and with ``detached=False`` (the embedded shape) they end with their owner."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

NS = "mnemoflow-test-builder"

CREATE = """
import sys, ray
from mnemoflow.config import Settings
from serving.builder import ensure_curators, ensure_shards
address, data_dir, namespace, detached = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
ray.init(address=address, namespace=namespace, log_to_driver=False)
settings = Settings(data_dir=data_dir, session_shards=1, curator_shards=1, ray_namespace=namespace)
ensure_shards(settings, detached=detached)
ensure_curators(settings, detached=detached)
print("created")
"""


@pytest.fixture(scope="module")
def ray_local():  # type: ignore[no-untyped-def]
    import ray

    from mnemoflow.cli.stack import start_local_ray

    start_local_ray(NS)
    yield ray
    ray.shutdown()


def _create_in_other_driver(ray, data_dir: Path, namespace: str, detached: bool) -> None:  # type: ignore[no-untyped-def]
    address = ray.get_runtime_context().gcs_address
    args = [sys.executable, "-c", CREATE, address, str(data_dir), namespace, "1" if detached else "0"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "created" in proc.stdout, proc.stderr[-3000:]


def _alive(ray, name: str, namespace: str) -> bool:  # type: ignore[no-untyped-def]
    try:
        ray.get(ray.get_actor(name, namespace=namespace).stats.remote(), timeout=30)
        return True
    except Exception:  # noqa: BLE001 - gone (ValueError) or dead (RayActorError): not alive either way
        return False


def test_detached_actors_outlive_the_driver_that_built_them(ray_local, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from actors import curator_name, shard_name

    _create_in_other_driver(ray_local, tmp_path, NS, detached=True)
    assert _alive(ray_local, shard_name(0), NS) and _alive(ray_local, curator_name(0), NS)
    # A second build (a redeploy) finds the same actors instead of failing on the names.
    _create_in_other_driver(ray_local, tmp_path, NS, detached=True)
    for name in (shard_name(0), curator_name(0)):
        ray_local.kill(ray_local.get_actor(name, namespace=NS), no_restart=True)


def test_owned_actors_end_with_their_owner(ray_local, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from actors import shard_name

    owned = f"{NS}-owned"
    _create_in_other_driver(ray_local, tmp_path, owned, detached=False)
    deadline = time.monotonic() + 60
    while _alive(ray_local, shard_name(0), owned) and time.monotonic() < deadline:
        time.sleep(1)
    assert not _alive(ray_local, shard_name(0), owned)
