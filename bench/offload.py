"""Offload benchmark: prompt tokens an agent pays, with and without offload, on real trajectories.

Long sessions are built by chaining consecutive trajectories (10 per session; ``--quick``: one session of 5), as
the original measured over many consecutive tasks. Each session is replayed call by call: before every assistant
message, the history so far is the prompt, compacted by each strategy at each window:

* ``no_offload``  full history; oldest units dropped only when the window overflows.
* ``masking``     tool outputs older than the last M=10 replaced by a placeholder, then the same overflow rule.
* ``summaries``   the same, with the heuristic extractive summary instead of the placeholder.
* ``mnemoflow``   :func:`mnemoflow.offload.session.compact_session` (heuristic engine, real files in a tmp dir).

Reported per set and window: cumulative prompt tokens (o200k_base, exact), peak prompt, prefix reuse (share of
prompt tokens that repeat the previous prompt's leading messages, token-weighted), recoverability (removed tool
outputs whose ref holds the original bytes) and canvas validity (saved canvases that parse). Writes
``bench/results/offload.json``. Usage: ``python bench/offload.py [--quick] [--per-session 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from mnemoflow.offload.canvas import validate_mermaid
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadWriter, read_ref
from mnemoflow.offload.messages import ToolPair, last_user, system_prefix, units
from mnemoflow.offload.session import compact_session
from mnemoflow.offload.summarize import heuristic_summary
from mnemoflow.storage import Layout, LocalFileStore
from mnemoflow.testing import ManualClock
from mnemoflow.tokens import message_tokens

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval"  # the evaluation data lies beside the repository
SETS = {"openhands": "trajectories/openhands_swebench_verified", "tau_bench": "trajectories/tau_bench_airline"}
WINDOWS = {"32k": 32_000, "128k": 128_000}
KEEP_LAST = 10
_BAD = re.compile(r"[^A-Za-z0-9_.:@-]")


def load(name: str) -> list[list[dict]]:
    spec = importlib.util.spec_from_file_location("eval_loaders", EVAL / "loaders.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.load_trajectories(str(EVAL / SETS[name]))


def chain(trajs: list[list[dict]]) -> list[dict]:
    """One long session: the first system prompt, then each task's messages; tool ids made unique and safe."""
    out: list[dict] = [m for m in trajs[0] if m["role"] == "system"][:1]
    for k, traj in enumerate(trajs):

        def fix(i: str, k: int = k) -> str:
            return f"t{k}_" + _BAD.sub("_", i)[:100]

        for m in traj:
            if m["role"] == "system":
                continue
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [{**c, "id": fix(c["id"])} for c in m["tool_calls"]]
            if m["role"] == "tool":
                m["tool_call_id"] = fix(m["tool_call_id"])
            out.append(m)
    return out


def overflow(msgs: list[dict], window: int) -> list[dict]:
    """Drop the oldest units after the system prompt until the prompt fits the window, as a model API demands.

    Units before the last user message go first; if that is not enough, the oldest units after it (never the
    last user message itself, never the newest unit), so a baseline prompt never exceeds the window either.
    """
    total = sum(message_tokens(m) for m in msgs)
    if total <= window:
        return msgs
    floor, user = system_prefix(msgs), last_user(msgs)
    keep = set(range(floor)) | ({user} if user is not None else set())
    parts = [u for u in units(msgs) if u.start >= floor]
    dropped: set[int] = set()
    for u in parts[:-1]:
        if total <= window:
            break
        span = set(range(u.start, u.end))
        if span & keep:
            continue
        total -= sum(message_tokens(msgs[i]) for i in span)
        dropped |= span
    return [m for i, m in enumerate(msgs) if i not in dropped]


def masked(msgs: list[dict], summaries: dict[str, str] | None) -> list[dict]:
    tools = [i for i, m in enumerate(msgs) if m["role"] == "tool"]
    old = set(tools[:-KEEP_LAST]) if len(tools) > KEEP_LAST else set()
    out = []
    for i, m in enumerate(msgs):
        if i in old:
            text = summaries[m["tool_call_id"]] if summaries is not None else "[tool output omitted]"
            m = {**m, "content": text}
        out.append(m)
    return out


class Meter:
    def __init__(self) -> None:
        self.total = self.peak = self.reused = 0
        self.prev: list[dict] = []

    def add(self, prompt: list[dict]) -> None:
        tokens = [message_tokens(m) for m in prompt]
        same = 0
        for a, b, t in zip(self.prev, prompt, tokens, strict=False):
            if a != b:
                break
            same += t
        self.total += sum(tokens)
        self.peak = max(self.peak, sum(tokens))
        self.reused += same
        self.prev = prompt


CONFIG = OffloadConfig()


async def replay(session: list[dict], window: int, tag: str) -> dict[str, object]:
    calls = [i for i, m in enumerate(session) if m["role"] == "assistant" and i > 0]
    calls = [i for i in calls if last_user(session[:i]) is not None]
    summaries = {
        m["tool_call_id"]: heuristic_summary(ToolPair(m["tool_call_id"], "tool", "", m["content"])).summary
        for m in session
        if m["role"] == "tool"
    }
    meters = {k: Meter() for k in ("no_offload", "masking", "summaries", "mnemoflow")}
    removed_total = removed_ok = 0
    originals = {m["tool_call_id"]: m["content"] for m in session if m["role"] == "tool"}
    with tempfile.TemporaryDirectory() as root:
        files, clock = LocalFileStore(root), ManualClock()
        writer = OffloadWriter(files)
        for i in calls:
            prompt = session[:i]
            meters["no_offload"].add(overflow(prompt, window))
            meters["masking"].add(overflow(masked(prompt, None), window))
            meters["summaries"].add(overflow(masked(prompt, summaries), window))
            result = await compact_session(
                files, "bench", tag, prompt, window, clock=clock, writer=writer, config=CONFIG
            )
            meters["mnemoflow"].add(result.messages)
            for r in result.removed:
                removed_total += 1
                removed_ok += read_ref(files, "bench", tag, r.tool_call_id) == originals[r.tool_call_id].encode()
            clock.advance(10)
        canvas_dir = f"{Layout.session_dir('bench', tag)}/canvases"
        names = files.list_dir(canvas_dir)
        texts = [(files.read_bytes(f"{canvas_dir}/{n}") or b"").decode() for n in names]
        valid = sum(not validate_mermaid(t) for t in texts)
    out: dict[str, object] = {k: {"cumulative": m.total, "peak": m.peak, "reused": m.reused} for k, m in meters.items()}
    out.update(
        calls=len(calls), removed=removed_total, recovered=removed_ok, canvases=len(names), valid=valid, texts=texts
    )
    return out


def official_validity(texts: list[str]) -> float | None:
    """Share of canvases the official Mermaid parser accepts (None when Node or its packages are missing)."""
    if not texts:
        return 1.0
    sys.path.insert(0, str(ROOT))
    from tests.services import official_mermaid_check

    try:
        results = official_mermaid_check(texts)
    except FileNotFoundError:
        return None
    return round(sum(bool(r["ok"]) for r in results) / len(texts), 4)


def merge(results: list[dict]) -> dict[str, object]:
    keys = ("no_offload", "masking", "summaries", "mnemoflow")
    cum = {k: sum(r[k]["cumulative"] for r in results) for k in keys}
    reuse = {k: round(sum(r[k]["reused"] for r in results) / max(cum[k], 1), 4) for k in keys}
    removed = sum(r["removed"] for r in results)
    canvases = sum(r["canvases"] for r in results)
    return {
        "cumulative_prompt_tokens": cum,
        "peak_context": {k: max(r[k]["peak"] for r in results) for k in keys},
        "prefix_reuse": reuse["mnemoflow"],
        "prefix_reuse_by_strategy": reuse,
        "recoverability": round(sum(r["recovered"] for r in results) / removed, 4) if removed else 1.0,
        "canvas_valid": round(sum(r["valid"] for r in results) / canvases, 4) if canvases else 1.0,
        "canvas_valid_official": official_validity([t for r in results for t in r["texts"]]),
        "model_calls": sum(r["calls"] for r in results),
        "removed_tool_outputs": removed,
        "canvases": canvases,
        "vs_no_offload": round(1 - cum["mnemoflow"] / cum["no_offload"], 4),
        "vs_masking": round(1 - cum["mnemoflow"] / cum["masking"], 4),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="5 trajectories per set, one chained session")
    ap.add_argument("--per-session", type=int, default=10)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "offload.json"))
    ap.add_argument("--config", default="{}", help="OffloadConfig overrides as JSON, e.g. '{\"stub_batch\": 4}'")
    ap.add_argument("--spec", action="store_true", help="start from OffloadConfig.spec() (TDAM's ladder only)")
    args = ap.parse_args()
    global CONFIG
    overrides = json.loads(args.config)
    CONFIG = OffloadConfig.spec(**overrides) if args.spec else OffloadConfig(**overrides)
    report: dict[str, object] = {
        "quick": args.quick,
        "keep_last": KEEP_LAST,
        "encoding": "o200k_base",
        "config": CONFIG.model_dump(),
    }
    for set_name in SETS:
        trajs = load(set_name)
        per = 5 if args.quick else args.per_session
        trajs = trajs[:5] if args.quick else trajs
        sessions = [trajs[i : i + per] for i in range(0, len(trajs), per)]
        report[set_name] = {}
        for wname, window in WINDOWS.items():
            t0 = time.perf_counter()
            chained = [await replay(chain(s), window, f"{set_name}-{wname}-c{j}") for j, s in enumerate(sessions)]
            single = [await replay(chain([t]), window, f"{set_name}-{wname}-s{j}") for j, t in enumerate(trajs)]
            report[set_name][wname] = {
                **merge(chained),
                "single": merge(single),  # type: ignore[index]
                "seconds": round(time.perf_counter() - t0, 1),
            }
            print(
                set_name,
                wname,
                json.dumps(report[set_name][wname]["cumulative_prompt_tokens"]),  # type: ignore[index]
                "single",
                json.dumps(report[set_name][wname]["single"]["cumulative_prompt_tokens"]),
                file=sys.stderr,
            )  # type: ignore[index]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
