"""Every LLM stage on a local Qwen2.5 model (llama.cpp on the CPU) beside the heuristic engine, on the eval sets.

Issue 28 asks what a user who configures a model gets. Each stage runs twice on the same input, once with the
heuristic engine and once with the model (its grammar-constrained replies validated, one repair try, then that
item's heuristic fallback, as in the service):

* **L1** (extraction with its folded dedup decisions, then the judge): the first ``--turns`` turns of the first
  conversation of LoCoMo dev (English) and of ``bench/data/zh-dialogues.json`` (Chinese), its first speaker's
  memory, through :class:`~mnemoflow.memory.l1.pipeline.L1Pipeline` (hashing embedder, in-memory index). Quality:
  of the evidence turns (LoCoMo ``evidence``, categories 1-4) among those turns, the share an atom cites.
* **L2 scenes and L3 persona**: one curation pass over the atoms that engine's L1 wrote. Reported: scenes written,
  persona length; the texts are printed with ``--show`` (never written: the eval data stays in ../shared/eval).
* **Offload** (boundary judge, summaries, canvas): the first ``--calls`` tool calls of the first OpenHands
  trajectory, compacted once in a 32k window. Quality: entries with a summary, and canvas calls on a node, the
  canvas passing our Mermaid check.

Per stage: model calls, schema-valid at the first try and after the repair, fallbacks, tokens in/out per call, mean
latency and tokens/s; per engine, each stage's wall time.

    python bench/model_engine.py --quick            # the 0.5B, 20 turns a set, 8 calls (~14 min on 2 cores)
    python bench/model_engine.py --model qwen2.5-1.5b

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
from contextlib import nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.locomo_recall import TurnClock, evidence_by_speaker, load_module, speaker_events, uid  # noqa: E402
from bench.offload import chain, load  # noqa: E402
from bench.report import Run, Table  # noqa: E402
from mnemoflow.config import ModelStage, Settings  # noqa: E402
from mnemoflow.embedding import HashingEmbedder  # noqa: E402
from mnemoflow.index import InMemoryVectorStore  # noqa: E402
from mnemoflow.llm.llama_cpp import LlamaCppEngine  # noqa: E402
from mnemoflow.llm.models import MODELS, installed_model  # noqa: E402
from mnemoflow.llm.usage import LLMUsage  # noqa: E402
from mnemoflow.memory.curation import Curator  # noqa: E402
from mnemoflow.memory.l0 import L0Writer  # noqa: E402
from mnemoflow.memory.l1.dedup import LLMDedupJudge  # noqa: E402
from mnemoflow.memory.l1.extract import LLMExtractor  # noqa: E402
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge  # noqa: E402
from mnemoflow.memory.l1.pipeline import L1Pipeline  # noqa: E402
from mnemoflow.memory.l1.records import RecordLog  # noqa: E402
from mnemoflow.memory.persona.generate import PersonaStore  # noqa: E402
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine  # noqa: E402
from mnemoflow.memory.persona.llm import LLMPersonaEngine  # noqa: E402
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine  # noqa: E402
from mnemoflow.memory.scenes.llm import LLMSceneEngine  # noqa: E402
from mnemoflow.memory.scenes.model import render_scene  # noqa: E402
from mnemoflow.memory.scenes.store import SceneStore  # noqa: E402
from mnemoflow.offload.annotations import annotated_entries  # noqa: E402
from mnemoflow.offload.canvas import validate_mermaid  # noqa: E402
from mnemoflow.offload.entries import OffloadWriter  # noqa: E402
from mnemoflow.offload.refine import refine_session  # noqa: E402
from mnemoflow.offload.session import compact_session  # noqa: E402
from mnemoflow.ports import LLM  # noqa: E402
from mnemoflow.prompts import l1_dedup, l1_extraction, offload_boundary, offload_canvas, offload_summary  # noqa: E402
from mnemoflow.prompts import persona as persona_prompt  # noqa: E402
from mnemoflow.prompts import scenes as scenes_prompt  # noqa: E402
from mnemoflow.storage import Layout, LocalFileStore  # noqa: E402
from mnemoflow.testing import ManualClock  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
TENANT = "bench"
ENGINES = ("heuristic", "model")
STAGES = (
    "l1-extraction",
    "l1-dedup",
    "l2_scenes",
    "l3_persona",
    "offload_boundary",
    "offload_summary",
    "offload_canvas",
)


def conversation_sets() -> dict[str, dict[str, Any]]:
    loaders = load_module(EVAL / "loaders.py", "mnemoflow_eval_loaders")
    return {
        "locomo-dev (en)": loaders.load_locomo(str(EVAL / "locomo" / "locomo-dev.json"))[0],
        "zh-dialogues (zh)": loaders.load_locomo(str(ROOT / "bench" / "data" / "zh-dialogues.json"))[0],
    }


def seed(files: LocalFileStore, conv: dict[str, Any], turns: int) -> tuple[str, list[str], TurnClock]:
    """The first ``turns`` turns in the first speaker's memory; returns the user, its evidence turns among them,
    and a clock at the last turn."""
    name, evidence = next(iter(evidence_by_speaker(conv).items()))
    user = uid(conv["sample_id"], name)
    kept = conv["turns"][:turns]
    events = speaker_events(TENANT, user, name, kept)
    L0Writer(files).write(events)
    ids = {t["dia_id"] for t in kept}
    clock = TurnClock()
    clock.t = max(e.ts for e in events)
    return user, [e for e in evidence if e in ids], clock


async def memory_stages(conv: dict[str, Any], turns: int, llm: LLM | None, show: bool) -> dict[str, Any]:
    """L1 then one curation pass (scenes, persona) for one engine (``llm`` None: the heuristic one)."""
    with tempfile.TemporaryDirectory(prefix="mnemoflow-model-") as tmp:
        files = LocalFileStore(Path(tmp))
        user, evidence, clock = seed(files, conv, turns)
        embedder = HashingEmbedder()
        store = InMemoryVectorStore(dim=embedder.dim, embedding_model=embedder.model_id)
        extractor = LLMExtractor(llm, fallback=HeuristicExtractor()) if llm else HeuristicExtractor()
        judge = LLMDedupJudge(llm, fallback=HeuristicJudge()) if llm else HeuristicJudge()
        pipeline = L1Pipeline(
            files=files, store=store, embedder=embedder, extractor=extractor, judge=judge, clock=clock
        )
        started = time.perf_counter()
        await pipeline.run(TENANT, user)
        l1_s = time.perf_counter() - started
        records = RecordLog(files, TENANT, user).read()
        cited = {i for r in records for i in r.source_message_ids}
        heuristic_scenes = HeuristicSceneEngine(embedder)
        scenes = LLMSceneEngine(llm, fallback=heuristic_scenes) if llm else heuristic_scenes
        persona = LLMPersonaEngine(llm, fallback=HeuristicPersonaEngine()) if llm else HeuristicPersonaEngine()
        curator = Curator(files, ManualClock(clock.now()), scenes, persona)
        started = time.perf_counter()
        outcome = await curator.run_now(TENANT, user)
        curation_s = time.perf_counter() - started
        blocks = SceneStore(files, TENANT, user).load()
        persona_text = PersonaStore(files, TENANT, user).read_body() or ""
        if show:
            print(f"\n--- {'model' if llm else 'heuristic'}: {len(records)} atoms")
            for r in records:
                print(f"  [{r.type} {r.priority}] {r.content}  <- {','.join(r.source_message_ids)}")
            for name, block in blocks.items():
                print(f"\n### scene {name}\n{render_scene(block)}")
            print(f"\n### persona ({outcome.persona})\n{persona_text}")
    return {
        "turns": turns,
        "atoms": len(records),
        "evidence_turns": len(evidence),
        "evidence_cited": sum(e in cited for e in evidence),
        "l1_seconds": round(l1_s, 1),
        "scenes": len([b for b in blocks.values() if not b.deleted]),
        "persona_chars": len(persona_text),
        "curation_status": outcome.status,
        "curation_seconds": round(curation_s, 1),
    }


OFFLOAD_STAGES: frozenset[ModelStage] = frozenset({"boundary", "summaries", "canvas"})


async def offload_stages(calls: int, llm: LLM | None, show: bool) -> dict[str, Any]:
    session = chain(load("openhands")[:1])
    tool_ids = [m["tool_call_id"] for m in session if m["role"] == "tool"][:calls]
    end = next(i for i, m in enumerate(session) if m["role"] == "tool" and m["tool_call_id"] == tool_ids[-1]) + 1
    history = session[:end]
    with tempfile.TemporaryDirectory(prefix="mnemoflow-model-") as tmp:
        files = LocalFileStore(Path(tmp))
        clock = ManualClock()
        started = time.perf_counter()
        await compact_session(
            files, TENANT, "s", history, 32_000, clock=clock, writer=OffloadWriter(files), judge_later=llm is not None
        )
        seconds = time.perf_counter() - started  # the agent's wait: heuristics only, whatever the engine
        refine_s = 0.0
        if llm is not None:  # what a session shard does after the turn, in the background
            started = time.perf_counter()
            report = await refine_session(files, TENANT, "s", llm, OFFLOAD_STAGES, clock=clock, locked=nullcontext)
            refine_s = time.perf_counter() - started
        entries = annotated_entries(files, TENANT, "s")
        canvas_dir = f"{Layout.session_dir(TENANT, 's')}/canvases"
        texts = [(files.read_bytes(f"{canvas_dir}/{n}") or b"").decode() for n in files.list_dir(canvas_dir)]
        if show:
            print(f"\n--- offload, {'model' if llm else 'heuristic'}")
            for e in entries:
                print(f"  {e.tool_call_id} node={e.node_id} :: {e.summary}")
            for text in texts:
                print(text)
    return {
        "tool_calls": len(tool_ids),
        "entries": len(entries),
        "with_summary": sum(bool(e.summary) for e in entries),
        "on_a_node": sum(bool(e.node_id) for e in entries),
        "canvases": len(texts),
        "canvases_valid": sum(not validate_mermaid(t) for t in texts),
        "compaction_seconds": round(seconds, 3),
        "refine_seconds": round(refine_s, 1),
        "refined": {} if llm is None else {f"{st}/{o}": n for (st, o), n in sorted(report.counts.items())},
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


def stage_rows(engine: str, usage: LLMUsage | None) -> list[list[str]]:
    """Schema-valid at the first try is a call with no repair (one repair at most, so calls less retries); after
    the repair, the calls that validated. Tokens/s are completion tokens over the calls' whole latency (prefill
    included)."""
    rows = []
    for stage in STAGES:
        t = usage.stage(stage) if usage is not None else None
        if t is None or not t.calls:
            rows.append([stage, engine, "0", "-", "-", "-", "-", "-", "-"])
            continue
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
                f"{t.completion_tokens / t.latency_s:.1f}" if t.latency_s else "-",
            ]
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b", choices=sorted(MODELS))
    ap.add_argument("--quick", action="store_true", help="20 turns a set, 8 tool calls")
    ap.add_argument("--turns", type=int, default=None, help="turns of each conversation (default 60; quick 20)")
    ap.add_argument("--calls", type=int, default=None, help="tool calls of the trajectory (default 24; quick 8)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="llama.cpp threads (default: every core)")
    ap.add_argument("--show", action="store_true", help="print the atoms, scenes, persona and canvases")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    turns = args.turns or (20 if args.quick else 60)
    calls = args.calls or (8 if args.quick else 24)
    settings = Settings()
    path = installed_model(args.model, settings.models_dir)
    run = Run("model_engine", f"Every LLM stage on {args.model} (llama.cpp, CPU) beside the heuristic engine")
    usage = LLMUsage()
    model = LlamaCppEngine(path, n_ctx=8192, threads=args.threads, usage=usage)
    result: dict[str, Any] = {"model": args.model, "prompts": prompt_versions(), "memory": {}, "offload": {}}
    for set_name, conv in conversation_sets().items():
        result["memory"][set_name] = {
            engine: asyncio.run(memory_stages(conv, turns, model if engine == "model" else None, args.show))
            for engine in ENGINES
        }
    result["offload"] = {
        engine: asyncio.run(offload_stages(calls, model if engine == "model" else None, args.show))
        for engine in ENGINES
    }
    result["stages"] = {name: dataclasses.asdict(t) for name, t in usage.stages().items()}
    memory_rows = [
        [
            set_name,
            engine,
            str(r["atoms"]),
            f"{r['evidence_cited']} / {r['evidence_turns']}",
            str(r["l1_seconds"]),
            str(r["scenes"]),
            str(r["persona_chars"]),
            str(r["curation_seconds"]),
        ]
        for set_name, by_engine in result["memory"].items()
        for engine, r in by_engine.items()
    ]
    offload_rows = [
        [
            engine,
            str(r["entries"]),
            str(r["with_summary"]),
            str(r["on_a_node"]),
            f"{r['canvases_valid']} / {r['canvases']}",
            f"{r['compaction_seconds'] * 1000:.1f}",
            str(r["refine_seconds"]),
        ]
        for engine, r in result["offload"].items()
    ]
    tables = [
        Table(
            title=f"Memory layers on {turns} turns (first speaker's memory)",
            columns=["set", "engine", "atoms", "evidence cited", "L1 s", "scenes", "persona chars", "L2+L3 s"],
            rows=memory_rows,
        ),
        Table(
            title=f"Offload on the first {calls} tool calls of an OpenHands trajectory (one compaction, 32k; the "
            "model refines in the background after it)",
            columns=["engine", "entries", "with a summary", "on a node", "valid canvases", "compaction ms", "refine s"],
            rows=offload_rows,
        ),
        Table(
            title=f"Model calls per stage ({args.model}; fallbacks: items the heuristic did after an invalid reply)",
            columns=[
                "stage",
                "engine",
                "calls",
                "valid 1st try",
                "valid after repair",
                "fallbacks",
                "tokens in / out per call",
                "mean s",
                "tokens/s",
            ],
            rows=stage_rows("model", usage),
        ),
    ]
    suffix = f"{args.model}{'-quick' if args.quick else ''}"
    notes = [
        "evidence cited: the LoCoMo evidence turns (questions of categories 1-4) among these turns that some atom "
        "lists as a source. The heuristic engine writes an atom for nearly every user turn (the turn's own text), so "
        "it cites nearly every turn by construction; read the atoms with --show for what each engine wrote.",
        "Prompts: " + ", ".join(f"{k} {v}" for k, v in result["prompts"].items()) + ".",
    ]
    run.finish(tables, result, ROOT / "bench" / "results" / f"model_engine-{suffix}.json", notes=notes)


if __name__ == "__main__":
    main()
