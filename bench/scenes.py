"""Quality of the heuristic L2 scene engine (and its templated persona) on LoCoMo, against a chronological baseline.

Input atoms are LoCoMo's gold ``observation`` facts (per speaker, each tied to dia_ids), so this measures L2 alone,
not L1 extraction. Each speaker is a user; each session is one L2 run (windows of 20 atoms). Measured per user:

* ``qa_hit@1`` / ``qa_hit@3`` (categories 1-4): rank the user's scenes by cosine(question, summary + body); a hit
  when a top-k scene absorbed an atom whose dia_id is in the question's evidence. This is what scene navigation is
  for: routing a question to the right scene.
* ``event_recall``: content-word recall of each gold ``event_summary`` event of that speaker in the best single
  scene (is the event inside one coherent scene?) and in all scenes together (did the text keep it at all?).
* ``gold_fact_coverage``: the share of the speaker's gold ``observation`` facts (``facts``) and ``event_summary``
  events (``events``) that the user's readable memory covers, and of both together (``combined``). The readable
  memory is every scene's summary and body plus the persona. A fact is covered when at least
  ``COVERAGE_THRESHOLD`` (half) of its content words (:func:`mnemoflow.memory.salience.content_words`: no stop
  words, no numbers) occur in it. The persona of the chronological baseline is templated from its slices.
* structure: scenes per user (≤ 15), heat, body size, share of absorbed atoms still quoted in a body, persona size.

Baseline ``chronological``: the same number of scenes per user, atoms cut into contiguous time slices, same template.

    python bench/scenes.py --quick            # one conversation, hashing embedder
    python bench/scenes.py --embedder minilm  # all five, MiniLM (onnx, local package)

Writes ``bench/results/scenes.json``. LoCoMo text is read from ../shared/eval at run time and never stored here.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.memory.persona.generate import PersonaContext, PersonaStore, generate_persona, strip_navigation
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.persona.trigger import PersonaState, after_scene_pass
from mnemoflow.memory.salience import content_words
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.model import SceneBlock, SceneInput
from mnemoflow.memory.scenes.passes import run_scene_passes
from mnemoflow.memory.scenes.plan import ScenePolicy
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.memory.scenes.text import Item, parse_items, render_items
from mnemoflow.ports import Embedder
from mnemoflow.storage import LocalFileStore

COVERAGE_THRESHOLD = 0.5
EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"


def load_locomo() -> list[dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("locomo_loaders", EVAL / "loaders.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.load_locomo(str(EVAL / "locomo" / "locomo-dev.json"))


def user_atoms(conv: dict[str, Any], speaker: str) -> tuple[dict[int, list[SceneInput]], dict[str, set[str]]]:
    """Per session, the speaker's observation facts as atoms; and atom id -> dia_ids."""
    stamps = {s["session"]: s["timestamp"] for s in conv["sessions"]}
    by_session: dict[int, list[SceneInput]] = {}
    dia: dict[str, set[str]] = {}
    for key, obs in conv["observation"].items():
        n = int(key.split("_")[1])
        base = datetime.fromisoformat(stamps.get(n) or "2023-01-01T00:00").replace(tzinfo=UTC)
        for k, entry in enumerate(obs.get(speaker, [])):
            text, ids = entry[0], entry[1]
            atom_id = f"s{n}o{k}"
            ids = [ids] if isinstance(ids, str) else list(ids)
            dia[atom_id] = {i.strip() for x in ids for i in str(x).replace(";", ",").split(",") if i.strip()}
            by_session.setdefault(n, []).append(
                SceneInput(id=atom_id, type="episodic", content=text, created_at=base + timedelta(seconds=k))
            )
    return by_session, dia


def _vecs(embedder: Embedder, texts: list[str]) -> list[list[float]]:
    return embedder.embed(texts)


def qa_hits(
    scenes: list[SceneBlock], qs: list[dict[str, Any]], dia: dict[str, set[str]], embedder: Embedder
) -> dict[str, float]:
    if not scenes or not qs:
        return {"hit@1": 0.0, "hit@3": 0.0, "n": 0}
    svecs = _vecs(embedder, [f"{b.summary}\n{b.body}" for b in scenes])
    qvecs = _vecs(embedder, [q["question"] for q in qs])
    h1 = h3 = 0
    for q, qv in zip(qs, qvecs, strict=True):
        ev = set(q["evidence"])
        ranked = sorted(range(len(scenes)), key=lambda i: -sum(a * b for a, b in zip(qv, svecs[i], strict=True)))
        good = [any(dia.get(a, set()) & ev for a in scenes[i].atom_ids) for i in ranked]
        h1 += good[0]
        h3 += any(good[:3])
    return {"hit@1": h1 / len(qs), "hit@3": h3 / len(qs), "n": len(qs)}


def event_recall(scenes: list[SceneBlock], events: list[str]) -> dict[str, float]:
    bodies = [set(content_words(b.body)) for b in scenes]
    union = set().union(*bodies) if bodies else set()
    best, kept = [], []
    for e in events:
        ws = set(content_words(e))
        if not ws:
            continue
        best.append(max((len(ws & b) / len(ws) for b in bodies), default=0.0))
        kept.append(len(ws & union) / len(ws))
    return {
        "best_scene": statistics.fmean(best) if best else 0.0,
        "all_scenes": statistics.fmean(kept) if kept else 0.0,
        "n": len(best),
    }


def gold_coverage(scenes: list[SceneBlock], persona: str, facts: list[str], events: list[str]) -> dict[str, float]:
    """Shares of ``facts`` and ``events`` covered by the scenes plus the persona (see the module docstring)."""
    seen = set(content_words("\n".join([persona, *(f"{b.summary}\n{b.body}" for b in scenes)])))

    def covered(texts: list[str]) -> list[bool]:
        sets = [s for s in (set(content_words(t)) for t in texts) if s]
        return [len(s & seen) / len(s) >= COVERAGE_THRESHOLD for s in sets]

    f, e = covered(facts), covered(events)
    return {
        "facts": statistics.fmean(f) if f else 0.0,
        "events": statistics.fmean(e) if e else 0.0,
        "combined": statistics.fmean(f + e) if f + e else 0.0,
        "n_facts": len(f),
        "n_events": len(e),
    }


def baseline_persona(scenes: list[SceneBlock], atoms: int, now: datetime) -> str:
    ctx = PersonaContext(
        scenes=scenes, changed=scenes, current="", mode="first", reason="bench", total_memories=atoms, now=now
    )
    return HeuristicPersonaEngine().render(ctx)


def chronological(atoms: list[SceneInput], k: int) -> list[SceneBlock]:
    ordered = sorted(atoms, key=lambda a: (a.ts, a.id))
    size = max(1, -(-len(ordered) // max(1, k)))
    out = []
    for i in range(0, len(ordered), size):
        chunk = ordered[i : i + size]
        items = [Item(a.id, a.type, a.event_day, a.content) for a in chunk]
        out.append(SceneBlock(f"slice-{i}.md", "", render_items(items), 1, None, None, tuple(a.id for a in chunk)))
    return out


def run_user(
    conv: dict[str, Any], speaker: str, embedder: Embedder, args: argparse.Namespace, root: Path
) -> dict[str, Any]:
    by_session, dia = user_atoms(conv, speaker)
    files = LocalFileStore(root)
    user = f"{conv['sample_id']}-{speaker}".replace(" ", "_")
    store, persona = SceneStore(files, "bench", user), PersonaStore(files, "bench", user)
    engine = HeuristicSceneEngine(embedder, join_threshold=args.join, cluster_threshold=args.cluster)
    policy = ScenePolicy(max_creates=args.max_creates)
    state, max_live, started = PersonaState(), 0, time.perf_counter()
    for n in sorted(by_session):
        atoms = by_session[n]
        clock_now = atoms[-1].ts + timedelta(minutes=5)
        report = asyncio.run(run_scene_passes(store, engine, atoms, now=lambda c=clock_now: c, policy=policy))
        if report.error:
            raise report.error
        state = after_scene_pass(state, atoms=len(atoms), applied=report.applied, reason=None)
        max_live = max(max_live, len(store.load()))
        state, _ = asyncio.run(generate_persona(persona, store, HeuristicPersonaEngine(), state, now=clock_now))
    seconds = time.perf_counter() - started
    scenes = list(store.load().values())
    all_atoms = [a for v in by_session.values() for a in v]
    owned = {a: dia[a] for a in dia}
    qs = [q for q in conv["qa"] if q["category"] in (1, 2, 3, 4) and any(owned[a] & set(q["evidence"]) for a in owned)]
    events = [e for key, v in conv["event_summary"].items() for e in v.get(speaker, [])]
    baseline = chronological(all_atoms, len(scenes))
    facts = [a.content for a in all_atoms]
    persona_text = strip_navigation(persona.read())
    base_persona = baseline_persona(baseline, len(all_atoms), max(a.ts for a in all_atoms) + timedelta(minutes=5))
    absorbed = [a for b in scenes for a in b.atom_ids]
    visible = {i.id for b in scenes for i in parse_items(b.body)}
    return {
        "user": user,
        "atoms": len(all_atoms),
        "scenes": len(scenes),
        "max_live_scenes": max_live,
        "heat_mean": statistics.fmean(b.heat for b in scenes) if scenes else 0,
        "body_chars_mean": statistics.fmean(len(b.body) for b in scenes) if scenes else 0,
        "atoms_absorbed": len(set(absorbed)) / max(1, len(all_atoms)),
        "atoms_quoted": len(visible) / max(1, len(set(absorbed))),
        "persona_chars": len(persona_text),
        "scene_names": sorted(b.filename for b in scenes),
        "archetype": _archetype(persona_text),
        "heuristic": {
            "qa": qa_hits(scenes, qs, dia, embedder),
            "events": event_recall(scenes, events),
            "coverage": gold_coverage(scenes, persona_text, facts, events),
        },
        "chronological": {
            "qa": qa_hits(baseline, qs, dia, embedder),
            "events": event_recall(baseline, events),
            "coverage": gold_coverage(baseline, base_persona, facts, events),
        },
        "seconds": seconds,
    }


def _archetype(persona: str) -> str:
    return next((line.split(":", 1)[1].strip() for line in persona.splitlines() if "Archetype:" in line), "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="first conversation only")
    ap.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    ap.add_argument("--join", type=float, default=0.45)
    ap.add_argument("--cluster", type=float, default=0.45)
    ap.add_argument("--max-creates", type=int, default=1)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scenes.json"))
    args = ap.parse_args()
    if args.embedder == "minilm":
        from mnemoflow.embedding import MiniLMEmbedder

        embedder: Embedder = MiniLMEmbedder(threads=1)
    else:
        embedder = HashingEmbedder()
    convs = load_locomo()[: 1 if args.quick else None]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for conv in convs:
            for speaker in (conv["speaker_a"], conv["speaker_b"]):
                rows.append(run_user(conv, speaker, embedder, args, Path(tmp)))
                r = rows[-1]
                print(
                    f"{r['user']:<24} scenes {r['scenes']:>2}  hit@1 {r['heuristic']['qa']['hit@1']:.3f}"
                    f" vs chronological {r['chronological']['qa']['hit@1']:.3f}",
                    file=sys.stderr,
                )

    def mean(path: list[str]) -> float:
        vals = []
        for r in rows:
            v: Any = r
            for p in path:
                v = v[p]
            vals.append(v)
        return round(statistics.fmean(vals), 4)

    summary = {
        engine: {
            "qa_hit@1": mean([engine, "qa", "hit@1"]),
            "qa_hit@3": mean([engine, "qa", "hit@3"]),
            "event_recall_best_scene": mean([engine, "events", "best_scene"]),
            "event_recall_all_scenes": mean([engine, "events", "all_scenes"]),
            "gold_fact_coverage": {k: mean([engine, "coverage", k]) for k in ("facts", "events", "combined")},
        }
        for engine in ("heuristic", "chronological")
    }
    result = {
        "bench": "scenes",
        "engine": "heuristic",
        "embedder": embedder.model_id,
        "conversations": len(convs),
        "users": len(rows),
        "params": {"join": args.join, "cluster": args.cluster, "max_creates": args.max_creates},
        "summary": summary,
        "structure": {
            k: mean([k])
            for k in (
                "scenes",
                "max_live_scenes",
                "heat_mean",
                "body_chars_mean",
                "atoms_absorbed",
                "atoms_quoted",
                "persona_chars",
                "seconds",
            )
        },
        "max_live_scenes_any_user": max(r["max_live_scenes"] for r in rows),
        "max_persona_chars_any_user": max(r["persona_chars"] for r in rows),
        "per_user": rows,
        "qa_categories": "1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop (loaders.py mapping)",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    examples = {r["user"]: {"scenes": r["scene_names"], "archetype": r["archetype"]} for r in rows[:2]}
    print(json.dumps({"summary": summary, "structure": result["structure"], "examples": examples}, indent=1))


if __name__ == "__main__":
    main()
