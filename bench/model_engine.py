"""Every LLM stage on a local Qwen2.5 model (llama.cpp on the CPU) beside the heuristic engine, on the eval sets.

Issue 28 asks what a user who configures a model gets. Each stage runs twice on the same input, once with the
heuristic engine and once with the model (its grammar-constrained replies validated, one repair try, then that
item's heuristic fallback, as in the service). Development data only:

* **L1** (extraction with its folded dedup decisions, then the judge): the first ``--turns`` turns of the first
  conversations (``--conversations``) of LoCoMo dev (English) and of ``bench/data/zh-dialogues.json`` (Chinese),
  the first speaker's memory, through :class:`~mnemoflow.memory.l1.pipeline.L1Pipeline` (hashing embedder, SQLite
  index, as ``bench/locomo_recall.py`` opens it). Quality, on the sample's questions (categories 1-4, every
  evidence turn among the sample's turns, one of them said by the memory's user):

  - *R@10*: :func:`bench.locomo_recall.evaluate` over the atoms (hybrid recall, a hit when a top-10 atom cites an
    evidence turn); beside it the same recall over the sample's raw turns (``recall_raw``) and the source turns per
    returned atom (an atom citing many turns hits more easily). A memory of at most 10 atoms returns all of them,
    so there R@10 is only whether some atom cites the evidence: the atom count is printed beside it.
  - *evidence cited*: of the evidence turns among those turns (LoCoMo ``evidence``), the share an atom cites.
  - *observations*: coverage of LoCoMo's gold ``observation`` facts of the first speaker whose turns all lie in
    the sample, by the atoms' text (:func:`bench.scenes.gold_coverage`: half a fact's content words present). The
    Chinese set has no observations: n/a.
  - *model-s / 100 turns*: the L1 stages' model seconds (extraction and judge calls) per 100 turns of the sample.

* **L2 scenes and L3 persona**: one curation pass over the atoms that engine's L1 wrote; ``gold_fact_coverage``
  of the scenes plus persona as ``bench/scenes.py --atoms l1`` measures it (the observations above; on the Chinese
  set the speaker's own turns of the sample, as there). The texts are printed with ``--show`` (never written: the
  eval data stays in ../shared/eval).

* **Offload** (boundary judge, summaries, canvas) on the first ``--calls`` tool calls of each of the first
  ``--trajectories`` OpenHands trajectories, a session each, in a 32k window: a compaction before every assistant
  message (the agent's wait, heuristics only whatever the engine; timed, p50 and p99 over all of them); with the
  model, :func:`~mnemoflow.offload.refine.refine_session` runs once after the last compaction (a session shard
  refines after every turn; one pass here keeps the model calls few) and is timed apart. Canvases:
  ``bench/offload.py``'s :func:`~bench.offload.canvas_figures` (tool calls of a long task on exactly one node,
  calls the tool reported failed on a ``blocked`` node, nodes) and :func:`~bench.offload.official_validity` (the
  npm Mermaid parser; n/a without Node).

Per stage: model calls, schema-valid at the first try and after the repair, fallbacks, tokens in/out per call,
latency mean, p50 and p99 (nearest rank over the calls, :func:`bench.proxy.pct`; with a few calls p99 is the
slowest) and tokens/s; per engine, each stage's wall time.

    python bench/model_engine.py --quick            # the 0.5B: 10 turns, 1 conversation a set, 1 trajectory, 8 calls
    python bench/model_engine.py --model qwen2.5-1.5b   # 60 turns, 2 conversations a set, 5 trajectories, 24 calls

``--smoke --out PATH`` runs the heuristic engine alone on 10 turns and 4 tool calls, no model loaded: seconds, that
the benchmark runs (the tests); the model's side is what ``--quick`` measures.

``--quick`` takes 409-459 s with the 0.5B and 657-708 s with the 1.5B on 2 cores with little else running
(2026-12-06, load under 2.3; the model's L1, persona and canvas calls are most of it). Earlier versions of the
prompts took over 22 minutes: the model spelled out every message id of its window on every memory and ran canvas
and summary replies to their token limits.

Writes ``bench/results/model_engine-<model>.json`` (``-quick`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo_recall import (  # noqa: E402
    TurnClock,
    evaluate,
    evidence_by_speaker,
    load_module,
    raw_rows,
    speaker_events,
    uid,
    workspace,
)
from bench.offload import canvas_figures, chain, load, official_validity  # noqa: E402
from bench.proxy import pct  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from bench.scenes import gold_coverage, user_atoms  # noqa: E402
from mnemoflow.config import ModelStage, Settings  # noqa: E402
from mnemoflow.embedding import HashingEmbedder  # noqa: E402
from mnemoflow.llm.llama_cpp import LlamaCppEngine  # noqa: E402
from mnemoflow.llm.models import MODELS, installed_model  # noqa: E402
from mnemoflow.llm.usage import CallRecord, LLMUsage  # noqa: E402
from mnemoflow.memory.curation import Curator  # noqa: E402
from mnemoflow.memory.l0 import L0Writer  # noqa: E402
from mnemoflow.memory.l1.dedup import LLMDedupJudge  # noqa: E402
from mnemoflow.memory.l1.extract import LLMExtractor  # noqa: E402
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge  # noqa: E402
from mnemoflow.memory.l1.pipeline import L1Pipeline  # noqa: E402
from mnemoflow.memory.l1.records import RecordLog  # noqa: E402
from mnemoflow.memory.links import strip_comments  # noqa: E402
from mnemoflow.memory.persona.generate import PersonaStore, strip_navigation  # noqa: E402
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine  # noqa: E402
from mnemoflow.memory.persona.llm import LLMPersonaEngine  # noqa: E402
from mnemoflow.memory.recall.recaller import Recaller  # noqa: E402
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine  # noqa: E402
from mnemoflow.memory.scenes.llm import LLMSceneEngine  # noqa: E402
from mnemoflow.memory.scenes.model import render_scene  # noqa: E402
from mnemoflow.memory.scenes.store import SceneStore  # noqa: E402
from mnemoflow.offload.annotations import annotated_entries  # noqa: E402
from mnemoflow.offload.canvas import validate_mermaid  # noqa: E402
from mnemoflow.offload.entries import OffloadWriter  # noqa: E402
from mnemoflow.offload.messages import last_user  # noqa: E402
from mnemoflow.offload.refine import refine_session  # noqa: E402
from mnemoflow.offload.session import compact_session  # noqa: E402
from mnemoflow.ports import LLM  # noqa: E402
from mnemoflow.prompts import l1_dedup, l1_extraction, offload_boundary, offload_canvas, offload_summary  # noqa: E402
from mnemoflow.prompts import persona as persona_prompt  # noqa: E402
from mnemoflow.prompts import scenes as scenes_prompt  # noqa: E402
from mnemoflow.storage import Layout, LocalFileStore  # noqa: E402
from mnemoflow.testing import ManualClock  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
TENANT = "locomo"  # bench/locomo_recall.py's: its evaluate() searches this tenant
OFFLOAD_TENANT = "bench"  # bench/offload.py's: its canvas_figures() reads this tenant
ENGINES = ("heuristic", "model")
L1_STAGES = ("l1-extraction", "l1-dedup")
STAGES = (
    *L1_STAGES,
    "l2_scenes",
    "l3_persona",
    "offload_boundary",
    "offload_summary",
    "offload_canvas",
)


def conversation_sets(per_set: int) -> dict[str, dict[str, Any]]:
    """The first ``per_set`` conversations of LoCoMo dev and of our Chinese set, by a readable name."""
    loaders = load_module(EVAL / "loaders.py", "mnemoflow_eval_loaders")
    sets = {
        "locomo-dev": ("en", loaders.load_locomo(str(EVAL / "locomo" / "locomo-dev.json"))),
        "zh-dialogues": ("zh", loaders.load_locomo(str(ROOT / "bench" / "data" / "zh-dialogues.json"))),
    }
    return {f"{name} {c['sample_id']} ({lang})": c for name, (lang, convs) in sets.items() for c in convs[:per_set]}


def sample(conv: dict[str, Any], turns: int) -> dict[str, Any]:
    """The conversation cut to its first ``turns`` turns, with only the questions (categories 1-4) whose evidence
    turns all lie in them, one at least said by the first speaker (whose memory is measured)."""
    kept = conv["turns"][:turns]
    speaker = {t["dia_id"]: t["speaker"] for t in kept}
    qa = [
        q
        for q in conv["qa"]
        if q["category"] in (1, 2, 3, 4)
        and q["evidence"]
        and all(e in speaker for e in q["evidence"])
        and any(speaker[e] == conv["speaker_a"] for e in q["evidence"])
    ]
    return {**conv, "turns": kept, "qa": qa}


def sample_facts(conv: dict[str, Any], name: str) -> list[str]:
    """``name``'s gold observations (LoCoMo) whose turns all lie in the sample (empty for a set without them)."""
    ids = {t["dia_id"] for t in conv["turns"]}
    by_session, dia = user_atoms(conv, name)
    return [a.content for atoms in by_session.values() for a in atoms if dia[a.id] and dia[a.id] <= ids]


def seed(files: LocalFileStore, conv: dict[str, Any]) -> tuple[str, list[str], TurnClock]:
    """The sample's turns in the first speaker's memory; returns the user, its evidence turns among them, and a
    clock at the last turn."""
    name, evidence = next(iter(evidence_by_speaker(conv).items()))
    user = uid(conv["sample_id"], name)
    events = speaker_events(TENANT, user, name, conv["turns"])
    L0Writer(files).write(events)
    ids = {t["dia_id"] for t in conv["turns"]}
    clock = TurnClock()
    clock.t = max(e.ts for e in events)
    return user, [e for e in evidence if e in ids], clock


def stage_seconds(records: list[CallRecord], stages: tuple[str, ...]) -> float:
    return sum(r.latency_s for r in records if r.stage in stages)


def share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


async def memory_stages(
    conv: dict[str, Any], llm: LLM | None, usage: LLMUsage, show: bool, work: Path
) -> dict[str, Any]:
    """L1, its recall, then one curation pass (scenes, persona) for one engine (``llm`` None: the heuristic one)."""
    work.mkdir(parents=True)
    embedder = HashingEmbedder()
    files, store, raw, own = workspace(work, embedder)
    user, evidence, clock = seed(files, conv)
    extractor = LLMExtractor(llm, fallback=HeuristicExtractor()) if llm else HeuristicExtractor()
    judge = LLMDedupJudge(llm, fallback=HeuristicJudge()) if llm else HeuristicJudge()
    pipeline = L1Pipeline(files=files, store=store, embedder=embedder, extractor=extractor, judge=judge, clock=clock)
    calls_before = len(usage.records())
    started = time.perf_counter()
    await pipeline.run(TENANT, user)
    l1_s = time.perf_counter() - started
    l1_records = usage.records()[calls_before:]
    records = RecordLog(files, TENANT, user).read()
    cited = {i for r in records for i in r.source_message_ids}
    recall = None
    if conv["qa"]:
        rows, mine = raw_rows(conv, embedder)
        raw.upsert(rows)
        own.upsert(mine)
        recall = evaluate([conv], Recaller(store=store, embedder=embedder, files=files), raw, own, embedder)
    name = conv["speaker_a"]
    observations = sample_facts(conv, name)
    atoms_text = "\n".join(r.content for r in records)
    heuristic_scenes = HeuristicSceneEngine(embedder)
    scenes = LLMSceneEngine(llm, fallback=heuristic_scenes) if llm else heuristic_scenes
    persona = LLMPersonaEngine(llm, fallback=HeuristicPersonaEngine()) if llm else HeuristicPersonaEngine()
    curator = Curator(files, ManualClock(clock.now()), scenes, persona)
    started = time.perf_counter()
    outcome = await curator.run_now(TENANT, user)
    curation_s = time.perf_counter() - started
    blocks = [b for b in SceneStore(files, TENANT, user).load().values() if not b.deleted]
    persona_text = strip_comments(strip_navigation(PersonaStore(files, TENANT, user).read()))
    own_turns = [t["text"] for t in conv["turns"] if t["speaker"] == name]
    for store_ in (store, raw, own):
        store_.close()
    if show:
        print(f"\n--- {conv['sample_id']}, {'model' if llm else 'heuristic'}: {len(records)} atoms")
        for r in records:
            print(f"  [{r.type} {r.priority}] {r.content}  <- {','.join(r.source_message_ids)}")
        for block in blocks:
            print(f"\n### scene {block.filename}\n{render_scene(block)}")
        print(f"\n### persona ({outcome.persona})\n{persona_text}")
    return {
        "turns": len(conv["turns"]),
        "atoms": len(records),
        "evidence_turns": len(evidence),
        "evidence_cited": sum(e in cited for e in evidence),
        "questions": len(conv["qa"]),
        "recall_at_10": None if recall is None else recall["recall_at_10"]["hybrid"],
        "recall_at_5": None if recall is None else recall["recall_at_5"]["hybrid"],
        "recall_at_10_raw_turns": None if recall is None else recall["recall_at_10"]["recall_raw"],
        "source_turns_per_atom": None if recall is None else recall["source_turns_per_atom"]["hybrid"],
        "observations": len(observations),
        "observation_coverage": gold_coverage([], atoms_text, observations, [])["facts"],
        "l1_seconds": round(l1_s, 1),
        "l1_model_calls": len(l1_records),
        "l1_model_seconds_per_100_turns": round(100 * stage_seconds(l1_records, L1_STAGES) / len(conv["turns"]), 1),
        "scenes": len(blocks),
        "persona_chars": len(persona_text),
        "gold_facts": "observations" if observations else "own turns",
        "gold_fact_coverage": gold_coverage(blocks, persona_text, observations or own_turns, [])["facts"],
        "curation_status": outcome.status,
        "curation_seconds": round(curation_s, 1),
    }


OFFLOAD_STAGES: frozenset[ModelStage] = frozenset({"boundary", "summaries", "canvas"})


def compaction_points(session: list[dict[str, Any]], calls: int) -> list[int]:
    """Where the agent's prompt is compacted, up to the ``calls``-th tool result: before every assistant message
    that answers a user (as ``bench/offload.py`` replays), and after that last result."""
    tool_ids = [m["tool_call_id"] for m in session if m["role"] == "tool"][:calls]
    end = next(i for i, m in enumerate(session) if m["role"] == "tool" and m["tool_call_id"] == tool_ids[-1]) + 1
    points = [i for i in range(1, end) if session[i]["role"] == "assistant" and last_user(session[:i]) is not None]
    return [*points, end]


async def offload_stages(
    trajectory: list[dict[str, Any]], tag: str, calls: int, llm: LLM | None, show: bool
) -> dict[str, Any]:
    """One trajectory as one session: a compaction at every point, then (model) one background refine pass."""
    session = chain([trajectory])
    points = compaction_points(session, calls)
    with tempfile.TemporaryDirectory(prefix="mnemoflow-model-") as tmp:
        files = LocalFileStore(Path(tmp))
        clock, writer = ManualClock(), OffloadWriter(files)
        compaction_ms = []
        for i in points:
            started = time.perf_counter()
            await compact_session(
                files, OFFLOAD_TENANT, tag, session[:i], 32_000, clock=clock, writer=writer, judge_later=bool(llm)
            )
            compaction_ms.append((time.perf_counter() - started) * 1000)
            clock.advance(10)
        refine_s, refined = 0.0, {}
        if llm is not None:  # what a session shard does after the turn, in the background
            started = time.perf_counter()
            report = await refine_session(
                files, OFFLOAD_TENANT, tag, llm, OFFLOAD_STAGES, clock=clock, locked=nullcontext
            )
            refine_s = time.perf_counter() - started
            refined = {f"{st}/{o}": n for (st, o), n in sorted(report.counts.items())}
        entries = annotated_entries(files, OFFLOAD_TENANT, tag)
        canvas_dir = f"{Layout.session_dir(OFFLOAD_TENANT, tag)}/canvases"
        texts = [(files.read_bytes(f"{canvas_dir}/{n}") or b"").decode() for n in files.list_dir(canvas_dir)]
        seen = {m["tool_call_id"] for m in session[: points[-1]] if m["role"] == "tool"}
        figures = canvas_figures(files, tag, session, seen)
        if show:
            print(f"\n--- offload {tag}, {'model' if llm else 'heuristic'}")
            for e in entries:
                print(f"  {e.tool_call_id} node={e.node_id} :: {e.summary}")
            for text in texts:
                print(text)
    return {
        "tool_calls": len(seen),
        "compactions": len(points),
        "compaction_ms": [round(ms, 2) for ms in compaction_ms],
        "entries": len(entries),
        "with_summary": sum(bool(e.summary) for e in entries),
        "on_a_node": sum(bool(e.node_id) for e in entries),
        "canvases": len(texts),
        "canvases_valid": sum(not validate_mermaid(t) for t in texts),
        "canvas_texts": texts,
        "canvas_figures": figures,
        "refine_seconds": round(refine_s, 1),
        "refined": refined,
    }


def offload_totals(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One engine's figures over the trajectories (the canvases' texts checked by the official parser once)."""
    fig: Counter[str] = Counter()
    for r in runs:
        fig.update(r["canvas_figures"])
    texts = [t for r in runs for t in r.pop("canvas_texts")]
    ms = [m for r in runs for m in r["compaction_ms"]]
    canvases = sum(r["canvases"] for r in runs)

    def ratio(part: int, whole: int) -> float | None:
        return round(part / whole, 4) if whole else None

    return {
        "trajectories": len(runs),
        "tool_calls": sum(r["tool_calls"] for r in runs),
        "entries": sum(r["entries"] for r in runs),
        "with_summary": sum(r["with_summary"] for r in runs),
        "compactions": len(ms),
        "compaction_p50_ms": round(pct(ms, 0.5), 2),
        "compaction_p99_ms": round(pct(ms, 0.99), 2),
        "canvases": canvases,
        "canvases_valid_ours": sum(r["canvases_valid"] for r in runs),
        "canvas_valid_official": official_validity(texts) if texts else None,
        "tool_call_coverage": ratio(fig["mapped_once"], fig["long_calls"]),
        "nodes_per_task": ratio(fig["nodes"], canvases),
        "failed_calls_blocked": ratio(fig["failed_blocked"], fig["failed_calls"]),
        "canvas_counts": dict(sorted(fig.items())),
        "refine_seconds": round(sum(r["refine_seconds"] for r in runs), 1),
        "per_trajectory": runs,
    }


def prompt_versions() -> dict[str, str]:
    """Each stage's prompt version, so a figure says which prompt produced it."""
    modules = (
        l1_dedup,
        l1_extraction,
        offload_boundary,
        offload_canvas,
        offload_summary,
        persona_prompt,
        scenes_prompt,
    )
    return {m.__name__.rsplit(".", 1)[-1]: m.VERSION for m in modules}


def latencies(usage: LLMUsage) -> dict[str, dict[str, float]]:
    """Per stage, the p50 and p99 of the calls' latency (nearest rank over the usage's recent records)."""
    by_stage: dict[str, list[float]] = {}
    for r in usage.records():
        by_stage.setdefault(r.stage, []).append(r.latency_s)
    return {
        stage: {"p50_s": round(pct(v, 0.5), 2), "p99_s": round(pct(v, 0.99), 2), "calls": len(v)}
        for stage, v in sorted(by_stage.items())
    }


def stage_rows(engine: str, usage: LLMUsage) -> list[list[str]]:
    """Schema-valid at the first try is a call with no repair (one repair at most, so calls less retries); after
    the repair, the calls that validated. Tokens/s are completion tokens over the calls' whole latency (prefill
    included)."""
    rows = []
    quantiles = latencies(usage)
    for stage in STAGES:
        t = usage.stage(stage)
        if not t.calls:
            rows.append([stage, engine, "0", "-", "-", str(t.fallbacks or "-"), "-", "-", "-", "-", "-"])
            continue
        q = quantiles[stage]
        rows.append(
            [
                stage,
                engine,
                str(t.calls),
                f"{t.calls - t.retries} / {t.calls}",
                f"{t.ok} / {t.calls}",
                str(t.fallbacks),
                f"{t.prompt_tokens / t.calls:.0f} / {t.completion_tokens / t.calls:.0f}",
                f"{t.latency_s / t.calls:.1f}",
                f"{q['p50_s']:.1f}",
                f"{q['p99_s']:.1f}",
                f"{t.completion_tokens / t.latency_s:.1f}" if t.latency_s else "-",
            ]
        )
    return rows


def memory_tables(result: dict[str, Any], turns: int) -> list[Table]:
    l1_rows, l23_rows = [], []
    for set_name, by_engine in result["memory"].items():
        for engine, r in by_engine.items():
            recall = (
                "n/a (no question)"
                if r["recall_at_10"] is None
                else f"{r['recall_at_10']:.3f} (raw turns {r['recall_at_10_raw_turns']:.3f})"
            )
            sources = "-" if r["source_turns_per_atom"] is None else f"{r['source_turns_per_atom']:.1f}"
            l1_rows.append(
                [
                    set_name,
                    engine,
                    str(r["atoms"]),
                    str(r["questions"]),
                    recall,
                    sources,
                    f"{r['evidence_cited']} / {r['evidence_turns']}",
                    "n/a" if not r["observations"] else f"{share(r['observation_coverage'])} of {r['observations']}",
                    str(r["l1_seconds"]),
                    str(r["l1_model_seconds_per_100_turns"]),
                ]
            )
            l23_rows.append(
                [
                    set_name,
                    engine,
                    str(r["scenes"]),
                    str(r["persona_chars"]),
                    f"{share(r['gold_fact_coverage'])} ({r['gold_facts']})",
                    str(r["curation_seconds"]),
                ]
            )
    return [
        Table(
            title=f"L1 on the first {turns} turns (first speaker's memory)",
            columns=[
                "conversation",
                "engine",
                "atoms",
                "questions",
                "R@10 atoms (raw turns)",
                "turns cited per atom returned",
                "evidence cited",
                "observations covered",
                "L1 s",
                "model-s / 100 turns",
            ],
            rows=l1_rows,
        ),
        Table(
            title="Scenes and persona from that engine's atoms (one curation pass)",
            columns=["conversation", "engine", "scenes", "persona chars", "gold_fact_coverage", "L2+L3 s"],
            rows=l23_rows,
        ),
    ]


def offload_table(result: dict[str, Any], calls: int) -> Table:
    rows = [
        [
            engine,
            str(r["trajectories"]),
            f"{r['with_summary']} / {r['entries']}",
            share(r["tool_call_coverage"]),
            share(r["canvas_valid_official"]),
            f"{r['canvases_valid_ours']} / {r['canvases']}",
            share(r["nodes_per_task"]),
            share(r["failed_calls_blocked"]),
            f"{r['compaction_p50_ms']:.1f} / {r['compaction_p99_ms']:.1f} ({r['compactions']})",
            str(r["refine_seconds"]),
        ]
        for engine, r in result["offload"].items()
    ]
    return Table(
        title=f"Offload on the first {calls} tool calls of OpenHands trajectories (32k; the model refines in the "
        "background after the compactions)",
        columns=[
            "engine",
            "trajectories",
            "with a summary",
            "tool calls on one node",
            "canvases valid (official)",
            "(ours)",
            "nodes per task",
            "failed calls blocked",
            "compaction p50 / p99 ms (n)",
            "refine s",
        ],
        rows=rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(MODELS))
    ap.add_argument("--quick", action="store_true", help="10 turns of 1 conversation a set, 8 calls of 1 trajectory")
    ap.add_argument("--turns", type=int, default=None, help="turns of each conversation (default 60; quick 10)")
    ap.add_argument("--conversations", type=int, default=None, help="conversations a set (default 2; quick 1)")
    ap.add_argument("--calls", type=int, default=None, help="tool calls of each trajectory (default 24; quick 8)")
    ap.add_argument("--trajectories", type=int, default=None, help="OpenHands trajectories (default 5; quick 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="llama.cpp threads (default: every core)")
    ap.add_argument("--show", action="store_true", help="print the atoms, scenes, persona and canvases")
    ap.add_argument("--smoke", action="store_true", help="the heuristic engine alone, 10 turns, 4 calls (the tests)")
    ap.add_argument("--out", help="default bench/results/model_engine-<model>[-quick].json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    short = args.quick or args.smoke
    turns = args.turns or (10 if short else 60)
    per_set = args.conversations or (1 if short else 2)
    calls = args.calls or (4 if args.smoke else 8 if args.quick else 24)
    n_traj = args.trajectories or (1 if short else 5)
    engines = ENGINES[:1] if args.smoke else ENGINES  # the smoke run loads no model: its calls take minutes
    usage = LLMUsage(keep=100_000)  # every call: L1's model seconds are read from the records of its calls
    model = None
    if "model" in engines:
        path = installed_model(args.model, Settings().models_dir)
        model = LlamaCppEngine(path, n_ctx=8192, threads=args.threads, usage=usage)
    title = "the heuristic engine alone (--smoke)" if args.smoke else f"{args.model} (llama.cpp, CPU)"
    run = Run("model_engine", f"Every LLM stage on {title} beside the heuristic engine")
    result: dict[str, Any] = {
        "model": args.model if model is not None else None,
        "engines": list(engines),
        "prompts": prompt_versions(),
        "sample": {"turns": turns, "conversations_per_set": per_set, "tool_calls": calls, "trajectories": n_traj},
        "memory": {},
        "offload": {},
    }
    with tempfile.TemporaryDirectory(prefix="mnemoflow-model-") as tmp:
        for k, (set_name, conv) in enumerate(conversation_sets(per_set).items()):
            cut = sample(conv, turns)
            result["memory"][set_name] = {
                engine: asyncio.run(
                    memory_stages(
                        cut, model if engine == "model" else None, usage, args.show, Path(tmp) / f"{k}-{engine}"
                    )
                )
                for engine in engines
            }
    trajectories = load("openhands")[:n_traj]
    result["offload"] = {
        engine: offload_totals(
            [
                asyncio.run(offload_stages(t, f"t{j}", calls, model if engine == "model" else None, args.show))
                for j, t in enumerate(trajectories)
            ]
        )
        for engine in engines
    }
    result["stages"] = {name: dataclasses.asdict(t) for name, t in usage.stages().items()}
    result["latency"] = latencies(usage)
    if model is not None:
        heuristic_ms, model_ms = (result["offload"][e]["compaction_p50_ms"] for e in ENGINES)
        result["compaction_p50_difference_ms"] = round(model_ms - heuristic_ms, 2)
    tables = [*memory_tables(result, turns), offload_table(result, calls)]
    if model is not None:  # the smoke run loads none: no model calls to tabulate
        tables.append(
            Table(
                title=f"Model calls per stage ({args.model}; fallbacks: items the heuristic did after an invalid "
                "reply)",
                columns=[
                    "stage",
                    "engine",
                    "calls",
                    "valid 1st try",
                    "valid after repair",
                    "fallbacks",
                    "tokens in / out per call",
                    "mean s",
                    "p50 s",
                    "p99 s",
                    "tokens/s",
                ],
                rows=stage_rows("model", usage),
            )
        )
    notes = [
        "R@10 atoms: bench/locomo_recall.py's evaluate() on the sample's questions (categories 1-4, all evidence in "
        "the sample, one evidence turn said by the memory's user); a hit when a top-10 atom cites an evidence turn. "
        "With at most 10 atoms every atom is returned, so R@10 then only says whether some atom cites the evidence; "
        "and an atom that cites every turn of its window (turns cited per atom returned) hits whatever it says. "
        "Raw turns: the same recall over the sample's turns. Hashing embedder.",
        "evidence cited: the LoCoMo evidence turns (questions of categories 1-4) among these turns that some atom "
        "lists as a source. The heuristic engine writes an atom for nearly every user turn (the turn's own text), so "
        "it cites nearly every turn by construction; read the atoms with --show for what each engine wrote.",
        "observations covered / gold_fact_coverage: bench/scenes.py's gold_coverage (half a fact's content words in "
        "the text): of the first speaker's gold observations whose turns lie in the sample, by the atoms' text, and "
        "by the scenes plus persona; the Chinese set has no observations, so its scenes are scored on the speaker's "
        "own turns, as bench/scenes.py --atoms l1 does.",
        "model-s / 100 turns: the L1 calls' (extraction, judge) model seconds per 100 turns of the sample, with "
        f"--threads {args.threads}.",
        "compaction ms: each compaction call before an assistant message (heuristics only whatever the engine; with "
        "the model configured it also keeps the user message for the model's judge); the model's refine pass runs "
        "after the last one, not concurrently, so the CPU the model would take from a compaction is not measured.",
        "Prompts: " + ", ".join(f"{k} {v}" for k, v in result["prompts"].items()) + ".",
    ]
    name = "model_engine" if args.smoke else f"model_engine-{args.model}"
    out = result_path(name, args.out, smoke=args.smoke, quick=args.quick)
    run.finish(tables, result, out, notes=notes)


if __name__ == "__main__":
    main()
