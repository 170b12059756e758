"""Proxy benchmark: what the OpenAI-compatible proxy adds to a request's latency, and what it saves in prompt tokens.

The whole stack runs as ``mnemoflow up`` runs it (Apache Kafka, Faust worker, session shards, the Serve API with
the real recaller and the query embedder of ``--embedder``: e5, the default the stack ships, or MiniLM); the
upstream is a stub answering in fixed time (``--upstream-ms``) in its own process, so only our overhead is
measured. One user's memory is seeded with LoCoMo turns and extracted to atoms first, so recall searches a real
index.

* **Added latency**: 20-message requests (the first 20 messages of tau-bench airline runs, ending on a user message:
  23 runs have one, so at most 20 requests per kind after the warm-up's 3), sent directly to the stub and through
  the proxy, alternately, by one client. ``first`` requests open a new session: all 20 messages are captured (Kafka
  acknowledged), recall runs, compaction runs in the session's shard. ``repeat`` sends the same array again (an
  agent's next tool step): nothing new to capture, recall reused unless the user's memory changed since (the other
  requests' captures are being extracted meanwhile), compaction again. Added = proxy percentile minus direct
  percentile. The answer's capture runs after the answer. ``serve_floor_ms``: ``GET /health/live`` through the same
  Serve proxy and replica, which does nothing, timed before each proxied request: the part of the added latency that
  is Serve's hop, not the proxy's work.
* **Prompt tokens**: OpenHands trajectories replayed as agent loops (each assistant step is a request carrying the
  history so far) against a ``--window`` context; direct = what the raw arrays weigh, proxy = what the upstream
  received (its ``usage.prompt_tokens``: the stub counts o200k tokens, the same tokenizer for both). Each step is
  also timed on both paths, one right after the other: ``added_ms_per_step`` is what an agent loop of real
  trajectories waits for the proxy (arrays growing to the window, a new tool result captured at every step).
* **Prefix reuse**: the OpenHands loops above and tau-bench airline runs of three user turns or more replayed the
  same way (multi-turn chats: recall moves to each new user message), with a skills index in the system part (skills
  distilled first from 20 OpenHands runs that are not replayed). The stub sends back the messages it received; for
  every request after its session's first, the tokens of its leading messages equal to the session's previous
  prompt (:mod:`bench.prefix`), over its tokens, directly and through the proxy, and which message broke the
  proxied prefix.
* **Stages**, per kind of request (first, same array again, agent step, chat step), p50 / p99: where the time goes,
  each stage measured where it runs. The proxy's ``Server-Timing`` header gives the request's own stages (capture
  planning, recall with its query embedding, search and persona read, compaction as the API waited for it and inside
  the shard, the upstream, the route's total); the captures that run after the answer (the request's new messages,
  then the answer) are read from the ``mnemoflow_proxy_stage_seconds`` histogram of ``/metrics``, whose sum steps by
  exactly one capture's time when it counts one (the benchmark waits for each request's captures before the next
  request, as an agent waiting on a real model would). Derived rows say so: Serve's hop is the client's end to end
  less the route's total, the shard call's hop is compaction as waited for less its time in the shard.

Writes ``bench/results/proxy.json`` (``proxy-quick.json`` with ``--quick``; ``proxy-serve.json`` with ``--door
serve``: the requests go through Serve's HTTP proxy instead of the stack's default door, the API replica's own
listener, ``api_door``). Usage: ``python bench/proxy.py [--quick] [--door direct|serve]``;
``--smoke --out PATH``: 20 turns seeded, 2 skills, 2 requests per kind, 4 steps of one run of each set (the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.evalsets import EVAL, trajectories, twenty_message_requests  # noqa: E402
from bench.prefix import shared_prefix  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from bench.skills import replay  # noqa: E402
from bench.stages import StageTimes, parse_server_timing, pct  # noqa: E402
from mnemoflow.cli.stack import Stack  # noqa: E402
from mnemoflow.client import Client  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.offload.messages import is_injected, last_user  # noqa: E402
from mnemoflow.proxy.capture import text_of  # noqa: E402
from mnemoflow.proxy.pipeline import STAGES  # noqa: E402
from mnemoflow.replay import from_locomo  # noqa: E402
from mnemoflow.skills.learn import learn_session  # noqa: E402
from mnemoflow.skills.store import SkillStore  # noqa: E402
from mnemoflow.storage import LocalFileStore  # noqa: E402
from streams.broker import free_port, stop_process  # noqa: E402

KEY, USER, TENANT = "bench-key", "bench-user", "bench"
MEMORIES_END = "</relevant-memories>"
"""How recall's block ends (:func:`mnemoflow.memory.recall.format.prepend_context`): the user's own text follows."""


def start_stub(delay_ms: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    code = (
        "import uvicorn; from tests.stub_upstream import stub_upstream; "
        f"uvicorn.run(stub_upstream(delay_s={delay_ms / 1000!r}), host='127.0.0.1', port={port}, "
        "log_level='warning')"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError("the stub upstream did not start")


WHAT = {
    "end_to_end": "the request through the proxy, as the agent waits for it",
    "serve_hop": "the HTTP hop into the API replica, both ways: the replica's own listener (with --door serve, "
    "Serve's HTTP proxy and its call to the replica)",
    **STAGES,
    "compact_hop": "the Ray actor call to the session's shard, both ways",
    "compact_again_hop": "the same for the second compaction",
}
"""What each stage of the stage table is."""
SERVER_TIMING = "Server-Timing"
HOW = {
    "end_to_end": "client",
    "serve_hop": "derived: end_to_end - total",
    "total": SERVER_TIMING,
    "capture_plan": SERVER_TIMING,
    "memory": SERVER_TIMING,
    "recall": SERVER_TIMING,
    "recall_version": SERVER_TIMING,
    "embed": SERVER_TIMING,
    "search": SERVER_TIMING,
    "context": SERVER_TIMING,
    "compact": SERVER_TIMING,
    "compact_shard": f"{SERVER_TIMING}, from the shard",
    "compact_hop": "derived: compact - compact_shard",
    "compact_again": SERVER_TIMING,
    "compact_again_shard": f"{SERVER_TIMING}, from the shard",
    "compact_again_hop": "derived: compact_again - compact_again_shard",
    "upstream": SERVER_TIMING,
    "capture": "histogram, after the request",
    "capture_answer": "histogram, after the answer",
}
"""The stages the stage table shows, in its order, with where each figure comes from."""
KINDS = {
    "first": "first request",
    "repeat": "same array again",
    "agent_step": "agent step",
    "chat_step": "step of a multi-turn chat",
}
CAPTURES = ("capture", "capture_answer")


class Stages(StageTimes):
    """Every proxied request's stages, by kind. Its own stages come from ``Server-Timing``; the captures that run
    after it are read from ``/metrics``: the histogram's count for a capture steps by one when it is done, and its sum
    by that capture's time, so waiting for the count after each request gives each capture's own time."""

    def __init__(self, http: httpx.Client, api_url: str) -> None:
        super().__init__(dict(HOW))
        self._http, self._url = http, api_url
        self._seen = self._scrape()

    def _scrape(self) -> dict[str, tuple[float, float]]:
        """(count, sum in seconds) of the capture stages in the histogram."""
        text = self._http.get(f"{self._url}/metrics").text
        out = {}
        for stage in CAPTURES:
            count = re.search(rf'mnemoflow_proxy_stage_seconds_count{{stage="{stage}"}} (\S+)', text)
            total = re.search(rf'mnemoflow_proxy_stage_seconds_sum{{stage="{stage}"}} (\S+)', text)
            out[stage] = (float(count.group(1)), float(total.group(1))) if count and total else (0.0, 0.0)
        return out

    def note(self, kind: str, response: httpx.Response, end_to_end_ms: float) -> None:
        """The request's stages, then its captures' once the histogram counted them (a minute at most)."""
        self.request(kind)
        timing = parse_server_timing(response.headers["server-timing"])
        self.add_all(kind, timing)
        self.add(kind, "end_to_end", end_to_end_ms)
        self.add(kind, "serve_hop", end_to_end_ms - timing["total"])
        for stage in ("compact", "compact_again"):
            if stage in timing and f"{stage}_shard" in timing:
                self.add(kind, f"{stage}_hop", timing[stage] - timing[f"{stage}_shard"])
        captured = response.headers["x-mnemoflow-captured"]
        new = not captured.startswith("turns=0; tool_results=0;")
        expected = {"capture": self._seen["capture"][0] + new, "capture_answer": self._seen["capture_answer"][0] + 1}
        deadline = time.monotonic() + 60
        while True:
            now = self._scrape()
            if all(now[stage][0] >= n for stage, n in expected.items()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the proxy's captures were not counted within a minute: {now} for {expected}")
            time.sleep(0.005)
        for stage in CAPTURES:
            if now[stage][0] > self._seen[stage][0]:
                self.add(kind, stage, (now[stage][1] - self._seen[stage][1]) * 1000)
        self._seen = now


def _own_text(message: dict[str, Any]) -> str:
    """A message's text without the recall block the proxy put at its head."""
    return text_of(message.get("content")).split(f"{MEMORIES_END}\n\n", 1)[-1]


def _cause(before: dict[str, Any], after: list[dict[str, Any]]) -> str:
    """What changed the first message of the previous prompt that the next one does not repeat: a canvas moved,
    updated or put in (whatever it displaced); the same user message with another recall block; else the message
    is gone or rewritten, which only compaction does (a reclaim stub, a dropped head)."""
    if is_injected(before) or (after and is_injected(after[0])):
        return "canvas"
    if after and before["role"] == after[0]["role"] == "user" and _own_text(before) == _own_text(after[0]):
        return "recall block"
    return f"{before['role']} message compacted"


class PrefixReuse:
    """Prefix reuse (:mod:`bench.prefix`) per path (``direct``, ``proxy``) and kind of session: of every request
    after its session's first, the tokens of the leading messages equal to the session's previous prompt, over its
    tokens; and, where a request did not begin with the whole previous prompt, the role of the message it changed."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.reused: Counter[tuple[str, str]] = Counter()
        self.total: Counter[tuple[str, str]] = Counter()
        self.requests: Counter[tuple[str, str]] = Counter()
        self.breaks: dict[tuple[str, str], Counter[str]] = {}

    def add(self, path: str, kind: str, session: str, messages: list[dict[str, Any]]) -> None:
        previous = self._last.get((path, session))
        self._last[(path, session)] = messages
        if previous is None:
            return
        key = (path, kind)
        same, tokens, broke = shared_prefix(previous, messages)
        self.reused[key] += same
        self.total[key] += tokens
        self.requests[key] += 1
        if broke is not None:
            self.breaks.setdefault(key, Counter())[_cause(previous[broke], messages[broke : broke + 1])] += 1

    def share(self, path: str, kind: str) -> float:
        return self.reused[(path, kind)] / max(1, self.total[(path, kind)])

    def result(self, kinds: list[str]) -> dict[str, Any]:
        return {
            kind: {
                path: {
                    "reuse": round(self.share(path, kind), 4),
                    "reused_tokens": self.reused[(path, kind)],
                    "prompt_tokens": self.total[(path, kind)],
                    "uncached_tokens": self.total[(path, kind)] - self.reused[(path, kind)],
                    "requests": self.requests[(path, kind)],
                    "breaks": dict(self.breaks.get((path, kind), {})),
                }
                for path in ("direct", "proxy")
            }
            | {"points_lost": round(100 * (self.share("direct", kind) - self.share("proxy", kind)), 2)}
            for kind in kinds
        }


def seed_skills(data: Path, runs: list[list[dict[str, Any]]]) -> int:
    """Skills distilled from OpenHands runs the benchmark does not replay, in the tenant's shared set, as the skill
    pass writes them: the system part of every proxied prompt then carries a skills index. Returns how many."""
    files = LocalFileStore(data)
    for k, messages in enumerate(runs):
        asyncio.run(replay(files, f"seed-{k}", messages))
        learn_session(files, TENANT, f"seed-{k}", datetime.now(UTC))
    return len(SkillStore(files, TENANT).names())


def seed_memory(api: Client, turns: int) -> int:
    """One LoCoMo speaker's turns for one user, the session ended so that L1 extracts now; returns hits found."""
    sample = json.loads((EVAL / "locomo" / "locomo-dev.json").read_text())[0]
    items = from_locomo(sample).items
    mine = [t.model_copy(update={"user": USER}) for t in items if t.role == "user"][:turns]
    api.submit(mine)
    api.end_session(mine[-1].session, USER)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if hits := api.memory_search(USER, "what does she like to do", limit=5):
            return len(hits)
        time.sleep(1)
    return 0


def note_slowest(response: httpx.Response, slowest: dict[str, Any], **where: Any) -> None:
    """Keep in ``slowest`` the request whose memory side took longest, with its stages: what a p99 is made of."""
    ms = float(response.headers["x-mnemoflow-memory-ms"])
    if ms > slowest.get("memory_side_ms", -1.0):
        slowest.clear()
        slowest.update(memory_side_ms=ms, stages=response.headers.get("x-mnemoflow-stages-ms", ""), **where)


def latency(
    api_url: str, stub: str, requests: list[list[dict]], stages: Stages, sessions: str = "bench"
) -> dict[str, Any]:
    """``sessions`` names the sessions: the warm-up's must not be the measured ones, or a measured "first" request
    would be the second of its session. Each request's stages go to ``stages`` (kind ``first`` or ``repeat``, with
    ``sessions`` before it when not ``bench``)."""
    headers = {"Authorization": f"Bearer {KEY}", "X-Mnemoflow-User": USER}
    direct: list[float] = []
    proxied: dict[str, list[float]] = {"first": [], "repeat": []}
    floor: list[float] = []
    memory_ms: dict[str, list[float]] = {"first": [], "repeat": []}
    slowest: dict[str, dict[str, Any]] = {"first": {}, "repeat": {}}
    with httpx.Client(timeout=60) as http:
        for k, messages in enumerate(requests):
            body = {"model": "stub", "messages": messages, "max_tokens": 64}
            for mode in ("first", "repeat"):
                start = time.perf_counter()
                assert http.post(f"{stub}/v1/chat/completions", json=body).status_code == 200
                direct.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                assert http.get(f"{api_url}/health/live").status_code == 200
                floor.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                r = http.post(
                    f"{api_url}/v1/chat/completions",
                    json=body,
                    headers={**headers, "X-Mnemoflow-Session": f"{sessions}-{k}"},
                )
                proxied[mode].append((time.perf_counter() - start) * 1000)
                assert r.status_code == 200 and r.headers["x-mnemoflow-memory"] == "ok", r.headers
                memory_ms[mode].append(float(r.headers["x-mnemoflow-memory-ms"]))
                stages.note(mode if sessions == "bench" else f"{sessions}-{mode}", r, proxied[mode][-1])
                note_slowest(r, slowest[mode], request=k)
    out: dict[str, Any] = {
        "direct_ms": {"p50": pct(direct, 0.5), "p99": pct(direct, 0.99)},
        "serve_floor_ms": {"p50": pct(floor, 0.5), "p99": pct(floor, 0.99)},
    }
    for mode, values in proxied.items():
        out[mode] = {
            "proxy_ms": {"p50": pct(values, 0.5), "p99": pct(values, 0.99)},
            "added_ms": {"p50": pct(values, 0.5) - pct(direct, 0.5), "p99": pct(values, 0.99) - pct(direct, 0.99)},
            "memory_side_ms": {"p50": pct(memory_ms[mode], 0.5), "p99": pct(memory_ms[mode], 0.99)},
            "stages_ms": stages.summary(mode),
            "slowest": slowest[mode],
        }
    return out


def agent_loops(
    api_url: str,
    stub: str,
    trajs: list[list[dict[str, Any]]],
    kind: str,
    window: int,
    stages: Stages,
    reuse: PrefixReuse,
    steps: int | None = None,
) -> dict[str, Any]:
    """Each trajectory replayed as an agent loop, one session each: every assistant step is a request carrying the
    history so far, sent directly to the stub, then through the proxy. ``steps``: at most this many steps of each
    (None: all). Each step's stages go to ``stages`` and both prompts to ``reuse``, as ``kind``."""
    direct = proxied = requests = 0
    peak = 0
    added: list[float] = []  # per step: through the proxy minus directly, the same body one after the other
    memory_ms: list[float] = []
    slowest: dict[str, Any] = {}
    with httpx.Client(timeout=120) as http:
        for k, traj in enumerate(trajs):
            session = f"{kind}-{k}"
            headers = {
                "Authorization": f"Bearer {KEY}",
                "X-Mnemoflow-User": USER,
                "X-Mnemoflow-Session": session,
                "X-Mnemoflow-Window": str(window),
            }
            asked = [i for i, m in enumerate(traj) if m["role"] == "assistant"][:steps]
            for i in asked:
                body = {"model": "stub", "messages": traj[:i], "max_tokens": 512, "stub_echo": True}
                start = time.perf_counter()
                answer = http.post(f"{stub}/v1/chat/completions", json=body).json()
                middle = time.perf_counter()
                r = http.post(f"{api_url}/v1/chat/completions", json=body, headers=headers)
                proxied_ms = (time.perf_counter() - middle) * 1000
                added.append(proxied_ms - (middle - start) * 1000)
                assert r.status_code == 200 and r.headers["x-mnemoflow-memory"] == "ok", r.headers
                memory_ms.append(float(r.headers["x-mnemoflow-memory-ms"]))
                stages.note(kind, r, proxied_ms)
                u = last_user(traj[:i])
                query_chars = len(str(traj[u]["content"])) if u is not None else 0
                note_slowest(r, slowest, trajectory=k, step=i, query_chars=query_chars)
                reuse.add("direct", kind, session, answer["stub_messages"])
                reuse.add("proxy", kind, session, r.json()["stub_messages"])
                raw, sent = answer["usage"]["prompt_tokens"], r.json()["usage"]["prompt_tokens"]
                direct, proxied, requests, peak = direct + raw, proxied + sent, requests + 1, max(peak, sent)
    return {
        "trajectories": len(trajs),
        "requests": requests,
        "window": window,
        "direct": direct,
        "proxy": proxied,
        "saved": 1 - proxied / direct,
        "peak_proxy_prompt": peak,
        "added_ms_per_step": {"p50": pct(added, 0.5), "p99": pct(added, 0.99)},
        "memory_side_ms_per_step": {"p50": pct(memory_ms, 0.5), "p99": pct(memory_ms, 0.99)},
        "stages_ms": stages.summary(kind),
        "slowest_step": slowest,
    }


def multi_turn_chats(n: int) -> list[list[dict[str, Any]]]:
    """tau-bench airline runs with three user turns or more: sessions whose recall moves to a new user message."""
    runs = trajectories("tau_bench_airline")
    return [t for t in runs if sum(m["role"] == "user" for m in t) >= 3][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 latency requests per kind, 3 trajectories")
    parser.add_argument("--upstream-ms", type=float, default=50.0, help="the stub's fixed answer time")
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--embedder", choices=("e5", "minilm"), default="e5", help="the recaller's query embedder")
    parser.add_argument("--smoke", action="store_true", help="20 turns seeded, 2 requests, 4 agent steps (the tests)")
    parser.add_argument(
        "--door",
        choices=("direct", "serve"),
        default="direct",
        help="the stack's door (api_door): the API replica's own listener (the default) or Serve's HTTP proxy",
    )
    parser.add_argument("--out", help="default bench/results/proxy.json (proxy-quick.json with --quick)")
    args = parser.parse_args()
    n_requests, n_trajs = (2, 1) if args.smoke else (20, 3) if args.quick else (60, 10)
    stub_proc, stub = start_stub(args.upstream_ms)
    data = Path(tempfile.mkdtemp(prefix="mnemoflow-bench-proxy-"))
    openhands = trajectories("openhands_swebench_verified")
    seeded_skills = seed_skills(data, openhands[-(2 if args.smoke else 20) :])
    settings = Settings(
        data_dir=data,
        api_port=0,
        api_keys={"bench": KEY},
        max_body_bytes=16 << 20,
        proxy_upstream_url=stub,
        proxy_windows={"stub": 8192},
        proxy_memory_timeout_seconds=30,
        rate_limit_per_second=10_000,
        rate_limit_burst=10_000,
        embedder=args.embedder,
        api_door=args.door,
    )
    run = Run("proxy", f"Proxy: added latency over a {args.upstream_ms:.0f} ms upstream, and prompt tokens saved")
    stack = Stack(settings)
    try:
        stack.start()
        api_url = stack.info.api_url
        with Client(api_url, KEY) as api:
            atoms = seed_memory(api, 20 if args.smoke else 200)
        with httpx.Client(timeout=60) as scraper:
            stages = Stages(scraper, api_url)
            warm = twenty_message_requests(3)
            # the recaller loads its model on first use: not part of the measure
            latency(api_url, stub, warm, stages, "warm")
            measured = twenty_message_requests(n_requests + 3)[3:]  # fewer when the set has fewer
            lat = latency(api_url, stub, measured, stages)
            steps = 4 if args.smoke else None
            reuse = PrefixReuse()
            tokens = agent_loops(api_url, stub, openhands[:n_trajs], "agent_step", args.window, stages, reuse, steps)
            chats = agent_loops(
                api_url, stub, multi_turn_chats(n_trajs), "chat_step", args.window, stages, reuse, steps
            )
    finally:
        stack.stop()
        stop_process(stub_proc, 10)
        shutil.rmtree(data, ignore_errors=True)  # the stack's files and logs: nothing of it is reported
    result = {
        "added_latency_ms": {
            "p50": round(lat["first"]["added_ms"]["p50"], 2),
            "p99": round(lat["first"]["added_ms"]["p99"], 2),
        },
        "prompt_tokens": {"direct": tokens["direct"], "proxy": tokens["proxy"]},
        "latency": lat,
        "tokens": tokens,
        "chats": chats,
        "prefix_reuse": reuse.result(["agent_step", "chat_step"]),
        "seeded_skills": seeded_skills,
        "upstream_ms": args.upstream_ms,
        "requests_per_mode": len(measured),
        "messages_per_request": 20,
        "seeded_atoms_found": atoms,
        "quick": args.quick,
        "smoke": args.smoke,
        "embedder": args.embedder,
        "door": "direct" if args.door == "direct" else "serve proxy",
        "stages": {**stages.result(KINDS), "what": {k: v for k, v in WHAT.items() if k in HOW}},
    }
    first, repeat = lat["first"], lat["repeat"]

    def row(name: str, added: dict[str, float], memory: dict[str, float]) -> list[str]:
        cells = [f"{added['p50']:.1f}", f"{added['p99']:.1f}", f"{memory['p50']:.1f}", f"{memory['p99']:.1f}"]
        return [name, *cells]

    rows = [
        row("first request of a session", first["added_ms"], first["memory_side_ms"]),
        row("same array again", repeat["added_ms"], repeat["memory_side_ms"]),
        row(
            f"step of an agent run ({n_trajs} OpenHands runs)",
            tokens["added_ms_per_step"],
            tokens["memory_side_ms_per_step"],
        ),
        row(
            f"step of a multi-turn chat ({chats['trajectories']} tau-bench runs)",
            chats["added_ms_per_step"],
            chats["memory_side_ms_per_step"],
        ),
    ]
    columns = ["request", "added p50 ms", "added p99 ms", "memory side p50 ms", "memory side p99 ms"]
    saved = [
        ["direct", f"{tokens['direct']:,}"],
        ["through the proxy", f"{tokens['proxy']:,} ({tokens['saved']:.1%} saved)"],
    ]
    notes = [
        f"direct to the stub: p50 {lat['direct_ms']['p50']:.1f} ms, p99 {lat['direct_ms']['p99']:.1f} ms; Serve's floor"
        f" (GET /health/live) p50 {lat['serve_floor_ms']['p50']:.1f} ms; query embedder {args.embedder};"
        f" door: {'the replica directly' if args.door == 'direct' else 'Serve proxy'}",
        f"slowest: first request {first['slowest']}; agent step {tokens['slowest_step']}",
    ]
    if len(measured) < n_requests:
        notes.append(
            f"{len(measured)} requests per kind, not the {n_requests} asked for: the tau-bench airline set has "
            f"{len(measured) + 3} runs whose 20th message is the user's, 3 of them the warm-up's"
        )
    tables = [
        Table(title=f"Latency the proxy adds, {len(measured)} requests per kind", columns=columns, rows=rows),
        stages.table(
            f"Where the time goes, by stage ({len(measured)} requests per kind, {tokens['requests']} steps)", KINDS
        ),
        Table(
            title=f"Prompt tokens over {tokens['requests']} steps at a {args.window:,}-token window",
            columns=["path", "prompt tokens"],
            rows=saved,
        ),
        Table(
            title=f"Prefix reuse across a session's requests ({seeded_skills} skills in the index)",
            columns=[
                "sessions",
                "requests",
                "direct",
                "through the proxy",
                "points lost",
                "tokens not served from cache: direct / proxy",
                "where the proxy's prefix broke",
            ],
            rows=[
                [
                    KINDS[kind],
                    str(figures["proxy"]["requests"]),
                    f"{figures['direct']['reuse']:.1%}",
                    f"{figures['proxy']['reuse']:.1%}",
                    f"{figures['points_lost']:.1f}",
                    f"{figures['direct']['uncached_tokens']:,} / {figures['proxy']['uncached_tokens']:,}",
                    ", ".join(f"{where} {n}" for where, n in figures["proxy"]["breaks"].items()) or "nowhere",
                ]
                for kind, figures in result["prefix_reuse"].items()
            ],
        ),
    ]
    notes.append(
        "stages: each is timed where it runs (the proxy's Server-Timing header, its mnemoflow_proxy_stage_seconds "
        "histogram for the captures after the request); they overlap or nest (recall and compaction run at once, "
        "embed and search are inside recall), so they do not add up; a derived row is a subtraction of two of them. "
        + "; ".join(f"{stage}: {WHAT[stage]}" for stage in result["stages"]["how"])
    )
    name = "proxy" if args.door == "direct" else "proxy-serve"
    run.finish(tables, result, result_path(name, args.out, smoke=args.smoke, quick=args.quick), notes=notes)


if __name__ == "__main__":
    main()
