"""Chaos benchmark: faults injected into a running ``mnemoflow up`` while real conversations and agent
trajectories flow through the API; afterwards every acknowledged event is checked line by line.

    python bench/chaos.py [--quick] [--keep] [--faults worker_sigkill,broker_sigkill,...]

What it does:

1. Starts ``.venv/bin/mnemoflow up --data-dir <tmp>/data --port <free>`` in its own process group, exactly as a
   user runs it (with a 10 s worker session timeout and quicker L1/L2 timings), and finds its parts by walking
   its process tree (:mod:`bench.chaos_stack`).
2. Four client threads (agents) replay LoCoMo conversations and OpenHands / tau-bench trajectories (turns and
   tool results, each source in order) through ``/v1/turns`` and ``/v1/tool-results`` at a steady rate,
   retrying a batch on connection errors, 5xx and 429 as a real client would (the API is idempotent by id). An
   event counts as acknowledged only after a 202. Another thread compacts each finished trajectory's session,
   so the shards write Mermaid canvases while the faults happen.
3. Faults, one at a time while events flow: SIGKILL of the worker (three times), of the broker, of a session
   shard and of the extractor replica, and SIGSTOP of the worker past its session timeout, then SIGCONT.
   Recovery time runs from the fault to the first probe submitted after it being applied: a turn in L0
   (worker, broker), a tool result known to every session shard (shard), a finished L1 pass (extractor).
   A fault not recovered within its time box is reported as such, and the faults after it are skipped.
4. After quiescence (:mod:`bench.chaos_checks`): each acknowledged turn must be in L0 exactly once with its
   content, each acknowledged tool result exactly once in ``offload.jsonl`` with a byte-exact ref, each session
   in the order it was sent. Lost and duplicated are counted overall and per fault kind, for the events
   acknowledged from 2 s before the fault to 2 s after its recovery. L1 must be consistent: a second pass (every
   turn re-sent, every user's session ended) adds no atom. Every canvas must parse in the official Mermaid
   parser, and every shard must agree with its sessions' logs. Then SIGTERM to ``up``, which must stop
   everything it started.

Prints the tables and writes ``bench/results/chaos.json`` (``chaos-quick.json`` with ``--quick``), with
``targets``: each of the above as yes or no.
``--quick`` (a LoCoMo conversation, a few trajectories) takes under 5 minutes on 2 cores; ``--smoke`` (one
trajectory of each kind, one worker SIGKILL) checks that it runs. Nothing is left
running, even on Ctrl-C: the stack's process group and every process ever seen below it are killed on the way
out.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.chaos_checks import (  # noqa: E402
    TENANT,
    Acked,
    Key,
    Outcome,
    check_canvases,
    check_events,
    check_shard_states,
    log_evidence,
    read_jsonl,
    tally,
    wait_l1,
    wait_quiet,
)
from bench.chaos_stack import UpProcess, free_port  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.client.calls import batches as chunks  # noqa: E402
from mnemoflow.events import ToolResultIn, TurnIn  # noqa: E402
from mnemoflow.replay import from_locomo, from_messages  # noqa: E402
from mnemoflow.sharding import shard_for  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
MAX_REQUEST_CHARS = 400_000  # of content per request: escaped JSON stays under the 1 MiB body limit
SCHEDULE = [
    "worker_sigkill",
    "shard_sigkill",
    "extractor_sigkill",
    "worker_sigkill",
    "worker_sigstop",
    "broker_sigkill",
    "worker_sigkill",
]
PROBE = {
    "worker_sigkill": "turn",
    "worker_sigstop": "turn",
    "broker_sigkill": "turn",
    "shard_sigkill": "shard",
    "extractor_sigkill": "l1",
}
PART = {
    "worker_sigkill": "worker",
    "worker_sigstop": "worker",
    "broker_sigkill": "broker",
    "shard_sigkill": "shard",
    "extractor_sigkill": "extractor",
}
PROBE_SESSIONS = ("chaos-probe",)  # probes are sent concurrently: no order to check
WINDOW_PAD_S = 2.0  # events acknowledged this long before a fault or after its recovery count for it
COMPACT_WINDOW = 24_000
SESSION_TIMEOUT_S = 10


@dataclass
class Profile:
    locomo: int  # conversations
    openhands: int  # trajectories (smallest first in quick)
    tau: int
    rate: float  # events/s offered by the client
    recovery_timeout: float
    gap_s: float  # normal traffic between faults
    repeat: int  # times through the schedule


QUICK = Profile(locomo=1, openhands=3, tau=8, rate=15, recovery_timeout=75, gap_s=3, repeat=1)
SMOKE = Profile(locomo=1, openhands=1, tau=1, rate=15, recovery_timeout=75, gap_s=2, repeat=1)  # one fault (--smoke)
FULL = Profile(locomo=5, openhands=50, tau=100, rate=40, recovery_timeout=180, gap_s=10, repeat=2)


# ----------------------------------------------------------------------------------------------- sources


@dataclass
class Source:
    name: str
    items: list[TurnIn | ToolResultIn]
    messages: list[dict[str, Any]] | None = None  # the chat array, for compaction (trajectories only)
    session: str | None = None


def load_sources(profile: Profile) -> list[Source]:
    """LoCoMo dialogues and agent trajectories, as ``mnemoflow replay`` submits them, interleaved by kind."""
    sys.path.insert(0, str(EVAL))
    from loaders import load_trajectory_records  # the eval set's own loader

    locomo = json.loads((EVAL / "locomo" / "locomo-dev.json").read_text())[: profile.locomo]
    start = datetime(2025, 1, 1, tzinfo=UTC)
    trajs = []
    for folder, user, n in (
        ("openhands_swebench_verified", "agent-openhands", profile.openhands),
        ("tau_bench_airline", "agent-tau", profile.tau),
    ):
        records = load_trajectory_records(str(EVAL / "trajectories" / folder))
        if n < len(records):  # the smallest first: a quick run should not spend its time on one huge run
            records = sorted(records, key=lambda r: sum(len(m.get("content") or "") for m in r["messages"]))[:n]
        for rec in records:
            replay = from_messages(rec["messages"], rec["id"], user, start)
            sent = {i.tool_call_id for i in replay.items if isinstance(i, ToolResultIn)}
            asked = {m["tool_call_id"] for m in rec["messages"] if m["role"] == "tool"}
            session = replay.items[0].session if replay.items else None
            # Compaction needs the chat's tool-call ids to be the stored ones (replay renames a few unsafe ids).
            messages = (
                rec["messages"]
                if sent == asked and len(asked) == sum(m["role"] == "tool" for m in rec["messages"])
                else None
            )
            trajs.append(Source(replay.name, replay.items, messages, session))
    convs = [Source(r.name, r.items) for r in map(from_locomo, locomo)]
    # Interleaved, so that the first agents start on a conversation and on trajectories of both kinds at once.
    kinds = [[t for t in trajs if t.items and t.items[0].user == u] for u in ("agent-openhands", "agent-tau")]
    order: list[Source] = []
    for k in range(max(len(convs), *map(len, kinds))):
        order += [group[k] for group in (kinds[0], convs, kinds[1]) if k < len(group)]
    return order


def renamed(item: TurnIn | ToolResultIn, round_: int) -> TurnIn | ToolResultIn:
    """The same event under new ids, for a second time through the data (a longer run than the data)."""
    if round_ == 0:
        return item
    p = f"r{round_}."
    if isinstance(item, TurnIn):
        return item.model_copy(update={"message_id": p + item.message_id, "session": p + item.session})
    return item.model_copy(update={"tool_call_id": p + item.tool_call_id, "session": p + item.session})


# ------------------------------------------------------------------------------------------------ ledger


@dataclass
class Ledger:
    """Every event the API acknowledged, by identity, with when and in which order."""

    t0: float
    events: dict[Key, Acked] = field(default_factory=dict)
    retries: Counter[str] = field(default_factory=Counter)
    rejected: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def ack(self, items: list[TurnIn | ToolResultIn]) -> None:
        at = self.now()
        with self.lock:
            for i in items:
                self.events.setdefault(Acked.key_of(i), Acked(i, at, len(self.events)))

    def snapshot(self) -> dict[Key, Acked]:
        with self.lock:
            return dict(self.events)


def body_of(items: list[TurnIn | ToolResultIn]) -> tuple[str, dict[str, Any]]:
    if isinstance(items[0], TurnIn):
        return "/v1/turns", {"turns": [i.model_dump(mode="json", exclude_none=True) for i in items]}
    return "/v1/tool-results", {"results": [i.model_dump(mode="json", exclude_none=True) for i in items]}


def submit(
    client: httpx.Client,
    items: list[TurnIn | ToolResultIn],
    ledger: Ledger,
    give_up: threading.Event,
    once: bool = False,
) -> bool:
    """POST until a 202 (then record the acks), as a client of an idempotent API would; False if refused or
    abandoned (``give_up`` set, or ``once``)."""
    url, body = body_of(items)
    delay = 0.5
    while True:
        try:
            response = client.post(url, json=body)
        except httpx.TransportError as exc:
            ledger.retries[type(exc).__name__] += 1
            wait = delay
        else:
            if response.status_code == 202:
                ledger.ack(items)
                return True
            if response.status_code < 500 and response.status_code != 429:
                ledger.rejected.append(f"{url} {response.status_code}: {response.text[:200]}")
                return False
            ledger.retries[str(response.status_code)] += 1
            wait = float(response.headers.get("retry-after", delay))
        if once or give_up.is_set():
            return False
        time.sleep(min(wait, 5.0))
        delay = min(delay * 2, 2.0)


class Feeder:
    """A fleet of ``agents`` client threads replaying the sources: each agent takes the next source and sends it
    in order, batch after batch, like one agent reporting its conversation; together they offer at most ``rate``
    events/s. When the data runs out it goes through it again under new ids. A finished trajectory goes to the
    compactor."""

    def __init__(
        self,
        client: httpx.Client,
        sources: list[Source],
        rate: float,
        ledger: Ledger,
        compact: queue.Queue[Source | None],
        agents: int = 4,
        size: int = 20,
    ) -> None:
        self.client, self.sources, self.rate, self.ledger, self.compact = client, sources, rate, ledger, compact
        self.size = size
        self.stop = threading.Event()  # finish the batch in hand, then stop
        self.give_up = threading.Event()  # abandon the batch in hand
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._plan = self._sources()
        self._next_at = time.monotonic()
        self._threads = [threading.Thread(target=self._agent, name=f"agent-{i}", daemon=True) for i in range(agents)]

    def _sources(self) -> Iterator[tuple[Source, int]]:
        round_ = 0
        while True:
            for src in self.sources:
                yield src, round_
            round_ += 1

    def _pace(self, n: int) -> None:
        with self._lock:
            at = max(self._next_at, time.monotonic() - 1.0)
            self._next_at = at + n / self.rate
        time.sleep(max(0.0, at - time.monotonic()))

    def _agent(self) -> None:
        try:
            while not self.stop.is_set():
                with self._lock:
                    src, round_ = next(self._plan)
                for batch in chunks([renamed(i, round_) for i in src.items], self.size, MAX_REQUEST_CHARS):
                    if self.stop.is_set():
                        return
                    self._pace(len(batch))
                    if not submit(self.client, batch, self.ledger, self.give_up) and self.give_up.is_set():
                        return
                if src.messages is not None and round_ == 0:
                    self.compact.put(src)
        except Exception as exc:  # noqa: BLE001 - reported in the results
            self.errors.append(repr(exc))

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


@dataclass
class CompactStats:
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    removed: int = 0


class Compactor(threading.Thread):
    """Compacts each finished trajectory's session once its tool results have landed (so canvases are written
    while faults happen), retrying 5xx a few times."""

    def __init__(self, client: httpx.Client, data: Path, work: queue.Queue[Source | None]) -> None:
        super().__init__(name="compactor", daemon=True)
        self.client, self.data, self.work = client, data, work
        self.stats = CompactStats()
        self.stop = threading.Event()

    def run(self) -> None:
        while True:
            src = self.work.get()
            if src is None or self.stop.is_set():
                return
            assert src.messages is not None and src.session is not None
            n = sum(isinstance(i, ToolResultIn) for i in src.items)
            log = self.data / TENANT / "sessions" / src.session / "offload.jsonl"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not self.stop.is_set():
                if log.exists() and log.read_bytes().count(b"\n") >= n:
                    break
                time.sleep(0.5)
            for attempt in range(6):
                try:
                    r = self.client.post(
                        f"/v1/sessions/{src.session}/compact", json={"messages": src.messages, "window": COMPACT_WINDOW}
                    )
                except httpx.TransportError as exc:
                    status, text = 0, type(exc).__name__
                else:
                    status, text = r.status_code, r.text[:200]
                    if status == 200:
                        self.stats.ok += 1
                        self.stats.removed += len(r.json().get("removed", []))
                        break
                    if status < 500:
                        break
                if self.stop.is_set():
                    break
                time.sleep(2.0 * (attempt + 1))
            if status != 200:
                self.stats.failed.append(f"{src.session}: {status} {text}")


class HealthWatch(threading.Thread):
    """``GET /health`` every second: what the stack said about itself during each fault."""

    def __init__(self, api: str, t0: float) -> None:
        super().__init__(name="health", daemon=True)
        self.api, self.t0 = api, t0
        self.samples: list[tuple[float, int]] = []  # (t, status; 0 = no answer)
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.api, timeout=3) as client:
            while not self.stop.wait(1.0):
                try:
                    status = client.get("/health").status_code
                except httpx.HTTPError:
                    status = 0
                self.samples.append((time.monotonic() - self.t0, status))

    def degraded(self, start: float, end: float) -> dict[str, Any]:
        bad = [(t, s) for t, s in self.samples if start <= t <= end and s != 200]
        return {"samples_not_ok": len(bad), "statuses": sorted({s for _, s in bad})}


# ------------------------------------------------------------------------------------------------ probes


class Prober:
    """Small events submitted after a fault, one every ``interval`` seconds, and a check of whether any of them
    has been applied: the first applied one marks the recovery."""

    def __init__(self, client: httpx.Client, data: Path, ledger: Ledger, shards: int) -> None:
        self.client, self.data, self.ledger = client, data, ledger
        self.k = 0
        # One probe session per shard, so a tool-result probe reaches whichever shard was killed.
        names = (f"chaos-probe-{i}" for i in range(10_000))
        by_shard: dict[int, str] = {}
        for name in names:
            by_shard.setdefault(shard_for(f"{TENANT}/{name}", shards), name)
            if len(by_shard) == shards:
                break
        self.shard_sessions = [by_shard[i] for i in range(shards)]

    def make(self, kind: str) -> tuple[str, list[TurnIn | ToolResultIn]]:
        self.k += 1
        k, now = self.k, datetime.now(UTC)
        if kind == "turn":
            return f"probe-{k}", [
                TurnIn(
                    message_id=f"probe-{k}",
                    user="chaos-probe",
                    session="chaos-probe",
                    role="assistant",
                    content=f"probe {k}",
                    ts=now,
                )
            ]
        if kind == "shard":
            return f"pt-{k}", [
                ToolResultIn(
                    tool_call_id=f"pt-{k}-{s}",
                    session=s,
                    user="chaos-probe",
                    tool_name="probe",
                    content=f"probe {k}\n",
                    ts=now,
                )
                for s in self.shard_sessions
            ]
        return f"chaos-l1probe-{k}", [
            TurnIn(
                message_id=f"l1probe-{k}",
                user=f"chaos-l1probe-{k}",
                session="chaos-probe-l1",
                role="user",
                ts=now,
                content="I work as a data engineer in Lisbon and I love green tea.",
            )
        ]

    def applied(self, kind: str, tags: list[str]) -> bool:
        """Has any of these probes been applied?"""
        if not tags:
            return False
        users = self.data / TENANT / "users"
        if kind == "turn":
            days = (users / "chaos-probe" / "conversations").glob("*.jsonl")
            ids = {m.get("id") for f in days for m in read_jsonl(f)}
            return not ids.isdisjoint(tags)
        if kind == "l1":
            for tag in tags:
                try:
                    if json.loads((users / tag / "state" / "l1_cursor.json").read_text()).get("passes", 0) >= 1:
                        return True
                except (OSError, ValueError):
                    continue
            return False
        # Shard probes: the newest probe in every probe session's log, then each shard must know that entry.
        logs = {s: read_jsonl(self.data / TENANT / "sessions" / s / "offload.jsonl") for s in self.shard_sessions}
        for tag in reversed(tags):
            seqs = {s: next((e["seq"] for e in logs[s] if e.get("tool_call_id") == f"{tag}-{s}"), None) for s in logs}
            if None in seqs.values():
                continue
            for session, seq in seqs.items():
                try:
                    state = self.client.get(f"/v1/sessions/{session}/state", timeout=5).json()
                except (httpx.HTTPError, ValueError):
                    return False
                if state.get("last_seq", -1) < seq:
                    return False
            return True
        return False


# ------------------------------------------------------------------------------------------------ faults


@dataclass
class Injection:
    kind: str
    at: float
    pid: int | None = None
    recovered: bool = False
    recovery_s: float | None = None
    restarted_pid: int | None = None
    restart_s: float | None = None
    end: float = 0.0
    note: str = ""
    health: dict[str, Any] = field(default_factory=dict)


def inject(kind: str, up: UpProcess, prober: Prober, ledger: Ledger, timeout: float, stop_s: float) -> Injection:
    part = PART[kind]
    victims = up.parts(part)
    if not victims:
        inj = Injection(kind, ledger.now(), note=f"no {part} process found in the stack's tree")
        inj.end = inj.at
        return inj
    victim = victims[0]
    before = {p.pid for p in victims}
    inj = Injection(kind, ledger.now(), pid=victim.pid)
    if kind == "worker_sigstop":
        victim.send_signal(signal.SIGSTOP)
        inj.note = f"stopped for {stop_s:.0f}s (session timeout {SESSION_TIMEOUT_S}s)"
        try:
            time.sleep(stop_s)
            restarted = [p.pid for p in up.parts(part) if p.pid not in before]
            if restarted:
                inj.note += f"; while stopped, {part} pid {restarted[0]} was started beside it"
        finally:
            try:
                victim.send_signal(signal.SIGCONT)
            except Exception:  # noqa: BLE001 - it may have been killed by the supervisor meanwhile
                pass
    else:
        victim.send_signal(signal.SIGKILL)
    probe_kind = PROBE[kind]
    pool: list[threading.Thread] = []
    tags: list[str] = []
    interval = 2.0 if probe_kind == "l1" else 1.0
    next_probe = 0.0
    give_up = threading.Event()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_probe and len([t for t in pool if t.is_alive()]) < 4:
            tag, items = prober.make(probe_kind)
            tags.append(tag)
            t = threading.Thread(target=submit, args=(prober.client, items, ledger, give_up, True), daemon=True)
            t.start()
            pool.append(t)
            next_probe = now + interval
        if inj.restarted_pid is None:
            fresh = [p.pid for p in up.parts(part) if p.pid not in before]
            if fresh:
                inj.restarted_pid, inj.restart_s = fresh[0], round(ledger.now() - inj.at, 2)
        if prober.applied(probe_kind, tags):
            inj.recovered, inj.recovery_s = True, round(ledger.now() - inj.at, 2)
            break
        if not up.alive():
            inj.note = (inj.note + "; " if inj.note else "") + "mnemoflow up exited"
            break
        time.sleep(0.25)
    give_up.set()
    inj.end = ledger.now()
    settle = time.monotonic() + 10  # a part may be replaced after the service recovered (Ray reuses a process)
    while inj.restarted_pid is None and kind != "worker_sigstop" and time.monotonic() < settle:
        fresh = [p.pid for p in up.parts(part) if p.pid not in before]
        if fresh:
            inj.restarted_pid, inj.restart_s = fresh[0], round(ledger.now() - inj.at, 2)
        time.sleep(0.25)
    return inj


# ------------------------------------------------------------------------------------------------ checks


# -------------------------------------------------------------------------------------------------- L1


def end_sessions(client: httpx.Client, last_session: dict[str, str]) -> int:
    failed = 0
    for user, session in sorted(last_session.items()):
        for _ in range(5):
            try:
                if client.post(f"/v1/sessions/{session}/end", json={"user": user}).status_code == 202:
                    break
            except httpx.TransportError:
                pass
            time.sleep(1.0)
        else:
            failed += 1
    return failed


def l1_consistency(client: httpx.Client, data: Path, ledger: Ledger, timeout: float) -> dict[str, Any]:
    """First: every user's session ended, L1 settles. Second pass: every turn re-sent and every session ended
    again; the atoms must be the same."""
    acked = ledger.snapshot()
    items = [v.item for k, v in acked.items() if k[0] == "turn"]
    users = sorted({i.user for i in items})
    last_session = {i.user: i.session for i in items}
    failed = end_sessions(client, last_session)
    first, first_s, first_ok = wait_l1(data, users, timeout)
    never = threading.Event()
    for batch in chunks(items, 200, MAX_REQUEST_CHARS):  # type: ignore[arg-type]
        submit(client, batch, Ledger(ledger.t0), never)  # a throwaway ledger: these are re-sends
    time.sleep(2.0)
    failed += end_sessions(client, last_session)
    second, second_s, second_ok = wait_l1(data, users, timeout)
    added = second["ids"] - first["ids"]
    return {
        "users": len(users),
        "settled_first": first_ok,
        "settle_first_s": round(first_s, 1),
        "settled_second": second_ok,
        "settle_second_s": round(second_s, 1),
        "atoms_before": first["atoms"],
        "atoms_after": second["atoms"],
        "added_by_second_pass": len(added),
        "live_before": first["live"],
        "live_after": second["live"],
        "index_rows_before": first["index_rows"],
        "index_rows_after": second["index_rows"],
        "unextracted_user_turns": second["unextracted_user_turns"],
        "pending_turns": second["pending"],
        "orphan_atoms": second["orphan_atoms"],
        "session_end_failures": failed,
        "consistent": not added and second["live"] == first["live"] and second_ok,
    }


# ---------------------------------------------------------------------------------------------- canvases


# -------------------------------------------------------------------------------------------------- run


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    profile = SMOKE if args.smoke else QUICK if args.quick else FULL
    schedule = SCHEDULE[:1] if args.smoke else SCHEDULE * profile.repeat
    schedule = args.faults.split(",") if args.faults else schedule
    unknown = [k for k in schedule if k not in PART]
    if unknown:
        raise SystemExit(f"unknown fault kinds {unknown}; known: {sorted(PART)}")
    sources = load_sources(profile)
    data = root / "data"
    port = free_port()
    key = secrets.token_urlsafe(24)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOFLOW_")}
    env.update(
        {
            "MNEMOFLOW_CONFIG": str(root / "none.toml"),
            "MNEMOFLOW_WORKER_SESSION_TIMEOUT": str(SESSION_TIMEOUT_S),
            "MNEMOFLOW_L1_TICK_SECONDS": "1",
            "MNEMOFLOW_CURATOR_TICK_SECONDS": "2",
            "MNEMOFLOW_L2_DELAY_AFTER_L1_SECONDS": "2",
            "MNEMOFLOW_L2_MIN_INTERVAL_SECONDS": "30",
            "MNEMOFLOW_MAX_BODY_BYTES": str(8 << 20),
            # A key of our own (a documented way to configure one) rather than the generated <data_dir>/api-key.
            "MNEMOFLOW_API_KEYS": json.dumps({TENANT: key}),
        }
    )
    mnemoflow = Path(sys.executable).with_name("mnemoflow")
    cmd = [str(mnemoflow), "up", "--data-dir", str(data), "--port", str(port)]
    up = UpProcess(cmd, env, root / "up.log", root)
    started = time.monotonic()
    result: dict[str, Any] = {"quick": args.quick, "smoke": args.smoke, "cpus": os.cpu_count(), "data_dir": str(data)}
    threads: list[threading.Thread] = []
    try:
        api = up.start(timeout=240)
        result["startup_s"] = round(time.monotonic() - started, 1)
        broker = up.parts("broker")
        result["broker"] = (
            "apache-kafka"
            if broker and "kafka.Kafka" in " ".join(broker[0].cmdline())
            else "tansu"
            if broker
            else "external"
        )
        result["parts_at_start"] = {p: len(up.parts(p)) for p in ("worker", "broker", "shard", "extractor")}
        headers = {"Authorization": f"Bearer {key}"}
        client = httpx.Client(base_url=api, headers=headers, timeout=30)
        ledger = Ledger(time.monotonic())
        health = HealthWatch(api, ledger.t0)
        work: queue.Queue[Source | None] = queue.Queue()
        feeder = Feeder(client, sources, profile.rate, ledger, work)
        compactor = Compactor(httpx.Client(base_url=api, headers=headers, timeout=120), data, work)
        prober = Prober(
            httpx.Client(base_url=api, headers=headers, timeout=20), data, ledger, shards=len(up.parts("shard")) or 4
        )
        threads = [health, compactor]
        for t in threads:
            t.start()
        feeder.start()

        warm = inject_free_probe(prober, ledger, timeout=120)  # the worker has joined its group
        result["warm_up_s"] = warm
        injections: list[Injection] = []
        for kind in schedule:
            time.sleep(profile.gap_s)
            if injections and injections[-1].pid is not None and not injections[-1].recovered:
                injections.append(Injection(kind, ledger.now(), note=f"skipped: {injections[-1].kind} did not recover"))
                injections[-1].end = injections[-1].at
                continue
            stop_s = SESSION_TIMEOUT_S + 5
            timeout = profile.recovery_timeout + (stop_s if kind == "worker_sigstop" else 0)
            inj = inject(kind, up, prober, ledger, timeout, stop_s)
            inj.health = health.degraded(inj.at, inj.end + 1)
            injections.append(inj)
            print(
                f"[{ledger.now():6.1f}s] {kind}: pid {inj.pid} recovered={inj.recovered} "
                f"in {inj.recovery_s}s (restarted pid {inj.restarted_pid} after {inj.restart_s}s) {inj.note}",
                flush=True,
            )
        time.sleep(profile.gap_s)

        feeder.stop.set()
        feeder.join(60)
        feeder.give_up.set()
        feeder.join(10)
        work.put(None)
        compactor.join(90)
        compactor.stop.set()
        result["traffic_s"] = round(ledger.now(), 1)
        acked = ledger.snapshot()
        want = (sum(k[0] == "turn" for k in acked), sum(k[0] == "tool" for k in acked))
        result["quiescence"] = wait_quiet(data, want, quiet_s=3, give_up_s=20, timeout=120)
        outcome = check_events(data, acked, unordered=PROBE_SESSIONS)
        result["l1"] = l1_consistency(client, data, ledger, timeout=90 if args.quick or args.smoke else 300)
        result["canvases"] = check_canvases(data)
        result["shard_state"] = check_shard_states(client, data)
        result["compaction"] = {
            "ok": compactor.stats.ok,
            "failed": compactor.stats.failed[:10],
            "removed_tool_outputs": compactor.stats.removed,
        }
        result["client"] = {
            "retries": dict(ledger.retries),
            "rejected": ledger.rejected[:10],
            "agent_errors": feeder.errors[:5],
        }
        result["up_alive_before_stop"] = up.alive()
        result["parts_before_stop"] = {p: len(up.parts(p)) for p in ("worker", "broker", "shard", "extractor")}
        health.stop.set()
        result["stop"] = up.stop(timeout=120)
        result.update(summarise(acked, outcome, injections))
        result["dead_letters_logged"] = sum(
            p.read_text(errors="replace").count("parked") for p in (data / "logs").glob("worker*.log")
        )
        result["log_evidence"] = log_evidence(root, data)
        result["targets"] = targets(result)
    finally:
        for t in threads:
            if hasattr(t, "stop"):
                t.stop.set()  # type: ignore[attr-defined]
        if "feeder" in locals():
            feeder.give_up.set()
        result["swept_after_stop"] = up.sweep()
        result["seconds"] = round(time.monotonic() - started, 1)
    return result


def targets(r: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets, each a yes or no, so a reader (or CI) need not interpret the numbers."""
    rows = r["by_fault"].values()
    return {
        "no_event_lost_or_duplicated": r["lost"] == 0 and r["duplicated"] == 0 and r["mismatched"] == 0,
        "every_fault_injected_and_recovered": all(row["injected"] == row["count"] == row["recovered"] for row in rows),
        "l1_consistent": bool(r["l1"].get("consistent")),
        "canvases_valid": r["canvases"]["valid"] == r["canvases"]["count"],
        "shards_agree_with_logs": r["shard_state"]["disagree_count"] == 0,
        "clean_stop_on_sigterm": r["stop"].get("exit_code") == 0 and not r["stop"].get("leftover"),
    }


def inject_free_probe(prober: Prober, ledger: Ledger, timeout: float) -> float | None:
    """One probe turn with no fault: when it lands the pipeline is up end to end."""
    t0 = time.monotonic()
    tag, items = prober.make("turn")
    submit(prober.client, items, ledger, threading.Event())
    while time.monotonic() - t0 < timeout:
        if prober.applied("turn", [tag]):
            return round(time.monotonic() - t0, 1)
        time.sleep(0.25)
    return None


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "max": None}
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2)}


def summarise(acked: dict[Key, Acked], out: Outcome, injections: list[Injection]) -> dict:
    keys = list(acked)
    total = tally(keys, out)
    by_kind: dict[str, dict[str, Any]] = {}
    for inj in injections:
        row = by_kind.setdefault(
            inj.kind,
            {
                "count": 0,
                "injected": 0,
                "recovered": 0,
                "acked": 0,
                "lost": 0,
                "duplicated": 0,
                "mismatched": 0,
                "_rec": [],
            },
        )
        row["count"] += 1
        if inj.pid is None:
            continue
        row["injected"] += 1
        row["recovered"] += inj.recovered
        if inj.recovery_s is not None:
            row["_rec"].append(inj.recovery_s)
        lo, hi = inj.at - WINDOW_PAD_S, inj.end + WINDOW_PAD_S
        window = tally([k for k in keys if lo <= acked[k].at <= hi], out)
        for name in ("acked", "lost", "duplicated", "mismatched"):
            row[name] += window[name]
    for row in by_kind.values():
        row["recovery_s"] = percentiles(row.pop("_rec"))
    all_rec = [i.recovery_s for i in injections if i.recovery_s is not None]
    return {
        "faults": {k: v["injected"] for k, v in by_kind.items()},
        "events_acked": total["acked"],
        "turns_acked": sum(k[0] == "turn" for k in keys),
        "tool_results_acked": sum(k[0] == "tool" for k in keys),
        "lost": total["lost"],
        "duplicated": total["duplicated"],
        "mismatched": total["mismatched"],
        "recovery_s": percentiles(all_rec),
        "by_fault": by_kind,
        "injections": [
            {k: v for k, v in vars(i).items()} | {"at": round(i.at, 2), "end": round(i.end, 2)} for i in injections
        ],
        "checks": out.details,
        "lost_examples": [list(k) for k in keys if out.occurrences[k] == 0][:10],
        "duplicated_examples": [list(k) for k in keys if out.occurrences[k] > 1][:10],
        "mismatched_examples": [list(k) for k in keys if k in out.mismatched][:10],
    }


def tables(result: dict[str, Any]) -> list[Table]:
    """Faults by kind with what they cost, then the checks after quiescence."""
    rows = []
    for kind, row in result.get("by_fault", {}).items():
        rec = row["recovery_s"]
        rows.append(
            [
                kind,
                str(row["injected"]),
                f"{row['recovered']}/{row['injected']}",
                str(row["acked"]),
                str(row["lost"]),
                str(row["duplicated"]),
                f"{rec['p50']} / {rec['max']}",
            ]
        )
    rec = result.get("recovery_s", {})
    rows.append(
        [
            "all events",
            "",
            "",
            str(result.get("events_acked")),
            str(result.get("lost")),
            str(result.get("duplicated")),
            f"{rec.get('p50')} / {rec.get('max')}",
        ]
    )
    l1, canv, stop = result.get("l1", {}), result.get("canvases", {}), result.get("stop", {})
    shard = result.get("shard_state", {})
    missed = [name for name, ok in result.get("targets", {}).items() if not ok]
    checks = [
        [
            "refs byte-exact / content equal",
            f"mismatched {result.get('mismatched')},"
            f" refs not exact {result.get('checks', {}).get('refs_not_byte_exact')}",
        ],
        [
            "L1 second pass",
            f"atoms {l1.get('atoms_before')} → {l1.get('atoms_after')} (added {l1.get('added_by_second_pass')}),"
            f" settled {l1.get('settled_second')}, unextracted user turns {l1.get('unextracted_user_turns')}",
        ],
        ["canvases valid", f"{canv.get('valid')}/{canv.get('count')} ({canv.get('checker')})"],
        ["shard state = offload log", f"{shard.get('disagree_count')} disagree of {shard.get('sessions')}"],
        [
            "SIGTERM stop",
            f"exit {stop.get('exit_code')} in {stop.get('stop_s')} s, left running {len(stop.get('leftover', []))}",
        ],
        ["wall time", f"{result.get('seconds')} s (startup {result.get('startup_s')} s)"],
        ["targets", "every target met" if not missed else f"missed: {', '.join(missed)}"],
    ]
    columns = ["fault", "count", "recovered", "acked in window", "lost", "duplicated", "recovery p50 / max (s)"]
    title = f"Faults injected (broker {result.get('broker')}, {result.get('events_acked', 0)} events acked)"
    return [
        Table(title=title, columns=columns, rows=rows),
        Table(title="After quiescence", columns=["check", "result"], rows=checks),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one LoCoMo conversation, a few trajectories (< 5 min)")
    parser.add_argument("--smoke", action="store_true", help="--quick's conversation, 2 trajectories, one worker kill")
    parser.add_argument("--faults", help=f"comma-separated fault kinds (default: {','.join(SCHEDULE)})")
    parser.add_argument("--keep", action="store_true", help="keep the data and log folder (printed at the end)")
    parser.add_argument("--out", type=Path, help="default bench/results/chaos.json (chaos-quick.json with --quick)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="mnemoflow-chaos-"))
    run_ = Run(
        "chaos", "Chaos: faults injected into a running stack under real traffic, every acknowledged event checked"
    )

    def on_term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # the same clean-up as Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    try:
        result = run(args, root)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if not args.keep:
        del result["data_dir"]
    out = result_path("chaos", args.out, smoke=args.smoke, quick=args.quick)
    run_.finish(tables(result), json.loads(json.dumps(result, default=str)), out)
    if args.keep:
        print(f"data and logs kept in {root}")


if __name__ == "__main__":
    main()
