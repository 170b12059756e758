"""The walking skeleton on the real stack: Apache Kafka, the Faust worker, Ray actors and Ray Serve.

One stack for the module. Every check reads the files (the source of truth) line by line against the input.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.config import Settings
from mnemoflow.memory.l0 import read_l0
from mnemoflow.offload.entries import read_entries, read_ref
from mnemoflow.storage import LocalFileStore
from streams.broker import free_port
from streams.broker_kafka import EmbeddedKafka
from tests.prometheus import Samples, delta, scrape, total

pytestmark = pytest.mark.integration

TENANT, KEY = "acme", "key-acme"
AUTH = {"Authorization": f"Bearer {KEY}"}
T0 = datetime(2026, 5, 1, 22, 0, tzinfo=UTC)
USERS, TURNS_PER_USER = 20, 50
SESSIONS, RESULTS_PER_SESSION = 10, 30


def make_turns() -> list[dict]:
    turns = []
    for i in range(USERS * TURNS_PER_USER):
        user, k = f"user-{i % USERS}", i // USERS
        turns.append(
            {
                "message_id": f"{user}-m{k}",
                "user": user,
                "session": f"{user}-chat",
                "role": "user" if k % 2 == 0 else "assistant",
                "content": f'turn {k} of {user}: caf\u00e9 \u4e2d\u6587 "quoted" \\ back\nslash',
                "ts": (T0 + timedelta(minutes=3 * k)).isoformat(),  # crosses midnight: two day files per user
            }
        )
    return turns


def make_results() -> list[dict]:
    results = []
    for i in range(SESSIONS * RESULTS_PER_SESSION):
        session, k = f"sess-{i % SESSIONS}", i // SESSIONS
        body = f"$ run {k}\r\n" + "\u00e9\U0001f600\t trailing  \n" * (k * 40) + ("\x00bin" if k == 7 else "")
        results.append(
            {
                "tool_call_id": f"{session}-call_{k}",
                "session": session,
                "tool_name": "execute_bash",
                "arguments": {"command": f"run {k}"},
                "content": body,
                "ts": (T0 + timedelta(seconds=k)).isoformat(),
            }
        )
    return results


@pytest.fixture(scope="module")
def stack(apache_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("stack"),
        kafka_bootstrap=apache_kafka.bootstrap,
        api_port=0,
        api_keys={TENANT: KEY, "other": "key-other"},
        session_shards=4,
        turns_partitions=8,
        worker_batch_size=50,  # small batches: a SIGKILL lands between many commits
        worker_session_timeout=8,
        worker_metrics_port=free_port(),  # not the default: another stack may run on this host
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[httpx.Client]:
    assert stack.info is not None
    with httpx.Client(base_url=stack.info.api_url, headers=AUTH, timeout=60) as client:
        yield client


def post_all(api: httpx.Client, turns: list[dict], results: list[dict]) -> None:
    for start in range(0, len(turns), 100):
        assert api.post("/v1/turns", json={"turns": turns[start : start + 100]}).status_code == 202
    for start in range(0, len(results), 30):
        assert api.post("/v1/tool-results", json={"results": results[start : start + 30]}).status_code == 202


def landed(files: LocalFileStore) -> tuple[int, int]:
    turns = sum(len(read_l0(files, TENANT, f"user-{u}", limit=10_000)) for u in range(USERS))
    results = sum(len(read_entries(files, TENANT, f"sess-{s}")) for s in range(SESSIONS))
    return turns, results


def wait_landed(files: LocalFileStore, want: tuple[int, int], timeout: float = 180) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    got = landed(files)
    while got != want and time.monotonic() < deadline:
        time.sleep(0.5)
        got = landed(files)
    return got


def test_everything_lands_exactly_once_in_order_across_a_worker_sigkill(stack: Stack, api: httpx.Client) -> None:
    files = LocalFileStore(stack.settings.data_dir)
    turns, results = make_turns(), make_results()
    half_t, half_r = len(turns) // 2, len(results) // 2
    post_all(api, turns[:half_t], results[:half_r])

    deadline = time.monotonic() + 120
    while landed(files) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.05)
    at_kill = landed(files)
    stack.kill_worker(signal.SIGKILL)
    assert at_kill != (0, 0), "the worker never started consuming"
    print(f"SIGKILL with {at_kill} of {(len(turns), len(results))} landed")

    post_all(api, turns[half_t:], results[half_r:])  # while no worker runs: Kafka holds them
    post_all(api, turns[:200], results[:60])  # a client retry of events already applied
    stack.start_worker()

    assert wait_landed(files, (len(turns), len(results))) == (len(turns), len(results)), f"killed at {at_kill}"
    for u in range(USERS):
        want = [t for t in turns if t["user"] == f"user-{u}"]
        got = read_l0(files, TENANT, f"user-{u}", limit=10_000)
        assert [(m.id, m.role, m.content, m.session) for m in got] == [
            (t["message_id"], t["role"], t["content"], t["session"]) for t in want
        ]
    for s in range(SESSIONS):
        want = [r for r in results if r["session"] == f"sess-{s}"]
        entries = read_entries(files, TENANT, f"sess-{s}")
        assert [e.tool_call_id for e in entries] == [r["tool_call_id"] for r in want]
        assert [e.seq for e in entries] == list(range(len(want)))
        for entry, r in zip(entries, want, strict=True):
            assert read_ref(files, TENANT, f"sess-{s}", entry.tool_call_id) == r["content"].encode()
            raw = api.get(f"/v1/sessions/sess-{s}/refs/{entry.tool_call_id}")
            assert raw.content == r["content"].encode()


def test_api_reads_back_what_landed(stack: Stack, api: httpx.Client) -> None:
    got = api.get("/v1/users/user-3/conversations", params={"limit": 10_000}).json()
    assert [m["id"] for m in got] == [f"user-3-m{k}" for k in range(TURNS_PER_USER)]
    assert len(api.get("/v1/sessions/sess-2/offload", params={"after_seq": 27}).json()) == 2
    other_key = {"Authorization": "Bearer key-other"}
    other = httpx.get(f"{stack.info.api_url}/v1/users/user-3/conversations", headers=other_key)
    assert other.status_code == 200 and other.json() == []


def wait_state(api: httpx.Client, session: str, count: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    state = api.get(f"/v1/sessions/{session}/state").json()
    while state.get("count") != count and time.monotonic() < deadline:
        time.sleep(0.3)
        state = api.get(f"/v1/sessions/{session}/state").json()
    return state


def test_session_shard_restart_reloads_state(stack: Stack, api: httpx.Client) -> None:
    import ray

    from actors import ShardClient

    client = ShardClient(stack.settings)
    before = {s: wait_state(api, f"sess-{s}", RESULTS_PER_SESSION) for s in range(SESSIONS)}
    assert {(st["count"], st["last_seq"]) for st in before.values()} == {(RESULTS_PER_SESSION, RESULTS_PER_SESSION - 1)}
    index = client.index_for(TENANT, "sess-0")
    ray.kill(client.handle(index), no_restart=False)  # Ray restarts it empty; it reloads from the files

    after = wait_state(api, "sess-0", RESULTS_PER_SESSION)
    assert after == before[0]
    assert ray.get(client.handle(index).stats.remote())["loads"] >= 1
    extra = {"tool_call_id": "sess-0-call_extra", "session": "sess-0", "tool_name": "ls", "content": "a\nb\n"}
    assert api.post("/v1/tool-results", json={"results": [extra]}).status_code == 202
    state = wait_state(api, "sess-0", RESULTS_PER_SESSION + 1)
    assert (state["count"], state["last_entry"]["tool_call_id"]) == (RESULTS_PER_SESSION + 1, "sess-0-call_extra")


def bad_turn(**over: object) -> dict:
    return {"turns": [{"message_id": "b", "user": "intruder", "session": "s", "role": "user", "content": "x", **over}]}


def bad_result(**over: object) -> dict:
    return {"results": [{"tool_call_id": "c", "session": "intruder", "tool_name": "t", "content": "x", **over}]}


TOO_BIG = {"turns": [bad_turn(message_id=f"b{i}", content="x" * 100_000)["turns"][0] for i in range(11)]}
BAD = [
    ("/v1/turns", bad_turn(role="robot"), 422),
    ("/v1/turns", {"turns": [{"message_id": "b", "user": "intruder", "session": "s", "role": "user"}]}, 422),
    ("/v1/turns", bad_turn(content=5), 422),
    ("/v1/turns", bad_turn(user="../intruder"), 422),
    ("/v1/turns", bad_turn(message_id="b5/.."), 422),
    ("/v1/tool-results", bad_result(tool_call_id="../../x"), 422),
    ("/v1/tool-results", bad_result(session="in/truder"), 422),
    ("/v1/turns", TOO_BIG, 413),
]


@pytest.mark.parametrize(("path", "body", "status"), BAD)
def test_bad_input_gets_a_reason_and_writes_nothing(
    stack: Stack, api: httpx.Client, path: str, body: dict, status: int
) -> None:
    response = api.post(path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["detail"] and "Traceback" not in response.text
    time.sleep(0.5)
    tenant_dir = stack.settings.data_dir / TENANT
    assert not list(tenant_dir.rglob("*intruder*")) and not (stack.settings.data_dir / "intruder").exists()


def wait_health(url: str, status: int, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    response = httpx.get(f"{url}/health", timeout=10)
    while response.status_code != status and time.monotonic() < deadline:
        time.sleep(1.0)
        response = httpx.get(f"{url}/health", timeout=10)
    assert response.status_code == status, response.text
    return response.json()


def test_health_reports_each_dependency_and_a_stopped_worker_through_serve(stack: Stack) -> None:
    url = stack.info.api_url
    assert httpx.get(f"{url}/health/live").json() == {"status": "ok"}
    body = wait_health(url, 200)  # the worker group settles after the SIGKILL and restart above
    checks = {c["name"]: c for c in body["checks"]}
    assert body["status"] == "ok" and list(checks) == [
        "broker",
        "worker",
        "session_shards",
        "curators",
        "atom_index",
        "extractor",
    ]
    assert "Stable" in checks["worker"]["detail"] and "mnemoflow.turns" in checks["worker"]["detail"]
    assert checks["session_shards"]["detail"] == "4/4 alive", checks
    started = time.monotonic()
    httpx.get(f"{url}/health", timeout=10)
    assert time.monotonic() - started < 2.5

    # The extractor answers its check while passes run (they have a loop of their own), so the worker is stopped
    # whatever backlog the restarted worker above left, and the worker alone is reported failing.
    stack.kill_worker(signal.SIGTERM)  # a clean stop leaves the group at once
    try:
        degraded = wait_health(url, 503, timeout=30)
        assert degraded["status"] == "degraded" and degraded["failing"] == ["worker"], degraded
        assert httpx.get(f"{url}/health/live").status_code == 200
    finally:
        stack.start_worker()
    wait_health(url, 200)
    metrics = httpx.get(f"{url}/metrics").text
    assert "mnemoflow_events_submitted_total" in metrics


def test_a_restarted_worker_runs_the_extraction_its_predecessor_left_due(stack: Stack) -> None:
    """Wake-ups live in a worker's memory. A worker assigned partitions re-derives them from the users' trigger
    states: an idle extraction that came due while no worker ran, and a pass a stopped worker left running, are
    run without a new turn from those users."""
    from mnemoflow.events import TurnEvent
    from mnemoflow.memory.l0 import L0Writer
    from mnemoflow.memory.l1.state import load_cursor, save_triggers
    from mnemoflow.memory.l1.triggers import TriggerState

    files = LocalFileStore(stack.settings.data_dir)
    now = datetime.now(UTC)
    said = ["I moved to Porto last spring.", "My sister Ines teaches chemistry.", "I always cycle to work."]
    stack.kill_worker(signal.SIGTERM)
    try:  # what a worker captured before it stopped, and the trigger states it left
        for user in ("idle-due", "left-running"):
            L0Writer(files).write(
                TurnEvent(
                    tenant=TENANT, message_id=f"{user}-{i}", user=user, session="s", role="user", content=t, ts=now
                )
                for i, t in enumerate(said)
            )
        earlier = now - timedelta(hours=1)
        save_triggers(
            files,
            {
                (TENANT, "idle-due"): TriggerState(pending=3, last_turn_at=earlier),
                (TENANT, "left-running"): TriggerState(pending=3, inflight=3, running=True, last_turn_at=earlier),
            },
        )
    finally:
        stack.start_worker()
    deadline = time.monotonic() + 180  # the first retry delay (30 s) for the pass left running, then the pass
    cursors = {}
    while time.monotonic() < deadline:
        cursors = {u: sum(load_cursor(files, TENANT, u).done.values()) for u in ("idle-due", "left-running")}
        if cursors == {"idle-due": 3, "left-running": 3}:
            break
        time.sleep(1)
    assert cursors == {"idle-due": 3, "left-running": 3}


def test_no_dead_letters_were_needed(stack: Stack) -> None:
    log = (Path(stack.log_dir) / "worker.log").read_text(errors="replace")
    assert "parked" not in log


def test_a_record_that_cannot_parse_is_parked_with_its_reason_and_blocks_nothing(
    stack: Stack, api: httpx.Client
) -> None:
    import asyncio
    import base64
    import json

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    from mnemoflow.config import TOPIC_DEAD_LETTERS, TOPIC_TURNS

    bootstrap = stack.settings.kafka_bootstrap
    garbage = [b'{"tenant": "acme", "user": "user-0", "torn', b'{"tenant": "acme", "user": "user-0", "role": "user"}']

    async def produce_garbage_then_read_dead_letters() -> list[dict]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        for value in garbage:
            await producer.send_and_wait(TOPIC_TURNS, value, key=b"acme/user-0")
        await producer.stop()
        good = {"message_id": "after-garbage", "user": "user-0", "session": "x", "role": "user", "content": "ok"}
        assert api.post("/v1/turns", json={"turns": [good]}).status_code == 202
        consumer = AIOKafkaConsumer(TOPIC_DEAD_LETTERS, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        parked: list[dict] = []
        try:
            async with asyncio.timeout(60):
                while len(parked) < len(garbage):
                    batch = await consumer.getmany(timeout_ms=1000)
                    parked += [json.loads(r.value) for records in batch.values() for r in records]
            return parked
        finally:
            await consumer.stop()

    parked = asyncio.run(produce_garbage_then_read_dead_letters())
    assert [base64.b64decode(p["value_b64"]) for p in parked] == garbage
    assert all(p["topic"] == TOPIC_TURNS and p["reason"].startswith("invalid turn event: ") for p in parked)
    assert "Invalid JSON" in parked[0]["reason"]
    assert "message_id: Field required" in parked[1]["reason"] and "content: Field required" in parked[1]["reason"]
    files = LocalFileStore(stack.settings.data_dir)
    deadline = time.monotonic() + 60
    while read_l0(files, TENANT, "user-0", limit=10_000)[-1].id != "after-garbage" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert read_l0(files, TENANT, "user-0", limit=10_000)[-1].id == "after-garbage"


RAY_SERIES = (
    "ray_mnemoflow_shard_sessions_loaded_total",
    "ray_mnemoflow_shard_compaction_seconds_count",
    "ray_mnemoflow_l1_runs_total",
    "ray_mnemoflow_l1_atoms_total",
    "ray_mnemoflow_l1_dedup_decisions_total",
    "ray_mnemoflow_index_search_seconds_count",
)


def ray_at_rest(url: str, timeout: float = 90) -> Samples:
    """Ray's agent exports every few seconds: the scrape once two scrapes 12 s apart agree on our series."""
    deadline = time.monotonic() + timeout
    last = scrape(url)
    while time.monotonic() < deadline:
        time.sleep(12)
        now = scrape(url)
        if all(total(now, name) == total(last, name) for name in RAY_SERIES):
            return now
        last = now
    raise AssertionError("Ray's metrics kept moving while nothing ran")


def l1_settled(files: LocalFileStore, users: list[str], pending_too: bool, timeout: float = 180) -> None:
    """No L1 pass running for these users; with ``pending_too``, no turn left to extract either (a session end
    extracts them all; otherwise turns short of the next trigger wait for the idle timeout)."""
    from mnemoflow.memory.l1.state import load_triggers

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = [load_triggers(files, TENANT, u) for u in users]
        if all(not s.running and not (pending_too and s.pending) for s in states):
            return
        time.sleep(0.5)
    raise AssertionError(f"L1 did not settle: {states}")


FACTS = [
    "I love hiking in the mountains",
    "My favourite drink is green tea",
    "I work as a data engineer",
    "My sister lives in Porto",
    "I am allergic to peanuts",
    "I play the cello on Sundays",
]


def test_each_plane_counts_what_a_replay_did(stack: Stack, api: httpx.Client) -> None:
    """Scrape the worker, the API and Ray's metrics agent around a small known replay: the counters move by what it
    did (N turns applied, then N skipped when replayed; M tool results; one compaction; the L1 passes and atoms)."""
    from actors import ShardClient
    from mnemoflow.memory.l1.records import RecordLog

    files = LocalFileStore(stack.settings.data_dir)
    urls = dict(stack.metrics_urls())
    assert set(urls) >= {"api", "worker"} and urls["worker"].startswith("http://127.0.0.1:"), urls
    [ray_url] = [url for plane, url in urls.items() if plane.startswith("ray node")]
    users = stack.settings.data_dir / TENANT / "users"
    l1_settled(files, sorted(p.name for p in users.iterdir()) if users.is_dir() else [], pending_too=False)
    ray_before = ray_at_rest(ray_url)  # and no pass ran for 12 s: none is queued either
    worker_before, api_before = scrape(urls["worker"]), scrape(urls["api"])

    user, session = "metrics-ana", "metrics-sess"
    turns = [
        {"message_id": f"{user}-m{k}", "user": user, "session": f"{user}-chat", "role": "user", "content": fact}
        for k, fact in enumerate(FACTS * 2)
    ]
    results = [
        {
            "tool_call_id": f"{session}-call_{k}",
            "session": session,
            "tool_name": "execute_bash",
            "arguments": {"command": f"ls {k}"},
            "content": f"file-{k}\n" * 50,
        }
        for k in range(5)
    ]
    assert api.post("/v1/turns", json={"turns": turns}).status_code == 202
    assert api.post("/v1/tool-results", json={"results": results}).status_code == 202
    deadline = time.monotonic() + 120
    while (len(read_l0(files, TENANT, user, limit=100)), len(read_entries(files, TENANT, session))) != (12, 5):
        assert time.monotonic() < deadline, "the replay did not land"
        time.sleep(0.3)
    assert api.post("/v1/turns", json={"turns": turns}).status_code == 202  # replayed: skipped, nothing written
    assert api.post(f"/v1/sessions/{user}-chat/end", json={"user": user}).status_code == 202
    window = {"messages": [{"role": "user", "content": "what is in the folder?"}], "window": 8192}
    assert api.post(f"/v1/sessions/{session}/compact", json=window).status_code == 200

    turns_topic, results_topic = "mnemoflow.turns", "mnemoflow.tool-results"
    deadline = time.monotonic() + 60
    while delta(
        worker := scrape(urls["worker"]), worker_before, "mnemoflow_worker_events_consumed_total", topic=turns_topic
    ) < 2 * len(turns):
        assert time.monotonic() < deadline, "the replayed turns were not consumed"
        time.sleep(0.5)
    l1_settled(files, [user], pending_too=True)
    worker = scrape(urls["worker"])

    def moved(name: str, **labels: str) -> float:
        return delta(worker, worker_before, name, **labels)

    assert moved("mnemoflow_worker_events_consumed_total", topic=turns_topic) == 24
    assert moved("mnemoflow_worker_events_applied_total", topic=turns_topic) == 12
    assert moved("mnemoflow_worker_events_skipped_total", topic=turns_topic) == 12
    assert moved("mnemoflow_worker_events_consumed_total", topic=results_topic) == 5
    assert moved("mnemoflow_worker_events_applied_total", topic=results_topic) == 5
    assert moved("mnemoflow_worker_events_skipped_total", topic=results_topic) == 0
    assert moved("mnemoflow_worker_events_dead_lettered_total") == 0
    assert moved("mnemoflow_worker_batch_seconds_count", topic=turns_topic) >= 2  # the replay is a later fetch
    assert moved("mnemoflow_worker_l1_jobs_published_total") >= 1
    runs_ok = moved("mnemoflow_worker_l1_runs_total", result="ok")
    assert runs_ok >= 1 and moved("mnemoflow_worker_l1_runs_total", result="failed") == 0
    lag = {
        dict(labels)["partition"]
        for (name, labels), _ in worker.items()
        if name == "mnemoflow_worker_consumer_lag" and dict(labels)["topic"] == turns_topic
    }
    assert lag == {str(p) for p in range(stack.settings.turns_partitions)}  # one worker owns every partition

    api_after = scrape(urls["api"])
    assert delta(api_after, api_before, "mnemoflow_events_submitted_total", kind="turn") == 24
    assert delta(api_after, api_before, "mnemoflow_events_submitted_total", kind="tool_result") == 5
    assert delta(api_after, api_before, "mnemoflow_api_latency_seconds_count", route="/v1/turns") == 2

    records = RecordLog(files, TENANT, user).read(live_only=False)
    shard = str(ShardClient(stack.settings).index_for(TENANT, session))
    deadline = time.monotonic() + 90
    while True:  # Ray's agent exports every few seconds
        ray_after = scrape(ray_url)
        written = sum(
            delta(ray_after, ray_before, "ray_mnemoflow_l1_atoms_total", action=a)
            for a in ("stored", "updated", "merged")
        )
        seen = (
            delta(ray_after, ray_before, "ray_mnemoflow_shard_compaction_seconds_count", shard=shard),
            delta(ray_after, ray_before, "ray_mnemoflow_l1_runs_total", result="ok"),
            written,
        )
        if seen == (1, runs_ok, len(records)) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert seen == (1, runs_ok, len(records)), seen  # one compaction; both planes count the same passes and atoms
    assert records, "the heuristic extractor kept no fact"

    def ray_moved(name: str, **labels: str) -> float:
        return delta(ray_after, ray_before, f"ray_{name}", **labels)

    assert ray_moved("mnemoflow_shard_compaction_seconds_count") == 1  # on the session's shard only
    loaded = ray_moved("mnemoflow_shard_sessions_loaded_total", shard=shard)
    assert loaded >= 1 and ray_moved("mnemoflow_shard_sessions_loaded_total") == loaded
    assert ray_moved("mnemoflow_l1_runs_total", result="failed") == 0
    atoms = written + ray_moved("mnemoflow_l1_atoms_total", action="skipped")
    assert ray_moved("mnemoflow_l1_dedup_decisions_total") == atoms  # one decision per atom of a pass
    assert ray_moved("mnemoflow_index_search_seconds_count") >= 1  # dedup looks up candidates
    live = sum(len(RecordLog(files, TENANT, p.name).read()) for p in users.iterdir())
    assert total(ray_after, "ray_mnemoflow_index_rows", tenant=TENANT) == live  # the index holds the live atoms
