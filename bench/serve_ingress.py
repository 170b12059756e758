"""Serve ingress benchmark: what one HTTP hop into a Ray Serve replica costs on this machine, by ingress kind.

The proxy's added latency contains Serve's own hop (``serve_floor_ms`` in ``bench/proxy.py``: ``GET /health/live``
of the stack, 19-24 ms p50 on our 2-core box). This measures the hop alone, outside the stack: a bare FastAPI
replica answering ``GET /health/live`` with nothing, on a fresh one-machine Ray per kind (Ray reads these switches when
its processes start), one client, keep-alive, after a warm-up:

* ``proxy``       Serve's HTTP proxy actor in front (what the stack runs): client -> proxy -> replica (actor call).
* ``direct``      ``RAY_SERVE_ENABLE_DIRECT_INGRESS=1``: the replica serves HTTP itself, on a port Ray hands out
                  from a pool (``RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT``..), a new one after a restart.
* ``haproxy``     direct ingress behind HAProxy (``RAY_SERVE_ENABLE_HA_PROXY=1``), which gives the stable port;
                  only with ``--haproxy PATH`` (HAProxy is a Debian package, not a Python one). Ray 2.60's
                  HAProxy configuration binds its stats and metrics listeners on every interface.

Writes ``bench/results/serve_ingress.json``. Usage: ``python bench/serve_ingress.py [--haproxy PATH] [-n 300]``;
``--smoke --out PATH``: 10 requests per kind, that it runs (the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.report import Run, Table, result_path  # noqa: E402
from bench.stages import pct  # noqa: E402  (the same percentile as the proxy benchmark it explains)
from streams.broker import free_port  # noqa: E402

REPLICA = """
import json, os, sys, time
from mnemoflow.cli.stack import start_local_ray, wait_live
start_local_ray("serve-ingress")  # before ray is imported: a one-machine Ray on loopback, as the stack starts it
import httpx
from fastapi import FastAPI
from ray import serve

app = FastAPI()

@serve.deployment(ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Live:
    @app.get("/health/live")
    async def live(self) -> str:
        return "ok"

port, direct_port, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
serve.start(http_options={"host": "127.0.0.1", "port": port})
serve.run(Live.bind(), route_prefix="/")
root = f"http://127.0.0.1:{direct_port if os.environ.get('DIRECT_ONLY') else port}"
url = f"{root}/health/live"
wait_live(root, timeout=60)  # HAProxy learns the replica's port a moment after serve.run returns
with httpx.Client() as http:
    for _ in range(50):
        http.get(url)
    ms = []
    for _ in range(n):
        start = time.perf_counter()
        assert http.get(url).status_code == 200
        ms.append((time.perf_counter() - start) * 1000)
print(json.dumps(ms))
"""


def run(kind: str, n: int, haproxy: str | None) -> list[float]:
    port, direct_port = free_port("127.0.0.1"), free_port("127.0.0.1")
    # Ray's workers at nice 0 as the stack runs them (Ray's default is nice 15); the replica's start_local_ray
    # keeps its Ray a one-machine install on loopback.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_worker_niceness": "0"}
    if kind in ("direct", "haproxy"):
        env |= {
            "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
            "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(direct_port),
            "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(direct_port + 1),
        }
    if kind == "direct":
        env["DIRECT_ONLY"] = "1"
    if kind == "haproxy":
        assert haproxy
        env |= {
            "RAY_SERVE_ENABLE_HA_PROXY": "1",
            "RAY_SERVE_HAPROXY_BINARY_PATH": haproxy,
            "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port("127.0.0.1")),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port("127.0.0.1")),
        }
    done = subprocess.run(
        [sys.executable, "-c", REPLICA, str(port), str(direct_port), str(n)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind}: {done.stderr[-2000:]}")
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=300, help="timed requests per kind")
    ap.add_argument("--haproxy", help="HAProxy binary: also measure Serve's HAProxy mode")
    ap.add_argument("--smoke", action="store_true", help="10 requests per kind (the tests)")
    ap.add_argument("--out", help="default bench/results/serve_ingress.json (with --smoke, the temp folder)")
    args = ap.parse_args()
    if args.smoke:
        args.n = 10
    report = Run("serve_ingress", "Serve ingress: one HTTP hop into a Ray Serve replica that does nothing, by kind")
    kinds = ["proxy", "direct"] + (["haproxy"] if args.haproxy else [])
    out: dict[str, object] = {"requests": args.n, "smoke": args.smoke}
    rows = []
    for kind in kinds:
        ms = run(kind, args.n, args.haproxy)
        row = {"p50": round(pct(ms, 0.5), 2), "p90": round(pct(ms, 0.9), 2), "p99": round(pct(ms, 0.99), 2)}
        out[kind] = row
        rows.append([kind, f"{row['p50']:.2f}", f"{row['p90']:.2f}", f"{row['p99']:.2f}"])
    table = Table(
        title=f"GET /health/live through each ingress, {args.n} requests, one client, keep-alive",
        columns=["ingress", "p50 ms", "p90 ms", "p99 ms"],
        rows=rows,
    )
    report.finish([table], out, result_path("serve_ingress", args.out, smoke=args.smoke))


if __name__ == "__main__":
    main()
