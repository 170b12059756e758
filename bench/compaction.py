"""Compaction benchmark: what a session shard's compaction costs on the proxy's request path, without Ray.

The proxy's stage table (``bench/proxy.py``) shows compaction inside the session's shard as the critical path of a
tool step and of an agent-loop step. This benchmark calls :meth:`actors.shard.SessionShard.compact` in-process,
as the proxy drives it through Ray, on real files (a temporary folder, fsync on, as the shard runs):

* ``first``: the first 20 messages of a tau-bench airline run (ending on a user message) as a session's first
  request: nothing of it is offloaded yet (the proxy captures a request's messages after its answer);
* ``repeat``: the same array again, after the stream worker stored its tool results and told the shard
  (:class:`~mnemoflow.offload.entries.OffloadWriter` then :meth:`SessionShard.sync`, as the worker does): an agent's
  next tool step as the proxy bench sends it;
* ``agent_step``: OpenHands runs replayed as agent loops, each assistant step a request carrying the history so
  far, the tool results of the earlier steps stored and synced in between (what the worker did meanwhile).

The budget of each call is what the proxy gives a compaction: the window less the answer's reserve (``max_tokens``
64 for the 20-message requests, 512 for the agent steps) less the room kept for recall (``proxy_recall_reserve``,
at most half the prompt). Reported per kind: p50 / p99 of the wall time of the call and of its CPU time (the
thread's, which a busy machine inflates less), and, from a second pass under cProfile, the share of the calls'
time per phase of the turn and the functions that spend it. ``--digest PATH`` writes, per call, the sha256 of the
reply and of the session's folder (every file, byte for byte): two versions of the code that write equal digests
compact alike (the clock is fixed for that).

Writes ``bench/results/compaction.json`` (``compaction-quick.json`` with ``--quick``).
Usage: ``python bench/compaction.py [--quick]``; ``--smoke --out PATH``: 2 requests, 1 run of 6 steps (the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import hashlib
import json
import pstats
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.shard import SessionShard  # noqa: E402
from bench.evalsets import trajectories, twenty_message_requests  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from bench.stages import pct  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402
from mnemoflow.offload.entries import OffloadWriter  # noqa: E402
from mnemoflow.offload.replies import CompactReply  # noqa: E402
from mnemoflow.offload.session import tool_result_events  # noqa: E402
from mnemoflow.storage import Layout, LocalFileStore  # noqa: E402
from mnemoflow.testing import ManualClock  # noqa: E402

TENANT = "bench"
TS = datetime(2026, 1, 1, tzinfo=UTC)
"""Every stored result's time and the shard's clock: fixed, so that two runs write the same bytes."""
KINDS = {"first": "first request (20 messages)", "repeat": "same array again", "agent_step": "agent-loop step"}
PHASES = [
    ("offload/session_state.py", "load_state", "state.json read and parsed"),
    ("offload/annotations.py", "annotated_entries", "offload log and annotations read"),
    ("offload/session.py", "_judge", "L1.5 boundary judge (heuristic)"),
    ("offload/session.py", "_summarise", "summaries of new entries (heuristic)"),
    ("offload/canvas_update.py", "update_canvases", "canvas update (heuristic)"),
    ("offload/session.py", "_context", "canvases read for the context"),
    ("offload/compact.py", "compact", "reclaim ladder and canvas injection (pure)"),
    ("offload/session_state.py", "save_state", "state.json written"),
    ("mnemoflow/tokens.py", "message_tokens", "token counts (o200k), wherever counted"),
    ("storage/local.py", "write_atomic_many", "atomic writes, fsync included"),
    ("storage/local.py", "append_lines", "appends, fsync included"),
    ("~", "<built-in method posix.fsync>", "fsync, wherever called"),
]
"""Functions (file, name) whose cumulative time in the profile is a phase of a turn (the last four cut across the
others; a built-in's file is ``~``)."""


def budget(window: int, max_tokens: int) -> int:
    """The tokens the proxy asks compaction for: the prompt's budget less the room kept for a first recall."""
    settings = Settings()
    prompt = int((window - max_tokens) / settings.proxy_tokens_per_o200k)
    return prompt - min(settings.proxy_recall_reserve, prompt // 2)


def folder_digest(root: Path) -> str:
    """sha256 over every file of ``root`` (path and bytes, in path order)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class Replay:
    """One shard over one data folder, replaying requests as the proxy sends them; times every compaction."""

    def __init__(self, data: Path, digest: bool, profile: cProfile.Profile | None = None) -> None:
        self.data, self.digest, self.profile = data, digest, profile
        self.shard = SessionShard(0, str(data), 600.0, 100)
        self.shard._clock = ManualClock(TS)  # type: ignore[assignment]  # the files' times, fixed
        self.writer = OffloadWriter(LocalFileStore(data))
        self.wall: dict[str, list[float]] = {k: [] for k in KINDS}
        self.cpu: dict[str, list[float]] = {k: [] for k in KINDS}
        self.digests: list[dict[str, str]] = []
        self.levels: dict[str, dict[str, int]] = {k: {} for k in KINDS}

    async def compact(self, kind: str, session: str, messages: list[dict[str, Any]], window: int) -> None:
        wall, cpu = time.perf_counter(), time.thread_time()
        if self.profile is not None:
            self.profile.enable()
        reply = await self.shard.compact(TENANT, session, messages, window)
        if self.profile is not None:
            self.profile.disable()
        self.cpu[kind].append((time.thread_time() - cpu) * 1000)
        self.wall[kind].append((time.perf_counter() - wall) * 1000)
        assert isinstance(reply, CompactReply), reply
        self.levels[kind][reply.level] = self.levels[kind].get(reply.level, 0) + 1
        if self.digest:
            body = reply.model_dump_json(exclude={"shard_ms"}).encode()
            folder = self.data / Layout.session_dir(TENANT, session)
            self.digests.append(
                {
                    "kind": kind,
                    "session": session,
                    "reply": hashlib.sha256(body).hexdigest(),
                    "files": folder_digest(folder),
                }
            )

    async def capture(self, session: str, messages: list[dict[str, Any]]) -> None:
        """What the stream worker does with the request's captured tool results: store them, tell the shard."""
        appended = self.writer.write(tool_result_events(TENANT, session, messages, TS))
        updates = [(a.tenant, a.session, [e.model_dump_json() for e in a.new_entries], a.last_seq) for a in appended]
        if updates:
            await self.shard.sync(updates)

    async def requests(self, requests: list[list[dict[str, Any]]], window: int) -> None:
        for k, messages in enumerate(requests):
            session = f"tau-{k}"
            await self.compact("first", session, messages, window)
            await self.capture(session, messages)
            await self.compact("repeat", session, messages, window)

    async def loops(self, trajs: list[list[dict[str, Any]]], window: int, steps: int | None) -> None:
        for k, traj in enumerate(trajs):
            session = f"loop-{k}"
            for i in [i for i, m in enumerate(traj) if m["role"] == "assistant"][:steps]:
                await self.compact("agent_step", session, traj[:i], window)
                await self.capture(session, traj[:i])


def replay(
    requests: list[list[dict[str, Any]]],
    trajs: list[list[dict[str, Any]]],
    windows: tuple[int, int],
    steps: int | None,
    digest: bool = False,
    profile: cProfile.Profile | None = None,
) -> Replay:
    data = Path(tempfile.mkdtemp(prefix="mnemoflow-bench-compaction-"))
    try:
        run = Replay(data, digest, profile)

        async def go() -> None:
            await run.requests(requests, windows[0])
            await run.loops(trajs, windows[1], steps)

        asyncio.run(go())
        return run
    finally:
        shutil.rmtree(data, ignore_errors=True)


def phases(profile: cProfile.Profile, total_s: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The phases' cumulative seconds (:data:`PHASES`, summed over every function of that name) and the 15
    functions with the most own time, each as a share of ``total_s`` (the profiled calls' time)."""
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out = []
    for where, name, what in PHASES:
        seconds = sum(v[3] for (file, _line, fn), v in stats.items() if fn == name and file.endswith(where))
        out.append({"phase": name, "what": what, "seconds": round(seconds, 4), "share": round(seconds / total_s, 4)})
    own = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:15]
    top = [
        {
            "function": f"{_short(file)}:{line}({fn})",
            "calls": v[1],
            "own_s": round(v[2], 4),
            "own_share": round(v[2] / total_s, 4),
            "cumulative_share": round(v[3] / total_s, 4),
        }
        for (file, line, fn), v in own
    ]
    return out, top


def _short(file: str) -> str:
    for marker in ("/mnemoflow/", "/actors/", "/site-packages/", "/lib/python"):
        if marker in file:
            return file[file.index(marker) + 1 :]
    return file


def figures(values: list[float]) -> dict[str, float]:
    return {"p50": round(pct(values, 0.5), 2), "p99": round(pct(values, 0.99), 2), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 requests, 3 OpenHands runs")
    parser.add_argument("--smoke", action="store_true", help="2 requests, 1 run of 6 steps (the tests)")
    parser.add_argument("--window", type=int, default=32_000, help="the agent loops' context window")
    parser.add_argument("--request-window", type=int, default=8192, help="the 20-message requests' window")
    parser.add_argument("--digest", help="also write every call's reply and folder sha256 to this JSON file")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile pass")
    parser.add_argument("--out", help="default bench/results/compaction.json (compaction-quick.json with --quick)")
    args = parser.parse_args()
    n_requests, n_trajs, steps = (2, 1, 6) if args.smoke else (10, 3, None) if args.quick else (20, 10, None)
    run = Run("compaction", "Compaction in the session shard, as the proxy drives it (no Ray)")
    requests = twenty_message_requests(n_requests + 3)[3:]  # the proxy bench's warm-up takes the first 3
    trajs = trajectories("openhands_swebench_verified")[:n_trajs]
    windows = (budget(args.request_window, 64), budget(args.window, 512))
    replay(requests[:1], trajs[:1], windows, 3)  # warm-up: the tokenizer, imports, caches of the code
    timed = replay(requests, trajs, windows, steps, digest=bool(args.digest))
    if args.digest:
        Path(args.digest).write_text(json.dumps(timed.digests, indent=0))
    result: dict[str, Any] = {
        "windows": {"request": args.request_window, "agent": args.window},
        "budgets": {"request": windows[0], "agent": windows[1]},
        "requests": len(requests),
        "trajectories": len(trajs),
        "wall_ms": {k: figures(v) for k, v in timed.wall.items()},
        "cpu_ms": {k: figures(v) for k, v in timed.cpu.items()},
        "levels": timed.levels,
        "quick": args.quick,
        "smoke": args.smoke,
    }
    rows = [
        [
            KINDS[k],
            str(len(timed.wall[k])),
            f"{result['wall_ms'][k]['p50']:.1f} / {result['wall_ms'][k]['p99']:.1f}",
            f"{result['cpu_ms'][k]['p50']:.1f} / {result['cpu_ms'][k]['p99']:.1f}",
            ", ".join(f"{level} {n}" for level, n in sorted(timed.levels[k].items())),
        ]
        for k in KINDS
    ]
    tables = [
        Table(
            title=f"SessionShard.compact per call ({len(requests)} requests, {len(trajs)} OpenHands runs at "
            f"{args.window:,} tokens)",
            columns=["kind", "calls", "wall p50 / p99 ms", "CPU p50 / p99 ms", "levels"],
            rows=rows,
        )
    ]
    if not args.no_profile:
        profile = cProfile.Profile()
        profiled = replay(requests, trajs, windows, steps, profile=profile)
        total = sum(sum(v) for v in profiled.wall.values()) / 1000
        by_phase, top = phases(profile, total)
        result["profile"] = {"seconds": round(total, 3), "phases": by_phase, "top_own_time": top}
        tables.append(
            Table(
                title="Share of the calls' time per phase (cProfile, every kind together)",
                columns=["phase", "what", "share"],
                rows=[[p["phase"], p["what"], f"{p['share']:.1%}"] for p in by_phase],
            )
        )
        tables.append(
            Table(
                title="Functions with the most own time (cProfile)",
                columns=["function", "calls", "own", "cumulative"],
                rows=[
                    [t["function"], str(t["calls"]), f"{t['own_share']:.1%}", f"{t['cumulative_share']:.1%}"]
                    for t in top
                ],
            )
        )
    notes = [
        f"budgets: {windows[0]} tokens for the 20-message requests (a {args.request_window}-token window), "
        f"{windows[1]} for the agent steps (a {args.window}-token window): the window less the answer's reserve "
        "less proxy_recall_reserve (at most half the prompt)",
        "wall and CPU time of SessionShard.compact (the thread's CPU time: the machine's load inflates it less); "
        "the profile is a second pass, whose calls cProfile slows down: read its shares, not its seconds",
    ]
    out = result_path("compaction", args.out, smoke=args.smoke, quick=args.quick)
    run.finish(tables, result, out, notes=notes)


if __name__ == "__main__":
    main()
