"""Scale-out on one host, out of real parts (tests/cluster.py): three Faust workers in one group, a two-node Ray
cluster, two replicas of the api and extractor deployments, Milvus Lite as a network server. Every check reads the
files line by line against what was sent."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.chaos_checks import Acked, check_events, line_counts, tally, wait_l1, wait_quiet
from mnemoflow.events import ToolResultIn, TurnIn
from tests.cluster import TENANT, ClusterShape, LocalCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    shape = ClusterShape(settings={"max_body_bytes": 8 << 20})
    with LocalCluster(tmp_path_factory.mktemp("cluster"), shape) as c:
        yield c


def sentence(rng: random.Random, i: int) -> str:
    """Distinct text per event, English and Chinese mixed, so a swapped or torn line cannot pass for another."""
    words = ["deploy", "latency", "cache", "徒步", "北京", "女儿", "review", "budget", "天气", "meeting"]
    return f"#{i} " + " ".join(rng.choice(words) for _ in range(12)) + f" {rng.getrandbits(64):x}"


def post_in_order(api: httpx.Client, path: str, field: str, batches: list[list[Any]], acked: dict, t0: float) -> None:
    """Post each batch until Kafka acknowledged it (a retry is harmless: every sink is idempotent by id)."""
    for batch in batches:
        body = {field: [item.model_dump(mode="json", exclude_none=True) for item in batch]}
        deadline = time.monotonic() + 120
        while True:
            try:
                response = api.post(path, json=body)
                if response.status_code == 202:
                    break
                assert response.status_code >= 500 or response.status_code == 429, response.text[:300]
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"{path} not accepted for 120 s"
            time.sleep(0.5)
        for item in batch:
            acked[Acked.key_of(item)] = Acked(item, time.monotonic() - t0, len(acked))


def test_three_workers_share_the_topics_and_lose_nothing_when_one_is_killed(cluster: LocalCluster) -> None:
    rng = random.Random(9)
    users, sessions = [f"w-user-{i}" for i in range(24)], [f"w-tool-{i}" for i in range(12)]
    turns = [
        TurnIn(
            message_id=f"m{i}",
            user=users[i % 24],
            session=f"chat-{i % 24}",
            role="user" if i % 3 else "assistant",
            content=sentence(rng, i),
        )
        for i in range(2400)
    ]
    results = [
        ToolResultIn(
            tool_call_id=f"c{i}",
            session=sessions[i % 12],
            tool_name="bash",
            arguments='{"cmd": "ls"}',
            content=sentence(rng, i) * 20,
        )
        for i in range(600)
    ]
    acked: dict = {}
    base = line_counts(cluster.data_dir)
    t0 = time.monotonic()
    with httpx.Client(base_url=cluster.api_url, headers=cluster.headers(), timeout=60) as api:
        sender = threading.Thread(
            target=lambda: post_in_order(
                api, "/v1/turns", "turns", [turns[i : i + 50] for i in range(0, 2400, 50)], acked, t0
            )
        )
        sender.start()
        post_in_order(api, "/v1/tool-results", "results", [results[i : i + 20] for i in range(0, 300, 20)], acked, t0)
        victim = cluster.workers[0].pid
        cluster.kill_worker(0)  # mid-stream: its partitions move to the other two
        post_in_order(api, "/v1/tool-results", "results", [results[i : i + 20] for i in range(300, 600, 20)], acked, t0)
        sender.join()
    assert not _alive(victim)
    data = cluster.data_dir
    wait_quiet(data, (base[0] + len(turns), base[1] + len(results)), quiet_s=5, give_up_s=90, timeout=300)
    out = check_events(data, acked)
    keys = list(acked)
    assert len(keys) == len(turns) + len(results)
    assert tally(keys, out) == {"acked": len(keys), "lost": 0, "duplicated": 0, "mismatched": 0}
    assert out.details["streams_out_of_order"] == [] and out.details["offload_seq_gaps"] == []
    assert out.details["torn_lines"] == 0 and out.details["applied_not_acked"] == 0
    assert all(cluster.workers[index].poll() is None for index in (1, 2))  # the survivors took over, alive
    cluster.start_worker(0)  # back to three for the next tests


def test_shards_spread_over_both_nodes_and_come_back_when_a_node_dies(cluster: LocalCluster) -> None:
    from actors.placement import shard_name
    from mnemoflow.sharding import session_key, shard_for
    from tests.integration.test_offload_stack import TRAJS, WINDOW, trajectory, wait_entries

    if not TRAJS.exists():
        pytest.skip(f"trajectories not found under {TRAJS}")
    placement = cluster.shard_nodes()
    second = cluster.second_node_id
    assert set(placement.values()) == cluster.alive_nodes() and second in placement.values()
    n = cluster.settings.session_shards
    session = next(
        s
        for s in (f"swe-node-{k}" for k in range(1000))
        if placement[shard_name(shard_for(session_key(TENANT, s), n))] == second
    )
    messages = trajectory("django__django-11095", "n-") + trajectory("astropy__astropy-12907", "m-")[1:]
    calls = {c["id"]: c["function"] for m in messages for c in m.get("tool_calls") or []}
    raw = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    steps = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    kill_at = steps[len(steps) // 2]
    removed: dict[str, dict] = {}
    before: dict[str, Any] = {}
    with httpx.Client(base_url=cluster.api_url, headers=cluster.headers(), timeout=120) as api:
        submitted = 0
        for i in steps:
            prefix = messages[:i]
            fresh = [m for m in prefix if m["role"] == "tool"][submitted:]
            if fresh:
                body = {
                    "results": [
                        {
                            "tool_call_id": m["tool_call_id"],
                            "session": session,
                            "tool_name": calls[m["tool_call_id"]]["name"],
                            "arguments": calls[m["tool_call_id"]]["arguments"],
                            "content": m["content"],
                        }
                        for m in fresh
                    ]
                }
                _retry(lambda body=body: api.post("/v1/tool-results", json=body), 202)
                submitted += len(fresh)
                wait_entries(api, session, submitted, timeout=120)
            if i == kill_at:
                before = {
                    "state": api.get(f"/v1/sessions/{session}/state").json(),
                    "canvases": api.get(f"/v1/sessions/{session}/canvases").json(),
                }
                cluster.kill_second_raylet()
                cluster.wait_node_dead(second)
            response = _retry(
                lambda p=prefix: api.post(f"/v1/sessions/{session}/compact", json={"messages": p, "window": WINDOW}),
                200,
            )
            removed.update({r["tool_call_id"]: r for r in response.json()["removed"]})

        after = cluster.shard_nodes()
        assert (
            set(after) == set(placement)
            and set(after.values()) == cluster.alive_nodes()
            and second not in after.values()
        )
        state = api.get(f"/v1/sessions/{session}/state").json()
        canvases = api.get(f"/v1/sessions/{session}/canvases").json()
        assert (
            before["state"]["boundaries"]
            and state["boundaries"][: len(before["state"]["boundaries"])] == before["state"]["boundaries"]
        )
        assert canvases[: len(before["canvases"])] == before["canvases"] and len(set(canvases)) == len(canvases)
        assert state["count"] == len(raw) and state["last_seq"] == len(raw) - 1  # reloaded from the offload log
        assert removed
        for call_id, text in raw.items():  # every offloaded output, not only the reclaimed ones
            assert api.get(f"/v1/sessions/{session}/refs/{call_id}").content == text.encode()


def test_an_api_and_an_extractor_replica_killed_under_load(cluster: LocalCluster) -> None:
    """Requests keep being served (the client retries; the API is idempotent), and no L1 job is lost: afterwards
    every user turn is behind the extraction cursor and nothing is pending."""
    # The extraction the earlier tests started (2,400 turns of 24 users) settles first: under load it takes
    # minutes, and passes queued behind it at the extractor would count against this test's own wait.
    users_dir = cluster.data_dir / TENANT / "users"
    earlier = sorted(p.name for p in users_dir.iterdir()) if users_dir.exists() else []
    snap, _, settled = wait_l1(cluster.data_dir, earlier, timeout=900)
    assert settled, {k: v for k, v in snap.items() if k != "ids"}
    rng = random.Random(11)
    users = [f"r-user-{i}" for i in range(8)]
    turns = [
        TurnIn(
            message_id=f"r{i}",
            user=users[i % 8],
            session=f"rs-{i % 8}",
            role="user" if i % 2 else "assistant",
            content=f"I moved to Lisbon in {2000 + i % 20} and I like {sentence(rng, i)}",
        )
        for i in range(800)
    ]
    api_pids, extractor_pids = cluster.replica_pids("api"), cluster.replica_pids("extractor")
    assert len(api_pids) == 2 and len(extractor_pids) == 2
    own = os.getpriority(os.PRIO_PROCESS, 0)  # Ray's processes inherit this one's niceness
    nice = min(19, own + cluster.settings.extractor_nice)  # L1 passes yield the CPU to the request path
    assert [_niceness(p) for p in extractor_pids + api_pids] == [{nice}, {nice}, {own}, {own}]
    acked: dict = {}
    base = line_counts(cluster.data_dir)
    t0 = time.monotonic()
    with httpx.Client(base_url=cluster.api_url, headers=cluster.headers(), timeout=60) as api:
        post_in_order(api, "/v1/turns", "turns", [turns[i : i + 20] for i in range(0, 400, 20)], acked, t0)
        os.kill(api_pids[0], 9)
        os.kill(extractor_pids[0], 9)
        post_in_order(api, "/v1/turns", "turns", [turns[i : i + 20] for i in range(400, 800, 20)], acked, t0)
        for u in users:  # reads are served too, by the surviving replica and then by the replacement
            _retry(lambda u=u: api.post("/v1/recall", json={"user": u, "query": "where did I move"}), 200)
        for user in users:
            _retry(lambda u=user: api.post(f"/v1/sessions/rs-{u[-1]}/end", json={"user": u}), 202)
    data = cluster.data_dir
    wait_quiet(data, (base[0] + len(turns), base[1]), quiet_s=3, give_up_s=60, timeout=240)
    out = check_events(data, acked)
    assert tally(list(acked), out) == {"acked": 800, "lost": 0, "duplicated": 0, "mismatched": 0}
    snap, _, settled = wait_l1(data, users, timeout=240)
    assert settled, {k: v for k, v in snap.items() if k != "ids"}
    assert snap["atoms"] > 0 and snap["orphan_atoms"] == 0
    assert len(cluster.replica_pids("api")) == 2 and len(cluster.replica_pids("extractor")) == 2  # Serve replaced them


def _niceness(pid: int) -> set[int]:
    """The niceness of every thread of a process (Linux keeps one per thread)."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getpriority(os.PRIO_PROCESS, int(tid)))
    return found


def test_long_term_memory_runs_on_milvus_in_the_full_stack(cluster: LocalCluster) -> None:
    """Extraction, dedup, recall, scenes and persona with Milvus as the atom index."""
    user = "milvus-user"
    said = [
        "My daughter Mia studies medicine in Boston.",
        "I always want answers in bullet points.",
        "Last weekend I went hiking in the Alps with my brother.",
        "My daughter Mia studies medicine in Boston.",
        "I work as a backend engineer at a logistics company.",
    ]
    turns = [
        TurnIn(message_id=f"lt{i}", user=user, session="lt", role="user", content=text) for i, text in enumerate(said)
    ]
    with httpx.Client(base_url=cluster.api_url, headers=cluster.headers(), timeout=60) as api:
        acked: dict = {}
        post_in_order(api, "/v1/turns", "turns", [turns], acked, time.monotonic())
        deadline = time.monotonic() + 120  # in L0 first: an empty L0 would look settled to wait_l1
        while sum(check_events(cluster.data_dir, acked).occurrences[k] for k in acked) < len(turns):
            assert time.monotonic() < deadline, "the turns never reached L0"
            time.sleep(0.5)
        _retry(lambda: api.post("/v1/sessions/lt/end", json={"user": user}), 202)
        snap, _, settled = wait_l1(cluster.data_dir, [user], timeout=180)
        assert settled and snap["live"] >= 3
        assert snap["live"] < len(said)  # the repeated sentence was deduplicated against Milvus, not stored twice
        hits = _retry(lambda: api.post("/v1/recall", json={"user": user, "query": "What does Mia study?"}), 200)
        assert "medicine" in hits.json()["prepend_context"]
        index = _atom_index_check(api)
        assert index["ok"], index  # a probe has 1.5 s: on a busy machine Milvus may miss one, not several
        assert cluster.milvus is not None and cluster.milvus.pid is not None
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            persona, scenes = api.get(f"/v1/users/{user}/persona"), api.get(f"/v1/users/{user}/scenes")
            if persona.status_code == 200 and scenes.status_code == 200 and scenes.json():
                break
            time.sleep(2)
        assert scenes.status_code == 200 and scenes.json(), "no scene was written"
        assert persona.status_code == 200, persona.text[:300]


def _atom_index_check(api: httpx.Client, timeout: float = 60) -> dict[str, Any]:
    """The health report's ``atom_index`` check, probed again until it passes or ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    while True:
        index: dict[str, Any] = next(c for c in api.get("/health").json()["checks"] if c["name"] == "atom_index")
        if index["ok"] or time.monotonic() > deadline:
            return index
        time.sleep(1.0)


def _retry(call: Any, want: int, timeout: float = 180) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = call()
            if last.status_code == want:
                return last
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1.0)
    raise AssertionError(f"no {want} within {timeout:.0f} s: {getattr(last, 'text', last)!s:.300}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
