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
outputs whose ref holds the original bytes), canvas validity (saved canvases that parse, ours and the official
Mermaid parser), and what the canvases keep:

* ``identifier_retention`` per strategy: for each tool output the prompt no longer holds verbatim, the identifiers
  it introduced (:mod:`mnemoflow.offload.identifiers`: paths, test ids, dotted symbols, error types and lines; in
  no earlier message, its own call included) that the agent's next message uses (text or tool-call arguments),
  and the share of those the prompt that message answered still shows, anywhere in its text;
* ``failed_calls_blocked``: of the calls the tool itself reported failed (:func:`reported_failure`: a non-zero
  exit code, or an ``ERROR:`` reply from a tool without exit codes), the share on a ``blocked`` node;
* ``tool_call_coverage``: of the calls compaction saw inside a long task, the share on exactly one canvas node.

Writes ``bench/results/offload.json`` (``offload-quick.json`` with ``--quick``).
Usage: ``python bench/offload.py [--quick] [--per-session 10]``; ``--smoke --out PATH`` runs in seconds (the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.evalsets import trajectories  # noqa: E402
from bench.prefix import shared_prefix  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.offload.boundary import canvas_for_seq  # noqa: E402
from mnemoflow.offload.canvas import from_mermaid, validate_mermaid
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadWriter, read_entries, read_ref
from mnemoflow.offload.identifiers import extract
from mnemoflow.offload.messages import ToolPair, last_user, system_prefix, units
from mnemoflow.offload.session import compact_session
from mnemoflow.offload.session_state import load_state
from mnemoflow.offload.summarize import heuristic_summary
from mnemoflow.storage import Layout, LocalFileStore
from mnemoflow.testing import ManualClock
from mnemoflow.tokens import message_tokens

ROOT = Path(__file__).resolve().parents[1]
SETS = {"openhands": "openhands_swebench_verified", "tau_bench": "tau_bench_airline"}
WINDOWS = {"32k": 32_000, "128k": 128_000}
KEEP_LAST = 10
_BAD = re.compile(r"[^A-Za-z0-9_.:@-]")


def load(name: str) -> list[list[dict]]:
    return trajectories(SETS[name])


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
        same, tokens, _ = shared_prefix(self.prev, prompt)
        self.total += tokens
        self.peak = max(self.peak, tokens)
        self.reused += same
        self.prev = prompt


CONFIG = OffloadConfig()
STRATEGIES = ("no_offload", "masking", "summaries", "mnemoflow")
_EXIT_CODE = re.compile(r"exit code (-?\d+)", re.I)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def message_text(m: dict) -> str:
    """What a model reads in a message: its content, and its tool calls' arguments as sent and as decoded strings
    (a path inside a JSON argument is written with escapes the model reads through)."""
    content = m.get("content")
    parts = [content] if isinstance(content, str) else []
    for c in m.get("tool_calls") or ():
        raw = str((c.get("function") or {}).get("arguments", ""))
        parts.append(raw)
        try:
            parts += _strings(json.loads(raw))
        except ValueError:
            pass
    return "\n".join(parts)


def reported_failure(text: str) -> bool:
    """The tool itself says the call failed: a non-zero exit code in its trailing status lines, or, for a tool that
    reports none, a reply that starts with ``ERROR:`` / ``Error:``. Only what the tool reports, not the canvas
    engine's wider reading (tracebacks, test summaries), so the blocked-node figure does not grade the detector by
    its own extra rules; calls those rules add are counted apart (``blocked_other``)."""
    codes = [int(m.group(1)) for line in text.splitlines()[-6:] if (m := _EXIT_CODE.search(line))]
    if codes:
        return codes[-1] != 0
    return text.lstrip().startswith(("ERROR:", "Error:", "error:"))


class Identifiers:
    """The identifiers of one session (:mod:`mnemoflow.offload.identifiers`): per tool output those it introduced
    (in no message before it, its own call included), per assistant message those it uses (text and arguments)."""

    def __init__(self, session: list[dict]) -> None:
        seen: set[str] = set()
        self.introduced: dict[str, dict[str, str]] = {}
        self.used: dict[int, set[str]] = {}
        for k, m in enumerate(session):
            found = {i.text: i.kind for i in extract(message_text(m))}
            if m["role"] == "tool":
                self.introduced[m["tool_call_id"]] = {t: kind for t, kind in found.items() if t not in seen}
            elif m["role"] == "assistant":
                self.used[k] = set(found)
            seen |= found.keys()


_MISSING = object()


def removed_outputs(history: list[dict], prompt: list[dict]) -> list[str]:
    """Tool outputs of ``history`` that ``prompt`` does not hold verbatim (stubbed, masked or dropped)."""
    kept = {m["tool_call_id"]: m.get("content") for m in prompt if m["role"] == "tool"}
    return [
        m["tool_call_id"]
        for m in history
        if m["role"] == "tool" and kept.get(m["tool_call_id"], _MISSING) != m.get("content")
    ]


class Retention:
    """Identifier retention of one strategy: of the identifiers a removed tool output introduced that the agent's
    next message uses, the share the prompt it answered still showed (anywhere: a stub, the canvas, its own notes).
    Each identifier counts once per message that uses it."""

    def __init__(self) -> None:
        self.scored: Counter[str] = Counter()
        self.visible: Counter[str] = Counter()

    def add(self, ids: Identifiers, i: int, history: list[dict], prompt: list[dict]) -> None:
        used = ids.used.get(i)
        if not used:
            return
        wanted: dict[str, str] = {}
        for tid in removed_outputs(history, prompt):
            wanted.update({t: kind for t, kind in ids.introduced[tid].items() if t in used})
        if not wanted:
            return
        text = "\n".join(message_text(m) for m in prompt)
        for ident, kind in wanted.items():
            self.scored[kind] += 1
            self.visible[kind] += ident in text

    def report(self) -> dict[str, int]:
        return {"scored": sum(self.scored.values()), "visible": sum(self.visible.values())} | {
            f"{kind}_{what}": counter[kind]
            for kind in sorted(self.scored)
            for what, counter in (("scored", self.scored), ("visible", self.visible))
        }


def canvas_figures(files: LocalFileStore, tag: str, session: list[dict], seen: set[str]) -> dict[str, int]:
    """Tool-call coverage and blocked nodes, over the calls the replay showed compaction that fell in a long task
    (a short segment has no canvas): each must be on exactly one node of its canvas."""
    state = load_state(files, "bench", tag)
    canvas_dir = f"{Layout.session_dir('bench', tag)}/canvases"
    canvases = {
        n: from_mermaid((files.read_bytes(f"{canvas_dir}/{n}") or b"").decode()) for n in files.list_dir(canvas_dir)
    }
    outputs = {m["tool_call_id"]: m.get("content") or "" for m in session if m["role"] == "tool"}
    out = Counter[str]()
    for entry in read_entries(files, "bench", tag):
        name = canvas_for_seq(state, entry.seq)
        if entry.tool_call_id not in seen or name is None or name not in canvases:
            continue
        nodes = [n for c in canvases.values() for n in c.nodes if entry.tool_call_id in n.tool_call_ids]
        failed = reported_failure(outputs[entry.tool_call_id])
        blocked = len(nodes) == 1 and nodes[0].status == "blocked"
        out["long_calls"] += 1
        out["mapped_once"] += len(nodes) == 1 and canvases[name].node_for_tool_call(entry.tool_call_id) is not None
        out["failed_calls"] += failed
        out["failed_blocked"] += failed and blocked
        out["blocked_other"] += blocked and not failed
    out["nodes"] = sum(len(c.nodes) for c in canvases.values())
    return dict(out)


async def replay(session: list[dict], window: int, tag: str) -> dict[str, object]:
    calls = [i for i, m in enumerate(session) if m["role"] == "assistant" and i > 0]
    calls = [i for i in calls if last_user(session[:i]) is not None]
    summaries = {
        m["tool_call_id"]: heuristic_summary(ToolPair(m["tool_call_id"], "tool", "", m["content"])).summary
        for m in session
        if m["role"] == "tool"
    }
    ids = Identifiers(session)
    meters = {k: Meter() for k in STRATEGIES}
    kept = {k: Retention() for k in STRATEGIES}
    removed_total = removed_ok = 0
    originals = {m["tool_call_id"]: m["content"] for m in session if m["role"] == "tool"}
    with tempfile.TemporaryDirectory() as root:
        files, clock = LocalFileStore(root), ManualClock()
        writer = OffloadWriter(files)
        for i in calls:
            history = session[:i]
            prompts = {
                "no_offload": overflow(history, window),
                "masking": overflow(masked(history, None), window),
                "summaries": overflow(masked(history, summaries), window),
            }
            result = await compact_session(
                files, "bench", tag, history, window, clock=clock, writer=writer, config=CONFIG
            )
            prompts["mnemoflow"] = result.messages
            for name, prompt in prompts.items():
                meters[name].add(prompt)
                kept[name].add(ids, i, history, prompt)
            for r in result.removed:
                removed_total += 1
                removed_ok += read_ref(files, "bench", tag, r.tool_call_id) == originals[r.tool_call_id].encode()
            clock.advance(10)
        canvas_dir = f"{Layout.session_dir('bench', tag)}/canvases"
        names = files.list_dir(canvas_dir)
        texts = [(files.read_bytes(f"{canvas_dir}/{n}") or b"").decode() for n in names]
        valid = sum(not validate_mermaid(t) for t in texts)
        seen = {m["tool_call_id"] for m in session[: calls[-1]] if m["role"] == "tool"} if calls else set()
        figures = canvas_figures(files, tag, session, seen)
    out: dict[str, object] = {
        k: {"cumulative": m.total, "peak": m.peak, "reused": m.reused, "retention": kept[k].report()}
        for k, m in meters.items()
    }
    out.update(
        calls=len(calls),
        removed=removed_total,
        recovered=removed_ok,
        canvases=len(names),
        valid=valid,
        texts=texts,
        canvas_figures=figures,
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


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def merge(results: list[dict]) -> dict[str, object]:
    cum = {k: sum(r[k]["cumulative"] for r in results) for k in STRATEGIES}
    reuse = {k: round(sum(r[k]["reused"] for r in results) / max(cum[k], 1), 4) for k in STRATEGIES}
    removed = sum(r["removed"] for r in results)
    canvases = sum(r["canvases"] for r in results)
    kept = {k: Counter[str]() for k in STRATEGIES}
    for r in results:
        for k in STRATEGIES:
            kept[k].update(r[k]["retention"])
    fig = Counter[str]()
    for r in results:
        fig.update(r["canvas_figures"])
    return {
        "cumulative_prompt_tokens": cum,
        "peak_context": {k: max(r[k]["peak"] for r in results) for k in STRATEGIES},
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
        "identifier_retention": {k: _share(kept[k]["visible"], kept[k]["scored"]) for k in STRATEGIES},
        "identifier_counts": {k: dict(sorted(kept[k].items())) for k in STRATEGIES},
        "tool_call_coverage": _share(fig["mapped_once"], fig["long_calls"]),
        "failed_calls_blocked": _share(fig["failed_blocked"], fig["failed_calls"]),
        "canvas_counts": dict(sorted(fig.items())),
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="5 trajectories per set, one chained session")
    ap.add_argument("--smoke", action="store_true", help="the first trajectory of each set, the 32k window (the tests)")
    ap.add_argument("--per-session", type=int, default=10)
    ap.add_argument("--out", help="default bench/results/offload.json (offload-quick.json with --quick)")
    ap.add_argument("--config", default="{}", help="OffloadConfig overrides as JSON, e.g. '{\"stub_batch\": 4}'")
    ap.add_argument("--spec", action="store_true", help="start from OffloadConfig.spec() (TDAM's ladder only)")
    args = ap.parse_args()
    global CONFIG
    overrides = json.loads(args.config)
    CONFIG = OffloadConfig.spec(**overrides) if args.spec else OffloadConfig(**overrides)
    run = Run("offload", "Offload: prompt tokens an agent pays, on real trajectories, by strategy and window")
    report: dict[str, object] = {
        "quick": args.quick,
        "keep_last": KEEP_LAST,
        "encoding": "o200k_base",
        "config": CONFIG.model_dump(),
    }
    for set_name in SETS:
        trajs = load(set_name)
        per = 1 if args.smoke else 5 if args.quick else args.per_session
        trajs = trajs[:per] if args.smoke or args.quick else trajs
        sessions = [trajs[i : i + per] for i in range(0, len(trajs), per)]
        by_window: dict[str, dict[str, object]] = {}
        for wname, window in list(WINDOWS.items())[: 1 if args.smoke else None]:
            t0 = time.perf_counter()
            chained = merge(
                [await replay(chain(s), window, f"{set_name}-{wname}-c{j}") for j, s in enumerate(sessions)]
            )
            single = merge([await replay(chain([t]), window, f"{set_name}-{wname}-s{j}") for j, t in enumerate(trajs)])
            by_window[wname] = {**chained, "single": single, "seconds": round(time.perf_counter() - t0, 1)}
            print(
                set_name,
                wname,
                json.dumps(chained["cumulative_prompt_tokens"]),
                "single",
                json.dumps(single["cumulative_prompt_tokens"]),
                file=sys.stderr,
            )
        report[set_name] = by_window
    out = result_path("offload", args.out, smoke=args.smoke, quick=args.quick)
    run.finish(tables(report), report, out)


def tables(report: dict[str, Any]) -> list[Table]:
    """The tokens by strategy, and what the canvases and stubs keep, per set and window (chained sessions)."""

    def millions(n: int) -> str:
        return f"{n / 1e6:.1f}M"

    def share(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.3f}"

    tokens, kept = [], []
    for set_name in SETS:
        for wname, r in report[set_name].items():
            cum = r["cumulative_prompt_tokens"]
            reuse = r["prefix_reuse_by_strategy"]
            where = f"{set_name}, {wname}"
            tokens.append(
                [
                    where,
                    *(millions(cum[k]) for k in STRATEGIES),
                    f"{-r['vs_no_offload']:.1%}",
                    f"{-r['vs_masking']:.1%}",
                ]
                + [f"{reuse['mnemoflow']:.2f} / {reuse['no_offload']:.2f}"]
            )
            retention = r["identifier_retention"]
            kept.append(
                [where, share(retention["mnemoflow"]), share(retention["masking"]), share(r["failed_calls_blocked"])]
                + [share(r["tool_call_coverage"]), share(r["canvas_valid_official"]), share(r["recoverability"])]
            )
    return [
        Table(
            title="Cumulative prompt tokens (o200k), chained sessions",
            columns=[
                "set, window",
                *STRATEGIES,
                "mnemoflow vs no offload",
                "vs masking",
                "prefix reuse (mnemoflow / none)",
            ],
            rows=tokens,
        ),
        Table(
            title="What the canvases and stubs keep",
            columns=[
                "set, window",
                "identifier retention (mnemoflow)",
                "(masking)",
                "failed calls on a blocked node",
                "tool calls on one node",
                "canvases valid (official parser)",
                "removed outputs recovered byte-exact",
            ],
            rows=kept,
        ),
    ]


if __name__ == "__main__":
    asyncio.run(main())
