"""Ingest benchmark: events/s into L0 on disk, from direct Kafka produce and from the API, on the embedded
Apache Kafka (the default) and on tansu (memory only); and the RSS of the whole default stack, idle and loaded.

    python bench/ingest.py [--quick] [--events N] [--api-events N]
    python bench/ingest.py --smoke --out /tmp/ingest.json   # one stack, 500 + 200 events: that it runs (the tests)

Prints a table and writes bench/results/ingest.json (ingest-quick.json with --quick). The clock starts at the
first produce (or POST) and stops when the last line is on disk, so it measures the whole path, worker included
(the worker is up and has joined its group before the clock starts). RSS sums every process of the stack: this
driver (which hosts Ray's driver and the embedded broker's parent), Ray's GCS/raylet/workers, the Serve controller,
proxy and replica, the shard actors, the Faust worker and the broker (the Apache Kafka JVM, or tansu). A last
Kafka-only run with ``fsync_files=False`` shows what making the files durable before each commit costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.cli.stack import Stack  # noqa: E402
from mnemoflow.config import TOPIC_TURNS, Settings  # noqa: E402
from mnemoflow.events import TurnEvent  # noqa: E402

KEY = "bench-key"
USERS = 200


def tree_pids(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def memory_mib(pids: list[int]) -> tuple[float, float]:
    """(sum of RSS, sum of PSS) in MiB; PSS splits shared pages fairly, RSS counts them in every process."""
    rss = pss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return rss / 1024, pss / 1024


def stack_memory() -> tuple[float, float]:
    """Ray started here is a child of this process (GCS, raylet, and the workers the raylet forks), and so are
    the broker and the Faust worker: the process tree below this driver is the whole stack."""
    return memory_mib(tree_pids(os.getpid()))


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of one process so far: the worker's share of a busy machine is read from it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_lines(data_dir: Path) -> int:
    total = 0
    for path in data_dir.glob("bench/users/*/conversations/*.jsonl"):
        with path.open("rb") as fh:
            total += fh.read().count(b"\n")
    return total


def wait_lines(data_dir: Path, want: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if count_lines(data_dir) >= want:
            return time.perf_counter()
        time.sleep(0.05)
    raise TimeoutError(f"only {count_lines(data_dir)} of {want} lines landed")


def events(n: int, tag: str) -> list[TurnEvent]:
    now = datetime.now(UTC)
    text = "The deploy finished; latency p99 went from 180 ms to 95 ms after the cache change. " * 2
    return [
        TurnEvent(
            tenant="bench",
            message_id=f"{tag}-{i}",
            user=f"u{i % USERS}",
            session=f"s{i % USERS}",
            role="user" if i % 2 else "assistant",
            content=text,
            ts=now,
        )
        for i in range(n)
    ]


async def produce(bootstrap: str, batch: list[TurnEvent]) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=256 * 1024)
    await producer.start()
    try:
        futures = [await producer.send(TOPIC_TURNS, e.model_dump_json().encode(), key=e.key.encode()) for e in batch]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def warm_up(stack: Stack, api: str, data_dir: Path) -> None:
    """One POST and wait until it lands: the worker has joined its group and the path is hot."""
    body = {"turns": [{"message_id": "warm", "user": "warm", "session": "w", "role": "user", "content": "hi"}]}
    httpx.post(f"{api}/v1/turns", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30).raise_for_status()
    deadline = time.monotonic() + 180
    while not list(data_dir.glob("bench/users/warm/conversations/*.jsonl")):
        if time.monotonic() > deadline:
            raise TimeoutError("the worker never consumed the warm-up event")
        time.sleep(0.2)


def post_api(api: str, batch: list[TurnEvent], per_request: int = 500, threads: int = 4) -> None:
    bodies = [
        {"turns": [e.model_dump(mode="json", exclude={"tenant"}) for e in batch[i : i + per_request]]}
        for i in range(0, len(batch), per_request)
    ]
    with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as client:

        def send(body: dict) -> None:
            client.post("/v1/turns", json=body).raise_for_status()

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(send, bodies))


def run_one(broker: str, n_kafka: int, n_api: int, measure_memory: bool, fsync: bool = True, idle_s: float = 5) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"mnemoflow-bench-{broker}-") as tmp:
        data_dir = Path(tmp)
        settings = Settings(
            data_dir=data_dir, embedded_broker=broker, api_port=0, api_keys={"bench": KEY}, fsync_files=fsync
        )
        stack = Stack(settings)
        info = stack.start()
        try:
            warm_up(stack, info.api_url, data_dir)
            result: dict = {}
            if measure_memory:
                time.sleep(idle_s)
                result["idle_rss_mib"], result["idle_pss_mib"] = stack_memory()
            base = count_lines(data_dir)
            batch = events(n_kafka, "k")
            worker_cpu = cpu_seconds(stack.worker_pid)
            t0 = time.perf_counter()
            asyncio.run(produce(info.bootstrap, batch))
            result["kafka_to_l0"] = n_kafka / (wait_lines(data_dir, base + n_kafka, 600) - t0)
            result["worker_cpu_s"] = cpu_seconds(stack.worker_pid) - worker_cpu
            if not n_api:
                return result
            base = count_lines(data_dir)
            batch = events(n_api, "a")
            t0 = time.perf_counter()
            post_api(info.api_url, batch)
            result["api_to_l0"] = n_api / (wait_lines(data_dir, base + n_api, 600) - t0)
            if measure_memory:
                result["loaded_rss_mib"], result["loaded_pss_mib"] = stack_memory()
            return result
        finally:
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20k Kafka events and 5k API events (< 3 minutes)")
    parser.add_argument("--events", type=int, default=None)
    parser.add_argument("--api-events", type=int, default=None)
    parser.add_argument(
        "--smoke", action="store_true", help="500 Kafka and 200 API events, the default broker only (the tests)"
    )
    parser.add_argument("--out", help="default bench/results/ingest.json (ingest-quick.json with --quick)")
    args = parser.parse_args()
    n_kafka = args.events or (500 if args.smoke else 20_000 if args.quick else 100_000)
    n_api = args.api_events or (200 if args.smoke else 5_000 if args.quick else 20_000)

    run = Run("ingest", f"Ingest: {n_kafka:,} Kafka events and {n_api:,} API events into L0 on disk")
    apache = run_one("kafka", n_kafka, n_api, measure_memory=True, idle_s=1 if args.smoke else 5)
    # The smoke run starts one stack (each start is most of a minute on 2 cores): tansu and unsynced files are left out.
    tansu = None if args.smoke else run_one("tansu", n_kafka, n_api, measure_memory=False)
    no_fsync = None if args.smoke else run_one("kafka", n_kafka, 0, measure_memory=False, fsync=False)

    def per_s(measured: dict | None, key: str) -> int | None:
        return round(measured[key]) if measured else None

    def per_cpu_s(measured: dict | None) -> int | None:
        return round(n_kafka / measured["worker_cpu_s"]) if measured else None

    results = {
        "kafka_to_l0_events_per_s": {"apache": per_s(apache, "kafka_to_l0"), "tansu": per_s(tansu, "kafka_to_l0")},
        "api_to_l0_events_per_s": {"apache": per_s(apache, "api_to_l0"), "tansu": per_s(tansu, "api_to_l0")},
        "kafka_to_l0_files_not_fsynced_events_per_s": {"apache": per_s(no_fsync, "kafka_to_l0")},
        # Load-independent: events the worker captured per second of its own CPU (it is one process: one core).
        "kafka_to_l0_events_per_worker_cpu_s": {"apache": per_cpu_s(apache), "tansu": per_cpu_s(tansu)},
        "idle_rss_mib": round(apache["idle_rss_mib"]),
        "loaded_rss_mib": round(apache["loaded_rss_mib"]),
        "idle_pss_mib": round(apache["idle_pss_mib"]),
        "loaded_pss_mib": round(apache["loaded_pss_mib"]),
        "events": {"kafka": n_kafka, "api": n_api},
        "quick": args.quick,
        "smoke": args.smoke,
    }
    rate, per_cpu = results["kafka_to_l0_events_per_s"], results["kafka_to_l0_events_per_worker_cpu_s"]
    api, unsynced = results["api_to_l0_events_per_s"], results["kafka_to_l0_files_not_fsynced_events_per_s"]

    def cell(value: int | None) -> str:
        return "not run" if value is None else f"{value:,}"

    rows = [
        ["Kafka produce → L0 on disk (events/s)", cell(rate["apache"]), cell(rate["tansu"])],
        ["Kafka produce → L0, files not fsynced (events/s)", cell(unsynced["apache"]), ""],
        ["API submit → L0 on disk (events/s)", cell(api["apache"]), cell(api["tansu"])],
        ["Kafka → L0 per second of worker CPU (events)", cell(per_cpu["apache"]), cell(per_cpu["tansu"])],
        ["stack RSS idle / loaded (MiB)", f"{results['idle_rss_mib']:,} / {results['loaded_rss_mib']:,}", ""],
        ["stack PSS idle / loaded (MiB)", f"{results['idle_pss_mib']:,} / {results['loaded_pss_mib']:,}", ""],
    ]
    columns = ["path", "embedded Apache Kafka (default)", "tansu (memory only)"]
    out = result_path("ingest", args.out, smoke=args.smoke, quick=args.quick)
    run.finish([Table(title="Ingest into L0", columns=columns, rows=rows)], results, out)


if __name__ == "__main__":
    main()
