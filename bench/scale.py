"""Scaling benchmark on the local cluster (tests/cluster.py): what adding processes adds, on this host's cores.

    python bench/scale.py [--quick]
    python bench/scale.py --smoke --out /tmp/scale.json   # tiny phases on the same cluster: that it runs

One cluster (Apache Kafka, Milvus Lite server, two Ray nodes, three Faust workers, two api and two extractor
replicas) serves three measurements in the same run:

* Kafka -> L0 with 1, 2 and 3 workers. k workers start and the group becomes Stable with k members; they are
  frozen (SIGSTOP, for less than the session timeout, so the group keeps its assignment); a backlog of turns
  (LoCoMo's utterances, many users) is produced straight to ``mnemoflow.turns``; the workers are thawed together.
  The rate runs from the thaw to the moment 95% of the backlog is on disk, lines counted on disk, so every worker
  drains its own partitions for the whole window (a backlog produced before the workers start is mostly drained
  by the first one to join before the group is complete). L1 is not scheduled here (``l1_enabled=False``), so
  capture is measured alone.
* Extraction jobs/s with 1 and 2 extractor replicas: L1 for fresh users (40 turns each, already in L0), run
  through the ``extractor`` deployment from this driver, 16 jobs in flight.
* Recall requests/s through the HTTP API with 1 and 2 api replicas: 16 client threads for a fixed time over the
  users that have atoms, LoCoMo questions as queries.

Each phase also records the CPU seconds each kind of process used (workers, broker, api and extractor replicas,
Milvus, Ray's own processes, this driver), so that efficiency can be read against the two cores of this machine.
Prints the tables and writes bench/results/scale.json (scale-quick.json with --quick).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_worker_niceness", "0")

from bench.ingest import produce  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.config import TOPIC_TURNS, WORKER_GROUP  # noqa: E402
from mnemoflow.events import TurnEvent  # noqa: E402
from tests.cluster import TENANT, ClusterShape, LocalCluster  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
CLIENT_THREADS = 16


def locomo() -> tuple[list[str], list[str]]:
    """LoCoMo's utterances and questions (the eval set's own loader)."""
    sys.path.insert(0, str(EVAL))
    from loaders import load_locomo

    texts, questions = [], []
    for sample in load_locomo(str(EVAL / "locomo" / "locomo-dev.json")):
        texts += [t["text"] for t in sample["turns"] if t.get("text")]
        questions += [q["question"] for q in sample["qa"] if q.get("question")]
    return texts, questions


def turns(tag: str, n: int, users: int, texts: list[str], start: datetime) -> list[TurnEvent]:
    return [
        TurnEvent(
            tenant=TENANT,
            message_id=f"{tag}-{i}",
            user=f"{tag}-u{i % users}",
            session=f"{tag}-s{i % users}",
            role="user" if i % 2 == 0 else "assistant",
            content=texts[i % len(texts)],
            ts=start + timedelta(seconds=i),
        )
        for i in range(n)
    ]


async def group_state(bootstrap: str) -> tuple[str, int]:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_consumer_groups([WORKER_GROUP])
        group = described[0].to_object()["groups"][0]
        return str(group["state"]), len(group["members"])
    except KafkaError as exc:  # no coordinator yet (a new cluster's offsets topic): not Stable
        return type(exc).__name__, 0
    finally:
        await admin.close()


def l0_lines(data: Path, tag: str) -> int:
    return sum(p.read_bytes().count(b"\n") for p in (data / TENANT / "users").glob(f"{tag}-u*/conversations/*.jsonl"))


def kind_of(proc: psutil.Process) -> str | None:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    text, head = " ".join(cmd), (cmd[0] if cmd else "")
    for needle, kind in (("streams.worker", "workers"), ("kafka.Kafka", "broker"), ("milvus", "milvus")):
        if needle in text:
            return kind
    if head.startswith("ray::ServeReplica:mnemoflow:api"):
        return "api"
    if head.startswith("ray::ServeReplica:extractor"):
        return "extractor"
    if head.startswith("ray::") or "ray/core" in text or "gcs_server" in head or "raylet" in head:
        return "ray"
    return None


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of every process below this driver, by kind (the driver itself as ``driver``)."""
    me = psutil.Process()
    out: dict[str, float] = {"driver": sum(me.cpu_times()[:2])}
    for proc in me.children(recursive=True):
        kind = kind_of(proc)
        if kind is None:
            continue
        try:
            out[kind] = out.get(kind, 0.0) + sum(proc.cpu_times()[:2])
        except psutil.Error:
            continue
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    # A process that died between the samples is missing from ``after``: its kind reads 0 rather than negative.
    return {k: round(max(0.0, after.get(k, 0.0) - before.get(k, 0.0)), 2) for k in sorted(set(before) | set(after))}


def ingest_phase(c: LocalCluster, k: int, n: int, texts: list[str]) -> dict[str, Any]:
    for index in list(c.workers):
        c.stop_worker(index)
    for index in range(k):
        c.start_worker(index)
    deadline = time.monotonic() + 600
    while asyncio.run(group_state(c.settings.kafka_bootstrap)) != ("Stable", k):
        if time.monotonic() > deadline:
            raise TimeoutError(f"group never Stable with {k} members")
        time.sleep(0.2)
    tag = f"k{k}"
    backlog = turns(tag, n, 240, texts, datetime(2024, 1, 1, tzinfo=UTC))
    workers = [psutil.Process(c.workers[i].pid) for i in range(k)]
    for w in workers:
        w.suspend()
    try:
        t0 = time.perf_counter()
        asyncio.run(produce(c.settings.kafka_bootstrap, backlog))
        frozen_s = time.perf_counter() - t0
    finally:
        for w in workers:
            w.resume()
    t1, cpu1 = time.perf_counter(), cpu_by_kind()
    while (lines := l0_lines(c.data_dir, tag)) < 0.95 * n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{lines} of {n} lines with {k} workers")
        time.sleep(0.05)
    t2, cpu2 = time.perf_counter(), cpu_by_kind()
    state = asyncio.run(group_state(c.settings.kafka_bootstrap))
    while l0_lines(c.data_dir, tag) < n and time.monotonic() < deadline:
        time.sleep(0.2)
    cpu = cpu_delta(cpu1, cpu2)
    return {
        "events_per_s": round(lines / (t2 - t1)),
        "window_events": lines,
        "window_s": round(t2 - t1, 2),
        "events_per_worker_cpu_s": round(lines / cpu["workers"]) if cpu.get("workers") else None,
        "frozen_while_producing_s": round(frozen_s, 2),
        "group_after": {"state": state[0], "members": state[1]},  # a rebalance in the window would show here
        "complete": l0_lines(c.data_dir, tag) == n,
        "cpu_s": cpu,
    }


def scale_app(c: LocalCluster, app: str, replicas: int) -> None:
    """Redeploy one application with another replica count (Serve scales it in place) and wait for it."""
    from ray import serve

    from serving.builder import applications

    a, e = (replicas, 1) if app == "mnemoflow" else (1, replicas)
    built, prefix = applications(c.settings, c.settings.kafka_bootstrap, api_replicas=a, extractor_replicas=e)[app]
    serve.run(built, name=app, route_prefix=prefix)
    deadline = time.monotonic() + 120
    while len(c.replica_pids("api" if app == "mnemoflow" else "extractor")) != replicas:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{app} did not reach {replicas} replicas")
        time.sleep(0.5)


def extraction_phase(c: LocalCluster, replicas: int, users: list[str]) -> dict[str, Any]:
    from serving.extractor import ExtractorClient

    scale_app(c, "extractor", replicas)
    client = ExtractorClient()

    async def run_all() -> list[Any]:
        gate = asyncio.Semaphore(16)

        async def one(user: str) -> Any:
            async with gate:
                return await client.run(TENANT, user)

        return await asyncio.gather(*(one(u) for u in users))

    before, t0 = cpu_by_kind(), time.perf_counter()
    replies = asyncio.run(run_all())
    seconds = time.perf_counter() - t0
    atoms = sum(r.result.stored for r in replies if r.ok and r.result is not None)
    return {
        "jobs_per_s": round(len(users) / seconds, 2),
        "jobs": len(users),
        "seconds": round(seconds, 1),
        "atoms_stored": atoms,
        "failed": sum(not r.ok for r in replies),
        "cpu_s": cpu_delta(before, cpu_by_kind()),
    }


def recall_phase(c: LocalCluster, replicas: int, users: list[str], questions: list[str], seconds: float) -> dict:
    scale_app(c, "mnemoflow", replicas)
    done, failed, latencies = [0], [0], []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(i: int) -> None:
        with httpx.Client(base_url=c.api_url, headers=c.headers(), timeout=30) as http:
            j = i
            while time.monotonic() < stop_at:
                t = time.perf_counter()
                body = {"user": users[j % len(users)], "query": questions[j % len(questions)]}
                ok = http.post("/v1/recall", json=body).status_code == 200
                with lock:
                    if ok:
                        done[0] += 1
                        latencies.append(time.perf_counter() - t)
                    else:
                        failed[0] += 1
                j += CLIENT_THREADS

    before, t0 = cpu_by_kind(), time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    latencies.sort()
    p = (lambda q: round(1000 * latencies[int(q * (len(latencies) - 1))], 1)) if latencies else (lambda q: None)
    return {
        "rps": round(done[0] / elapsed, 1),
        "ok": done[0],
        "failed": failed[0],
        "p50_ms": p(0.5),
        "p99_ms": p(0.99),
        "cpu_s": cpu_delta(before, cpu_by_kind()),
    }


def user_lines(data: Path, tag: str) -> dict[str, int]:
    files = (data / TENANT / "users").glob(f"{tag}-u*/conversations/*.jsonl")
    return {p.parent.parent.name: p.stat().st_size for p in files}


def recovery_worker_kill(c: LocalCluster, texts: list[str], users: int = 60) -> dict[str, Any]:
    """A steady stream (every user gets a turn every ~0.3 s) into three workers; SIGKILL one. Recovery of a user is
    the time from the kill to the next turn of that user on disk; the figure is the slowest user (the ones on the
    killed worker's partitions wait for the rebalance, the others barely notice)."""
    for index in range(3):
        if index not in c.workers:
            c.start_worker(index)
    while asyncio.run(group_state(c.settings.kafka_bootstrap)) != ("Stable", 3):
        time.sleep(0.2)
    tag, stop = "rk", threading.Event()

    def feed() -> None:
        async def run() -> None:
            from aiokafka import AIOKafkaProducer

            producer = AIOKafkaProducer(bootstrap_servers=c.settings.kafka_bootstrap, acks="all", linger_ms=5)
            await producer.start()
            try:
                i = 0
                while not stop.is_set():
                    batch = turns(tag, users, users, texts[i:], datetime(2024, 3, 1, tzinfo=UTC) + timedelta(hours=i))
                    for e in batch:
                        await producer.send(
                            TOPIC_TURNS,
                            e.model_copy(update={"message_id": f"{tag}-{i}-{e.user}"}).model_dump_json().encode(),
                            key=e.key.encode(),
                        )
                    i += 1
                    await asyncio.sleep(0.3)
            finally:
                await producer.stop()

        asyncio.run(run())

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        time.sleep(5)
        before = user_lines(c.data_dir, tag)
        killed_at = time.monotonic()
        c.kill_worker(0)
        recovered: dict[str, float] = {}
        while len(recovered) < len(before) and time.monotonic() - killed_at < 120:
            now = user_lines(c.data_dir, tag)
            for user, size in now.items():
                if user not in recovered and size > before.get(user, 0):
                    recovered[user] = time.monotonic() - killed_at
            time.sleep(0.05)
    finally:
        stop.set()
        feeder.join()
    c.start_worker(0)
    waits = sorted(recovered.values())
    return {
        "users": len(before),
        "recovered": len(waits),
        "max_s": round(waits[-1], 1) if waits else None,
        "p50_s": round(waits[len(waits) // 2], 1) if waits else None,
    }


def recovery_replica_kill(c: LocalCluster, users: list[str], questions: list[str], watch_s: float) -> dict[str, Any]:
    """Recall from 8 threads; SIGKILL one api replica. Recovery is the time from the kill to the last failed
    request (after it, every request succeeds), with how many failed."""
    scale_app(c, "mnemoflow", 2)
    failures: list[float] = []
    stop = threading.Event()
    killed_at = [0.0]

    def client(i: int) -> None:
        with httpx.Client(base_url=c.api_url, headers=c.headers(), timeout=30) as http:
            j = i
            while not stop.is_set():
                try:
                    ok = (
                        http.post(
                            "/v1/recall", json={"user": users[j % len(users)], "query": questions[j % len(questions)]}
                        ).status_code
                        == 200
                    )
                except httpx.HTTPError:
                    ok = False
                if not ok and killed_at[0]:
                    failures.append(time.monotonic() - killed_at[0])
                j += 8

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(3)
    killed_at[0] = time.monotonic()
    os.kill(c.replica_pids("api")[0], 9)
    time.sleep(watch_s)
    stop.set()
    for t in threads:
        t.join()
    return {"failed_requests": len(failures), "last_failure_s": round(max(failures), 1) if failures else 0.0}


def recovery_node_kill(c: LocalCluster) -> dict[str, Any]:
    """SIGKILL the second node's raylet; recovery is the time until the state of a session whose shard was on it
    is served again (the shard restarted on the head and reloaded from files)."""
    from actors.placement import shard_name
    from mnemoflow.sharding import session_key, shard_for

    placement, second = c.shard_nodes(), c.second_node_id
    n = c.settings.session_shards
    session = next(
        s
        for s in (f"rn-{k}" for k in range(1000))
        if placement[shard_name(shard_for(session_key(TENANT, s), n))] == second
    )
    with httpx.Client(base_url=c.api_url, headers=c.headers(), timeout=10) as http:
        assert http.get(f"/v1/sessions/{session}/state").status_code == 200
        killed_at = time.monotonic()
        c.kill_second_raylet()
        dead_after = c.wait_node_dead(second)
        while time.monotonic() - killed_at < 180:
            try:
                if http.get(f"/v1/sessions/{session}/state").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return {
            "node_declared_dead_s": round(dead_after, 1),
            "session_served_again_s": round(time.monotonic() - killed_at, 1),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller backlog and fewer jobs (< 5 minutes)")
    parser.add_argument("--smoke", action="store_true", help="600 events, 2 jobs, 2 s of recall per phase")
    parser.add_argument("--out", help="default bench/results/scale.json (scale-quick.json with --quick)")
    args = parser.parse_args()
    # The backlog is produced while the workers are frozen: well under the timeout.
    backlog = 600 if args.smoke else 30_000 if args.quick else 60_000
    jobs = 2 if args.smoke else 16 if args.quick else 64
    recall_s = 2.0 if args.smoke else 10.0 if args.quick else 60.0
    watch_s = 3.0 if args.smoke else 12.0 if args.quick else 30.0
    texts, questions = locomo()
    started = time.perf_counter()
    run = Run("scale", "Scale-out on one host: what adding workers and replicas adds, and recovery from faults")
    # A dead worker's partitions move after the session timeout: 15 s here (30 s by default), said in the JSON.
    settings = {"l1_enabled": False, "worker_session_timeout": 15.0}
    shape = ClusterShape(workers=3, api_replicas=2, extractor_replicas=2, settings=settings)
    with tempfile.TemporaryDirectory(prefix="mnemoflow-scale-") as tmp, LocalCluster(Path(tmp), shape) as c:
        up_s = round(time.perf_counter() - started, 1)
        ingest = {str(k): ingest_phase(c, k, backlog, texts) for k in (1, 2, 3)}
        # Users for extraction: 40 turns each (20 user turns), in L0 before the extractor runs.
        extraction_users: dict[str, list[str]] = {}
        for r in (1, 2):
            tag = f"x{r}"
            asyncio.run(
                produce(
                    c.settings.kafka_bootstrap,
                    turns(tag, 40 * jobs, jobs, texts[r * 997 :], datetime(2024, 2, 1, tzinfo=UTC)),
                )
            )
            extraction_users[str(r)] = [f"{tag}-u{i}" for i in range(jobs)]
        while any(l0_lines(c.data_dir, f"x{r}") < 40 * jobs for r in (1, 2)):
            time.sleep(0.2)
        extraction = {r: extraction_phase(c, int(r), users) for r, users in extraction_users.items()}
        recall_users = extraction_users["1"] + extraction_users["2"]
        recall = {str(r): recall_phase(c, r, recall_users, questions, recall_s) for r in (1, 2)}
        recovery = {
            "worker_sigkill": recovery_worker_kill(c, texts),
            "api_replica_sigkill": recovery_replica_kill(c, recall_users, questions, watch_s),
            "second_node_raylet_sigkill": recovery_node_kill(c),
        }
    results = {
        "kafka_to_l0_events_per_s": {k: v["events_per_s"] for k, v in ingest.items()},
        "kafka_to_l0_events_per_worker_cpu_s": {k: v["events_per_worker_cpu_s"] for k, v in ingest.items()},
        "recall_rps": {k: v["rps"] for k, v in recall.items()},
        "extraction_jobs_per_s": {k: v["jobs_per_s"] for k, v in extraction.items()},
        "cpu_s": {
            "ingest": {k: v["cpu_s"] for k, v in ingest.items()},
            "extraction": {k: v["cpu_s"] for k, v in extraction.items()},
            "recall": {k: v["cpu_s"] for k, v in recall.items()},
        },
        "recovery": recovery,
        "ingest": ingest,
        "extraction": extraction,
        "recall": recall,
        "cluster_start_s": up_s,
        "worker_session_timeout_s": settings["worker_session_timeout"],
        "quick": args.quick,
        "smoke": args.smoke,
    }
    out = result_path("scale", args.out, smoke=args.smoke, quick=args.quick)
    run.finish(tables(results), results, out)


def tables(r: dict[str, Any]) -> list[Table]:
    def own(phase: str, kind: str) -> str:
        return " / ".join(str(v.get(kind, 0.0)) for v in r["cpu_s"][phase].values())

    k, w = r["kafka_to_l0_events_per_s"], r["kafka_to_l0_events_per_worker_cpu_s"]
    e, q = r["extraction_jobs_per_s"], r["recall_rps"]
    rows = [
        ["Kafka → L0 (events/s), workers", str(k["1"]), str(k["2"]), str(k["3"]), own("ingest", "workers")],
        ["Kafka → L0 per worker CPU second", str(w["1"]), str(w["2"]), str(w["3"]), ""],
        [
            "extraction (jobs of 40 turns/s), extractor replicas",
            str(e["1"]),
            str(e["2"]),
            "",
            own("extraction", "extractor"),
        ],
        [
            "recall through the API (req/s, 16 clients), api replicas",
            str(q["1"]),
            str(q["2"]),
            "",
            own("recall", "api"),
        ],
    ]
    rec = r["recovery"]
    worker, replica, node = rec["worker_sigkill"], rec["api_replica_sigkill"], rec["second_node_raylet_sigkill"]
    faults = [
        [
            "SIGKILL one of three workers",
            f"users back p50 {worker['p50_s']} s, max {worker['max_s']} s"
            f" (session timeout {r['worker_session_timeout_s']} s)",
        ],
        [
            "SIGKILL one of two api replicas",
            f"{replica['failed_requests']} requests failed, none after {replica['last_failure_s']} s",
        ],
        [
            "SIGKILL the second Ray node's raylet",
            f"node dead after {node['node_declared_dead_s']} s;"
            f" its session served again after {node['session_served_again_s']} s",
        ],
    ]
    return [
        Table(
            title="Throughput by number of processes",
            columns=["stage", "1", "2", "3", "CPU s of the stage's own processes (1 / 2 / 3)"],
            rows=rows,
        ),
        Table(title="Recovery from faults (same run)", columns=["fault", "recovery"], rows=faults),
    ]


if __name__ == "__main__":
    main()
