"""Agents and scopes (issue 33, docs/concepts/scopes.md): leaks through the API, the cost of the scope filter, and
shared facts recalled across agents. ``python bench/agents.py --quick`` (minutes; the committed
``agents-quick.json``): 10 agents in 3 teams serving 20 users, 10^4 atoms on SQLite and Milvus Lite, one LoCoMo
conversation; ``python bench/agents.py`` (the full run, on quiet cores): 50 agents in 5 teams serving 200 users,
10^5 atoms, the five development conversations. ``--parts fleet,latency,facts`` runs some of the three.

1. **Leaks through the API.** A fleet of agents in teams serves users (each user by ``--agents-per-user`` agents
   drawn at random, so from several teams) through the in-process HTTP API (``serving.api.create_api``) over a
   SQLite atom index opened by the product's factory (``mnemoflow.index.factory.open_store``: one connection for
   the worker that writes, one for the API that reads, as the extractor and API replicas do). Each agent, all at
   once, writes LoCoMo development turns and recalls. Writes: a turn (``POST /v1/turns`` with the agent's own
   bound key and a random ``visibility``), or a remembered memory (``POST /v1/users/{user}/memories``, with the
   same key and a random ``visibility``); the bodies never name the agent or team, the key does. A worker thread
   plays the stream workers and the extractor: it consumes what the API published (``TurnsHandler`` into L0, an L1
   pass of the heuristic engine for every user that got turns, ``CommandsHandler`` applying the remembers). Reads,
   each with the agent's own key, rotate over recall, memory search and conversation search, with the words of a memory
   written to that user by any agent (so many ask for what the caller must not see); a first round runs while the
   writes are applied, a second after they all are. Then drill-down probes of atoms the agent may not see (must be
   404) and may see (200, with only messages it may read). A hit is a **leak** when the scope its sources were
   given at write time (the narrowest, for an atom citing several) is not one the caller may see; the scope the
   hit reports is checked against the same truth.
2. **Scope filter latency.** ``bench/store_latency.py``'s corpus and backends, every atom given a scope (60 %
   shared, 20 % ``team:<one of 5>``, 20 % ``agent:<one of 50>``); hybrid ``search`` of one user timed with
   ``visible=None`` (the admin view) and with a random viewer's ``scopes()``, alternating per query.
3. **Shared facts across agents.** LoCoMo development conversations replayed as ``bench/locomo_recall.py`` does
   (heuristic L1, each speaker a user) with every turn stamped with the agent that heard it: ``a-odd`` hears the odd
   sessions, ``a-even`` the even ones. R@10 of the questions (categories 1-4, both speakers' memories, hybrid recall)
   asked as each agent, as the default agent (shared only) and as the admin view; and, for questions whose evidence
   lies in sessions of one parity, asked by the agent that heard it against the one that did not.

    python bench/agents.py --quick      # 10 agents / 3 teams / 20 users; 10^4 atoms (sqlite, milvus); 1 conversation
    python bench/agents.py              # 50 agents / 5 teams / 200 users; 10^5 atoms (sqlite, milvus); 5 conversations
    python bench/agents.py --smoke --out /tmp/agents.json   # 4 agents, 500 atoms, 30 turns: that it runs (the tests)

Writes ``bench/results/agents.json`` (``agents-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.locomo_recall import (  # noqa: E402
    TENANT as LOCOMO_TENANT,
)
from bench.locomo_recall import (
    TurnClock,
    heuristic_pipeline,
    ingest,
    load_module,
    turn_time,
    uid,
    workspace,
)
from bench.report import Run, Table, result_path  # noqa: E402
from bench.store_latency import VERSIONS, Corpus, open_backend, stats, timed  # noqa: E402
from mnemoflow.config import TOPIC_COMMANDS, TOPIC_TURNS, Settings  # noqa: E402
from mnemoflow.embedding.factory import build_embedder
from mnemoflow.errors import StorageError
from mnemoflow.governance.applier import OperationApplier
from mnemoflow.governance.status import OperationLog
from mnemoflow.handlers import CommandsHandler, HandlerContext, RawRecord, WriterThread
from mnemoflow.handlers.turns import TurnsHandler
from mnemoflow.index.factory import open_store
from mnemoflow.memory.l1.dedup import DedupConfig
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.recall.config import RECIPES, RecallConfig
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.ports import Embedder
from mnemoflow.ports.clock import SystemClock
from mnemoflow.ports.vectors import Hit, VectorStore
from mnemoflow.retry import RetryPolicy
from mnemoflow.scopes import SHARED, Viewer, narrowest, requested_scope
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus
from serving.api import create_api

ROOT = Path(__file__).resolve().parents[1]
FLEET = "fleet"
KINDS = ("shared", "team", "agent")
READS = ("recall", "memory_search", "conversation_search")


def kind(scope: str) -> str:
    return scope.split(":", 1)[0]


def percentiles(ms: list[float]) -> dict[str, float]:
    """store_latency's p50 / p99 / mean, with p95."""
    if not ms:
        return {}
    return {**stats(ms), "p95_ms": round(float(np.percentile(np.array(ms), 95)), 2)}


# --- 1. leaks through the API -------------------------------------------------------------------------------------


class Worker(threading.Thread):
    """The stream workers and the extractor of one process, on their own thread and event loop: consume what the
    API published, write turns to L0 and run an L1 pass (heuristic) for every user that got turns, apply the
    operations. The index is its own connection (the extractor's), apart from the API's."""

    def __init__(self, bus: ListBus, files: LocalFileStore, store: VectorStore, embedder: Embedder) -> None:
        super().__init__(name="bench-worker", daemon=True)
        self.bus, self.files, self.store, self.embedder = bus, files, store, embedder
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.counts: Counter[str] = Counter()

    def run(self) -> None:
        try:
            asyncio.run(self._loop())
        except BaseException as exc:  # reported by the benchmark, which then fails
            self.error = exc

    async def _loop(self) -> None:
        clock = SystemClock()
        self.pipeline = L1Pipeline(
            files=self.files,
            store=self.store,
            embedder=self.embedder,
            extractor=HeuristicExtractor(),
            judge=HeuristicJudge(),
            clock=clock,
        )
        applier = OperationApplier.over(
            files=self.files, store=self.store, embedder=self.embedder, clock=clock, pipeline=self.pipeline
        )
        ctx = HandlerContext(clock, RetryPolicy(attempts=1), WriterThread())
        commands, turns = CommandsHandler(ctx, self.files, applier.apply), TurnsHandler(ctx, self.files)
        offset = 0
        while True:
            n = len(self.bus.sent)  # the API only appends: the first n are ours to take
            batch = self.bus.sent[:n]
            del self.bus.sent[:n]
            if not batch:
                if self.stop.is_set():
                    break
                await asyncio.sleep(0.02)
                continue
            touched: set[str] = set()
            for topic, records in batch:
                raw = []
                for key, value, _ in records:
                    raw.append(RawRecord(value, key.encode(), topic, 0, offset))
                    offset += 1
                if topic == TOPIC_TURNS:
                    written = await turns.handle(raw)
                    self.counts["turns_parked"] += len(written.parked)
                    touched.update(key.split("/", 1)[1] for key, _, _ in records)
                elif topic == TOPIC_COMMANDS:
                    outcome = await commands.handle(raw)
                    self.counts["operations_parked"] += len(outcome.parked)
                self.counts[topic] += len(records)
            for user in sorted(touched):
                await self.extract(user)

    async def extract(self, user: str) -> None:
        for _ in range(1000):  # a run takes at most max_windows windows: run until the backlog is done
            if not self.pipeline.pending(FLEET, user):
                return
            await self.pipeline.run(FLEET, user)
            self.counts["l1_passes"] += 1


class Fleet:
    """Agents in teams, the users each serves, and every write with the scope it was given (the truth)."""

    def __init__(self, agents: int, teams: int, users: int, per_user: int, rng: random.Random) -> None:
        self.team = {f"a{i:02d}": f"t{i % teams}" for i in range(agents)}
        self.users = [f"u{j:03d}" for j in range(users)]
        self.serves: dict[str, list[str]] = {a: [] for a in self.team}
        for user in self.users:
            for agent in rng.sample(sorted(self.team), min(per_user, agents)):
                self.serves[agent].append(user)
        for mine in self.serves.values():  # every agent serves someone
            if not mine:
                mine.append(rng.choice(self.users))
        self.given: dict[tuple[str, str], str] = {}
        """(user, message id or operation id) -> the scope the write asked for."""
        self.written: dict[str, list[str]] = {u: [] for u in self.users}
        """user -> texts written to them, by any agent (queries are drawn from them)."""
        self.operations: list[tuple[str, str]] = []
        self.remembered: dict[tuple[str, str], str] = {}

    def viewer(self, agent: str) -> Viewer:
        return Viewer(agent=agent, team=self.team[agent])

    def settings(self, data: Path) -> Settings:
        keys = [{"key": f"k-{a}", "agent": a, "team": t} for a, t in self.team.items()]
        return Settings(
            data_dir=data,
            api_keys={FLEET: "k-admin"},
            agent_keys={FLEET: keys},
            rate_limit_per_second=1e6,  # the fleet is one tenant: the default 300/s would measure the limiter
            rate_limit_burst=10**6,
        )

    def truth(self, user: str, sources: list[str], atom: str | None = None) -> str | None:
        """The scope the sources were given (the narrowest, for several), or a remembered atom's; None when neither
        is a known write. (A remembered atom has no L0 source: it is known by the atom id its operation stored.)"""
        scopes = [self.given[(user, s)] for s in sources if (user, s) in self.given]
        if atom is not None and (user, atom) in self.remembered:
            scopes.append(self.remembered[(user, atom)])
        return narrowest(scopes) if scopes else None

    def settle(self, files: LocalFileStore) -> Counter[str]:
        """Once every operation is applied: the atom each remember stored, with the scope it asked for."""
        log, actions = OperationLog(files), Counter[str]()
        for user, oid in self.operations:
            status = log.get(FLEET, oid)
            if status is None or status.status != "applied":
                actions["not_applied"] += 1
                continue
            actions[str(status.result.get("action"))] += 1
            if status.result.get("atom_id"):
                self.remembered[(user, str(status.result["atom_id"]))] = self.given[(user, oid)]
        return actions


class Tally:
    """Per read route: requests, hits, leaks, wrong or missing scope labels, and requests with a hit of each kind."""

    def __init__(self) -> None:
        self.rows: dict[str, Counter[str]] = {}
        self.ms: dict[str, list[float]] = {}
        self.leaked: list[dict[str, Any]] = []
        self.answers: list[tuple[str, str, str, list[tuple[str, list[str], str | None]]]] = []
        self.errors: Counter[str] = Counter()

    def failed(self, route: str, status: int, text: str) -> None:
        self.rows.setdefault(route, Counter())["failed"] += 1
        self.errors[f"{route} {status}: {text[:160]}"] += 1

    def add(self, route: str, agent: str, user: str, hits: list[tuple[str, list[str], str | None]], ms: float) -> None:
        """``hits``: (id, source ids, the scope the hit reports or None when it says none); judged by
        :meth:`judge` once every write is applied (a hit read during the writes may be of a remember whose
        operation status is not written yet)."""
        self.ms.setdefault(route, []).append(ms)
        self.answers.append((route, agent, user, hits))

    def judge(self, fleet: Fleet) -> None:
        for route, agent, user, hits in self.answers:
            self._judge(fleet, route, agent, user, hits)

    def _judge(
        self, fleet: Fleet, route: str, agent: str, user: str, hits: list[tuple[str, list[str], str | None]]
    ) -> None:
        c = self.rows.setdefault(route, Counter())
        visible = fleet.viewer(agent).scopes()
        c["requests"] += 1
        c["hits"] += len(hits)
        c["requests_with_hits"] += bool(hits)
        kinds = set()
        for hid, sources, said in hits:
            truth = fleet.truth(user, sources, None if route.endswith("conversation_search") else hid)
            if said is None:
                c["unlabelled"] += 1
            if truth is None:
                c["unattributed"] += 1
                continue
            kinds.add(kind(truth))
            if said is not None and said != truth:
                c["mislabelled"] += 1
            if truth not in visible:
                c["leaks"] += 1
                self.leaked.append({"route": route, "agent": agent, "user": user, "id": hid, "scope": truth})
        for k in kinds:
            c[f"with_{k}"] += 1


async def call(client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
    t0 = time.perf_counter()
    response = await client.request(method, path, headers=headers, **kw)
    return response, (time.perf_counter() - t0) * 1000


async def agent_writes_and_reads(
    client: httpx.AsyncClient,
    fleet: Fleet,
    tally: Tally,
    agent: str,
    rounds: int,
    texts: list[str],
    remember_share: float,
    rng: random.Random,
    phase: str,
    write_ms: list[float],
) -> None:
    key = {"Authorization": f"Bearer k-{agent}"}
    team = fleet.team[agent]
    for r in range(rounds):
        user = rng.choice(fleet.serves[agent])
        if phase == "during_writes":
            text, vis = rng.choice(texts), rng.choice(KINDS)
            scope = requested_scope(vis, agent, team)  # type: ignore[arg-type]
            if rng.random() < remember_share:
                body = {"text": text, "visibility": vis}  # the agent's key fills in its agent and team
                response, ms = await call(client, "POST", f"/v1/users/{user}/memories", key, json=body)
                assert response.status_code == 202, response.text
                fleet.given[(user, response.json()["id"])] = scope
                fleet.operations.append((user, response.json()["id"]))
            else:
                mid = f"{agent}-{r}"
                turn = {
                    "message_id": mid,
                    "user": user,
                    "session": f"s-{agent}-{user}",
                    "role": "user",
                    "content": text,
                    "visibility": vis,  # the agent's key fills in its agent and team
                }
                fleet.given[(user, mid)] = scope  # before the request: the worker may apply it at once
                response, ms = await call(client, "POST", "/v1/turns", key, json={"turns": [turn]})
                assert response.status_code == 202, response.text
            fleet.written[user].append(text)
            write_ms.append(ms)
        pool = fleet.written[user] or texts
        query = " ".join(rng.choice(pool).split()[:10])
        route = READS[r % len(READS)]
        path = {"recall": "/v1/recall", "memory_search": "/v1/memory/search"}.get(route, "/v1/conversations/search")
        ask: dict[str, Any] = {"user": user, "query": query} | ({} if route == "recall" else {"limit": 10})
        response, ms = await call(client, "POST", path, key, json=ask)
        if response.status_code != 200:  # counted, not retried: a failed read returns nothing, and is a finding
            tally.failed(f"{phase}:{route}", response.status_code, response.text)
            continue
        if route == "recall":
            answer = response.json()
            hits = [(h["id"], h["source_message_ids"], h.get("scope")) for h in answer["hits"]]
            tally.rows.setdefault(f"{phase}:recall", Counter())["timed_out"] += answer["timed_out"]
        elif route == "memory_search":
            hits = [(h["id"], h["source_message_ids"], h.get("scope")) for h in response.json()]
        else:
            # an L0 message says no scope in the answer: judged by the visibility its turn was sent with alone
            found = [h["message"]["id"] for h in response.json()]
            hits = [(m, [m], fleet.truth(user, [m])) for m in found]
        tally.add(f"{phase}:{route}", agent, user, hits, ms)


async def drill_downs(
    client: httpx.AsyncClient, fleet: Fleet, tally: Tally, files: LocalFileStore, probes: int, rng: random.Random
) -> None:
    """Each agent drills into atoms of its users it may not see (404 expected) and may see (200, and only messages
    it may read)."""
    c = tally.rows.setdefault("after_writes:drill_down", Counter())
    atoms: dict[str, list[tuple[str, str]]] = {}
    for user in fleet.users:
        atoms[user] = [
            (r.id, truth)
            for r in RecordLog(files, FLEET, user).read()
            if (truth := fleet.truth(user, list(r.source_message_ids), r.id)) is not None
        ]

    async def one(agent: str) -> None:
        key, visible = {"Authorization": f"Bearer k-{agent}"}, fleet.viewer(agent).scopes()
        mine = [(u, a, s) for u in fleet.serves[agent] for a, s in atoms[u]]
        hidden = [x for x in mine if x[2] not in visible]
        shown = [x for x in mine if x[2] in visible]
        for user, atom, scope in rng.sample(hidden, min(probes, len(hidden))) + rng.sample(
            shown, min(probes, len(shown))
        ):
            response, ms = await call(client, "GET", f"/v1/users/{user}/atoms/{atom}", key)
            tally.ms.setdefault("after_writes:drill_down", []).append(ms)
            c["requests"] += 1
            if scope not in visible:
                c["probes_of_unseeable_atoms"] += 1
                if response.status_code != 404:
                    c["leaks"] += 1
                    tally.leaked.append({"route": "drill_down", "agent": agent, "user": user, "id": atom})
                continue
            c["probes_of_visible_atoms"] += 1
            if response.status_code != 200:
                c["visible_atom_not_found"] += 1
                continue
            c["hits"] += 1
            c[f"with_{kind(scope)}"] += 1
            for m in response.json()["messages"]:
                if fleet.truth(user, [m["id"]]) not in visible:
                    c["leaks"] += 1
                    tally.leaked.append({"route": "drill_down message", "agent": agent, "user": user, "id": m["id"]})

    await asyncio.gather(*(one(a) for a in fleet.team))


class Unfiltered(Recaller):
    """The control: a recaller that drops the viewer, as a route forgetting the scope filter would. The same fleet
    over it must show leaks, or the leak count of the real run would prove nothing."""

    def hits(
        self,
        tenant: str,
        user: str,
        query: str,
        vector: Sequence[float] | None = None,
        config: RecallConfig | None = None,
        k: int | None = None,
        now: datetime | None = None,
        viewer: Viewer | None = None,
    ) -> list[Hit]:
        return super().hits(tenant, user, query, vector, config, k, now, None)

    def conversation_search(
        self,
        tenant: str,
        user: str,
        query: str,
        limit: int = 5,
        session: str | None = None,
        viewer: Viewer | None = None,
    ) -> Any:
        return super().conversation_search(tenant, user, query, limit, session, None)

    def drill_down(self, tenant: str, user: str, atom_id: str, viewer: Viewer | None = None) -> Any:
        return super().drill_down(tenant, user, atom_id, None)


async def fleet_run(args: argparse.Namespace, texts: list[str], work: Path, control: bool = False) -> dict[str, Any]:
    rng = random.Random(33)
    fleet = Fleet(args.agents, args.teams, args.users, args.agents_per_user, rng)
    settings = fleet.settings(work / "data")
    embedder = build_embedder(Settings(embedder=args.fleet_embedder))
    writer = open_store(settings, dim=embedder.dim, embedding_model=embedder.model_id)
    reader = open_store(settings, dim=embedder.dim, embedding_model=embedder.model_id)
    files, bus = LocalFileStore(settings.data_dir), ListBus()
    worker = Worker(bus, files, writer, embedder)
    worker.start()
    recaller = (Unfiltered if control else Recaller)(store=reader, embedder=embedder, files=files)
    app = create_api(settings, bus, recaller_factory=lambda: recaller)
    tally = Tally()
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://fleet") as client:
            return await fleet_rounds(args, texts, fleet, client, bus, worker, tally, files)
    finally:
        worker.stop.set()
        await asyncio.to_thread(worker.join)
        writer.close()
        for _ in range(50):  # a recall that timed out may still be searching in its thread
            try:
                reader.close()
                break
            except StorageError:
                await asyncio.sleep(0.1)


async def fleet_rounds(
    args: argparse.Namespace,
    texts: list[str],
    fleet: Fleet,
    client: httpx.AsyncClient,
    bus: ListBus,
    worker: Worker,
    tally: Tally,
    files: LocalFileStore,
) -> dict[str, Any]:
    """Writes and reads at once, the writes applied, reads again, drill-down probes; the figures."""
    write_ms: list[float] = []

    async def every_agent(phase: str, remember_share: float, seed: str) -> None:
        await asyncio.gather(
            *(
                agent_writes_and_reads(
                    client,
                    fleet,
                    tally,
                    a,
                    args.rounds,
                    texts,
                    remember_share,
                    random.Random(f"{a}-{seed}"),
                    phase,
                    write_ms,
                )
                for a in fleet.team
            )
        )

    t0 = time.perf_counter()
    await every_agent("during_writes", args.remember_share, "w")
    writes_s = time.perf_counter() - t0
    while bus.sent and worker.is_alive():  # every write applied before the second round
        await asyncio.sleep(0.05)
    worker.stop.set()
    await asyncio.to_thread(worker.join)
    if worker.error is not None:
        raise worker.error
    operations = fleet.settle(files)
    await every_agent("after_writes", 0.0, "r")
    await drill_downs(client, fleet, tally, files, args.probes, random.Random(5))
    tally.judge(fleet)
    atoms = Counter(
        kind(r.scope) for u in fleet.users for r in RecordLog(files, FLEET, u).read()
    )  # live atoms by the scope the product stored
    routes = {
        route: {**dict(c), "latency_ms": percentiles(tally.ms.get(route, []))}
        for route, c in sorted(tally.rows.items())
    }
    return {
        "agents": args.agents,
        "teams": args.teams,
        "users": args.users,
        "agents_per_user": args.agents_per_user,
        "rounds_per_agent": args.rounds,
        "writes": len(write_ms),
        "writes_per_s_accepted": round(len(write_ms) / writes_s, 1),
        "write_latency_ms": percentiles(write_ms),
        "worker": dict(worker.counts),
        "remember_operations": dict(operations),
        "live_atoms_by_scope_kind": dict(atoms),
        "index": "sqlite (mnemoflow.index.factory.open_store; a writer and a reader connection)",
        "embedder": worker.embedder.model_id,
        "routes": routes,
        "leaks": sum(c.get("leaks", 0) for c in tally.rows.values()),
        "leaked": tally.leaked[:20],
        "failed_requests": sum(c.get("failed", 0) for c in tally.rows.values()),
        "failures": dict(tally.errors),
    }


def fleet_table(r: dict[str, Any], control: dict[str, Any] | None) -> Table:
    """One row per phase and read route; the control column: the leaks of the same run with the filter dropped."""
    rows = []
    for route, c in r["routes"].items():
        rows.append(
            [
                route,
                str(c.get("requests", 0) + c.get("failed", 0)),
                str(c.get("failed", 0)),
                str(c.get("requests_with_hits", c.get("hits", 0) if "drill" in route else 0)),
                str(c.get("hits", 0)),
                str(c.get("leaks", 0)),
                str(control["leaks_by_route"].get(route, 0)) if control else "-",
                str(c.get("mislabelled", 0) + c.get("unlabelled", 0)),
                str(c.get("unattributed", 0)),
                *(str(c.get(f"with_{k}", 0)) for k in KINDS),
                str(c.get("latency_ms", {}).get("p50_ms", "")),
            ]
        )
    title = (
        f"Leaks through the API: {r['agents']} agents in {r['teams']} teams, {r['users']} users, "
        f"{r['writes']} writes ({r['live_atoms_by_scope_kind']} live atoms)"
    )
    columns = [
        "phase:route",
        "requests",
        "failed",
        "with hits",
        "hits",
        "leaks",
        "control leaks",
        "scope wrong/missing",
        "unattributed",
        "req. with shared",
        "with team",
        "with agent",
        "p50 ms",
    ]
    return Table(title=title, columns=columns, rows=rows)


# --- 2. scope filter latency --------------------------------------------------------------------------------------


def draw_scope(rng: random.Random, teams: int, agents: int) -> str:
    x = rng.random()
    if x < 0.6:
        return SHARED
    if x < 0.8:
        return f"team:t{rng.randrange(teams)}"
    return f"agent:a{rng.randrange(agents):02d}"


def filter_latency(name: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    corpus = Corpus(args.atoms, args.latency_users, args.dim)
    workdir.mkdir(parents=True, exist_ok=True)
    store = open_backend(name, workdir, args.dim)
    rng = random.Random(17)
    t0 = time.perf_counter()
    for batch in corpus.batches():
        store.upsert([row.model_copy(update={"scope": draw_scope(rng, 5, 50)}) for row in batch])
    ingest_s = time.perf_counter() - t0
    viewers = [Viewer(agent=f"a{j:02d}", team=f"t{j % 5}") for j in range(50)]
    queries = corpus.queries(args.queries + args.warmup)
    unfiltered: list[float] = []
    filtered: list[float] = []
    returned = {"unfiltered": 0, "filtered": 0}
    outside = 0
    for i, (user, text, vec) in enumerate(queries):
        visible = list(rng.choice(viewers).scopes())
        every = functools.partial(store.search, "bench", user, text, vec, args.k)
        seen = functools.partial(store.search, "bench", user, text, vec, args.k, visible=visible)
        if i < args.warmup:
            every()
            hits = seen()
            outside += sum(h.row.scope not in visible for h in hits)
            continue
        pair = [(every, unfiltered), (seen, filtered)]
        for fn, ms in pair if i % 2 else pair[::-1]:  # alternate which goes first
            timed(fn, ms)
        if i < args.warmup + 50:  # check what the filter returns, untimed
            returned["unfiltered"] += len(every())
            hits = seen()
            returned["filtered"] += len(hits)
            outside += sum(h.row.scope not in visible for h in hits)
    store.close()
    a, b = percentiles(unfiltered), percentiles(filtered)
    return {
        "unfiltered": a,
        "filtered": b,
        "p50_ratio": round(b["p50_ms"] / a["p50_ms"], 3),
        "p95_ratio": round(b["p95_ms"] / a["p95_ms"], 3),
        "hits_per_query_first_50": {k: round(v / min(50, args.queries), 2) for k, v in returned.items()},
        "filtered_hits_outside_viewer": outside,
        "ingest_s": round(ingest_s, 1),
        "versions": {p: metadata.version(p) for p in VERSIONS[name]},
    }


def latency_table(args: argparse.Namespace, results: dict[str, Any]) -> Table:
    rows = [
        [
            name,
            str(r["unfiltered"]["p50_ms"]),
            str(r["unfiltered"]["p95_ms"]),
            str(r["filtered"]["p50_ms"]),
            str(r["filtered"]["p95_ms"]),
            f"{r['p50_ratio']:.2f}",
            f"{r['p95_ratio']:.2f}",
            str(r["filtered_hits_outside_viewer"]),
        ]
        for name, r in results.items()
    ]
    title = (
        f"Hybrid search with scope filters against without: {args.atoms:,} atoms, {args.latency_users:,} users, "
        f"k={args.k}, {args.queries} queries (target: p50 ratio ≤ 1.10)"
    )
    columns = [
        "backend",
        "no filter p50 ms",
        "p95",
        "viewer p50 ms",
        "p95",
        "p50 ratio",
        "p95 ratio",
        "hits outside viewer",
    ]
    return Table(title=title, columns=columns, rows=rows)


# --- 3. shared facts across agents --------------------------------------------------------------------------------

HEARS = {1: "a-odd", 0: "a-even"}


def heard_by(turn: dict[str, Any]) -> str:
    return HEARS[turn["session"] % 2]


def replay(
    convs: list[dict[str, Any]], embedder: Embedder, work: Path, agent_of: Callable[[dict[str, Any]], str | None] | None
) -> tuple[Recaller, LocalFileStore, int, float]:
    """locomo_recall's ingest (heuristic L1, each speaker a user, the trigger machine) into a fresh workspace, each
    turn heard by ``agent_of(turn)``: the recaller, the files, the turns and the seconds it took."""
    work.mkdir(parents=True)
    files, store, raw, own = workspace(work, embedder)
    raw.close()
    own.close()
    clock = TurnClock()
    pipeline = heuristic_pipeline(files, store, embedder, clock, dedup=DedupConfig.for_model(embedder.model_id))
    counters = {"turns": 0, "passes": 0, "llm_calls": 0, "model_calls_needed": 0}
    t0 = time.perf_counter()
    for conv in convs:
        asyncio.run(ingest(conv, files, pipeline, clock, counters, agent_of=agent_of))
    return Recaller(store=store, embedder=embedder, files=files), files, counters["turns"], time.perf_counter() - t0


def shared_facts(convs: list[dict[str, Any]], embedder_name: str, work: Path) -> dict[str, Any]:
    embedder = build_embedder(Settings(embedder=embedder_name))
    recaller, files, turns, ingest_s = replay(convs, embedder, work / "split", heard_by)
    unsplit, _, _, unsplit_s = replay(convs, embedder, work / "unsplit", None)
    views: dict[str, tuple[Recaller, Viewer | None]] = {
        "admin (every scope)": (recaller, None),
        "a-odd": (recaller, Viewer(agent="a-odd")),
        "a-even": (recaller, Viewer(agent="a-even")),
        "default agent (shared only)": (recaller, Viewer()),
        "no agents (the same turns ingested unsplit)": (unsplit, None),
    }
    hits: dict[str, list[int]] = {v: [] for v in views}
    split: dict[str, list[int]] = {"heard": [], "not_heard": []}
    split_by_cat: dict[str, dict[str, list[int]]] = {"heard": {}, "not_heard": {}}
    evidence_parity = Counter[str]()
    atoms = Counter[str]()
    for conv in convs:
        session = {t["dia_id"]: t["session"] for t in conv["turns"]}
        users = [uid(conv["sample_id"], s) for s in (conv["speaker_a"], conv["speaker_b"])]
        for u in users:
            atoms.update(kind(r.scope) for r in RecordLog(files, LOCOMO_TENANT, u).read())
        qa = [q for q in conv["qa"] if q["category"] in (1, 2, 3, 4) and any(e in session for e in q["evidence"])]
        vecs = embedder.embed_query([q["question"] for q in qa])
        now = turn_time(conv["turns"][-1])  # when LoCoMo's questions are asked, as in locomo_recall

        def top10(
            question: str,
            vec: list[float],
            view: tuple[Recaller, Viewer | None],
            users: list[str] = users,
            now: datetime = now,
        ) -> list[list[str]]:
            searcher, viewer = view
            cfg = RECIPES["hybrid_rrf"]
            both = [
                h for u in users for h in searcher.hits(LOCOMO_TENANT, u, question, vec, cfg, 10, now, viewer=viewer)
            ]
            both.sort(key=lambda h: -h.score)  # the two per-user RRF lists merged, as locomo_recall does
            return [h.row.source_message_ids for h in both[:10]]

        for q, vec in zip(qa, vecs, strict=True):
            ev = {e for e in q["evidence"] if e in session}
            found = {
                v: int(any(ev & set(src) for src in top10(q["question"], vec, viewer))) for v, viewer in views.items()
            }
            for v, hit in found.items():
                hits[v].append(hit)
            parities = {session[e] % 2 for e in ev}
            if len(parities) != 1:
                evidence_parity["both agents heard part"] += 1
                continue
            heard = HEARS[parities.pop()]
            other = "a-even" if heard == "a-odd" else "a-odd"
            evidence_parity[f"heard by {heard} only"] += 1
            for side, agent in (("heard", heard), ("not_heard", other)):
                split[side].append(found[agent])
                split_by_cat[side].setdefault(str(q["category"]), []).append(found[agent])

    def mean(xs: list[int]) -> float:
        return round(statistics.mean(xs), 4) if xs else 0.0

    return {
        "conversations": [c["sample_id"] for c in convs],
        "turns": turns,
        "embedder": embedder.model_id,
        "engine": "heuristic",
        "questions": len(hits["a-odd"]),
        "hit_definition": "any of the top 10 (both speakers' memories, per-user RRF lists merged by score) cites an "
        "evidence dia_id",
        "recall_at_10": {v: mean(xs) for v, xs in hits.items()},
        "one_agent_heard_the_evidence": {
            "questions": len(split["heard"]),
            "heard": mean(split["heard"]),
            "not_heard": mean(split["not_heard"]),
            "by_category": {
                side: {c: mean(xs) for c, xs in sorted(cats.items())} for side, cats in split_by_cat.items()
            },
        },
        "evidence_sessions": dict(evidence_parity),
        "live_atoms_by_scope_kind": dict(atoms),
        "ingest_and_extract_s": {"split": round(ingest_s, 1), "unsplit": round(unsplit_s, 1)},
    }


def facts_table(r: dict[str, Any]) -> Table:
    one = r["one_agent_heard_the_evidence"]
    rows = [[f"asked as {v}", str(r["questions"]), f"{x:.3f}"] for v, x in r["recall_at_10"].items()]
    rows += [
        ["asked by the agent that heard the evidence", str(one["questions"]), f"{one['heard']:.3f}"],
        ["asked by the agent that did not", str(one["questions"]), f"{one['not_heard']:.3f}"],
    ]
    title = (
        f"Shared facts across agents: LoCoMo dev {', '.join(r['conversations'])}, a-odd hears odd sessions and "
        f"a-even even ones; hybrid R@10, categories 1-4 (target: not heard = heard)"
    )
    return Table(title=title, columns=["asked", "questions", "R@10"], rows=rows)


# --- main ---------------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a small fleet, 10^4 atoms, one conversation")
    ap.add_argument("--parts", default="fleet,latency,facts", help="comma list of fleet,latency,facts")
    ap.add_argument("--agents", type=int, default=50)
    ap.add_argument("--teams", type=int, default=5)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--agents-per-user", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30, help="writes (then as many reads) per agent and phase")
    ap.add_argument("--remember-share", type=float, default=0.3, help="share of writes made by remember, not turns")
    ap.add_argument("--probes", type=int, default=10, help="drill-downs per agent of unseeable and of visible atoms")
    ap.add_argument("--no-control", action="store_true", help="skip the fleet run with the filter removed")
    ap.add_argument("--fleet-embedder", default="hashing", choices=["hashing", "minilm", "e5"])
    ap.add_argument("--atoms", type=int, default=100_000)
    ap.add_argument("--latency-users", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--backends", default="sqlite,milvus", help="comma list of memory,sqlite,milvus,milvus_client")
    ap.add_argument("--conversations", type=int, default=5, help="LoCoMo dev conversations for part 3")
    ap.add_argument("--turns", type=int, help="the first turns of each conversation for part 3 (default: all)")
    ap.add_argument("--embedder", default=Settings().embedder, choices=["e5", "minilm"], help="part 3's embedder")
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--smoke", action="store_true", help="a tiny fleet, 500 atoms, 30 turns of one conversation")
    ap.add_argument("--out", help="default bench/results/agents.json (agents-quick.json with --quick)")
    args = ap.parse_args()
    if args.quick:
        args.agents, args.teams, args.users, args.agents_per_user, args.rounds = 10, 3, 20, 3, 12
        args.atoms, args.latency_users, args.queries, args.conversations = 10_000, 100, 200, 1
    if args.smoke:
        args.agents, args.teams, args.users, args.agents_per_user, args.rounds, args.probes = 4, 2, 4, 2, 3, 2
        args.atoms, args.latency_users, args.queries, args.warmup, args.conversations = 500, 5, 10, 2, 1
        args.turns = args.turns or 30
    parts = set(args.parts.split(","))
    loaders = load_module(Path(args.eval_dir) / "loaders.py", "mnemoflow_eval_loaders")
    convs = loaders.load_locomo(str(Path(args.eval_dir) / "locomo" / "locomo-dev.json"))
    run = Run("agents", "Agents and scopes: leaks through the API, scope filter latency, shared facts across agents")
    result: dict[str, Any] = {}
    tables: list[Table] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="mnemoflow-agents-") as tmp:
        if "fleet" in parts:
            texts = [t["text"] for c in convs for t in c["turns"] if len(t["text"]) >= 20]
            print(f"[fleet] {args.agents} agents, {args.users} users ...", flush=True)
            result["fleet"] = asyncio.run(fleet_run(args, texts, Path(tmp) / "fleet"))
            if not args.no_control:
                print("[fleet] the control: the same fleet with the viewer dropped by the recaller ...", flush=True)
                control = asyncio.run(fleet_run(args, texts, Path(tmp) / "control", control=True))
                result["fleet_control"] = {
                    "what": "the same fleet, seed and writes, over a recaller that drops the viewer (bench/agents.py "
                    "Unfiltered): the leaks the real run would count if the scope filter were missing",
                    "leaks": control["leaks"],
                    "leaks_by_route": {route: c.get("leaks", 0) for route, c in control["routes"].items()},
                    "failed_requests": control["failed_requests"],
                    "failures": control["failures"],
                }
            tables.append(fleet_table(result["fleet"], result.get("fleet_control")))
            f = result["fleet"]
            notes.append(
                f"fleet: writes through the API ({1 - args.remember_share:.0%} turns with the agent's own key, "
                f"{args.remember_share:.0%} remembers with the same key; neither body names the agent), applied by "
                f"an in-process worker (L0 + heuristic L1 per drained batch, no trigger machine; "
                f"operations); reads with each agent's own key. Index {f['index']}; embedder {f['embedder']}. "
                f"{f['writes_per_s_accepted']} writes/s accepted; rate limit raised for the one tenant."
            )
            if f["failed_requests"]:
                notes.append(f"fleet: {f['failed_requests']} reads failed (counted, not retried): {f['failures']}")
            checked = result.get("fleet_control") or {}
            if checked.get("failed_requests"):
                notes.append(f"fleet control: {checked['failed_requests']} reads failed: {checked['failures']}")
            notes.append(
                "fleet: a leak is a hit whose sources were written with a scope the caller may not see; "
                "'scope wrong/missing' compares the scope a recall / memory-search hit reports with that truth "
                "(conversation search returns no scope: its hits are judged by the turn's visibility alone)"
            )
        if "latency" in parts:
            backends = args.backends.split(",")
            results = {}
            for name in backends:
                print(f"[latency] {name}: {args.atoms} atoms over {args.latency_users} users ...", flush=True)
                results[name] = filter_latency(name, args, Path(tmp) / f"lat-{name}")
            result["latency"] = {
                "atoms": args.atoms,
                "users": args.latency_users,
                "scopes": "60% shared, 20% team:<one of 5>, 20% agent:<one of 50>",
                "viewer": "a random agent a<j> of team t<j % 5>: shared + its team + itself",
                "k": args.k,
                "queries": args.queries,
                "results": results,
            }
            tables.append(latency_table(args, results))
        if "facts" in parts:
            chosen = [{**c, "turns": c["turns"][: args.turns]} for c in convs[: args.conversations]]
            print(f"[facts] {len(chosen)} conversations, embedder {args.embedder} ...", flush=True)
            result["facts"] = shared_facts(chosen, args.embedder, Path(tmp) / "facts")
            tables.append(facts_table(result["facts"]))
            r = result["facts"]
            notes.append(
                f"facts: {r['turns']} turns, live atoms by scope {r['live_atoms_by_scope_kind']}, evidence "
                f"{r['evidence_sessions']}; engine heuristic, embedder {r['embedder']}"
            )
            if set(r["live_atoms_by_scope_kind"]) == {"shared"}:
                notes.append(
                    "facts: every atom is shared (the heuristic engine's scope decision for these turns: facts said by "
                    "the user; the other speaker's lines are named, so not taken as the agent's own answers), so "
                    "heard = not heard follows from the scope decision; what this part measures is that splitting a "
                    "user over agents hides no shared fact, and the cost of per-author windows against the unsplit "
                    "ingest"
                )
    run.finish(tables, result, result_path("agents", args.out, smoke=args.smoke, quick=args.quick), notes=notes)
    leaks = result.get("fleet", {}).get("leaks", 0)
    if leaks:
        raise SystemExit(f"{leaks} leaks: see 'leaked' in the result file")


if __name__ == "__main__":
    main()
