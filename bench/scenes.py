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

* naming: scene-name words and archetype words that are stop words of the published stopwords-iso lists (English
  and Chinese, the ``stopwordsiso`` package), and names of the other speaker in them; with ``--atoms l1``, persona
  lines of one speaker that quote the other (a run of 8 characters of Chinese or 5 words of English from the other
  speaker's turns that the speaker never said).

Baseline ``chronological``: the same number of scenes per user, atoms cut into contiguous time slices, same template.

``--atoms gold`` (default) feeds LoCoMo's gold observations (L2 alone); ``--atoms l1`` feeds the atoms the heuristic
L1 engine extracts from the raw turns, as the stack does (each speaker a user, the other's turns as context), which
also runs on a set without observations (our Chinese dialogues, ``--data bench/data/zh-dialogues.json``): there the
facts to cover are the speaker's own turns.

    python bench/scenes.py --quick            # one conversation, hashing embedder
    python bench/scenes.py --embedder minilm  # all five, MiniLM (onnx, local package)
    python bench/scenes.py --atoms l1 --data bench/data/zh-dialogues.json

Writes ``bench/results/scenes.json`` (``scenes-l1[-<data>].json`` with ``--atoms l1``; ``-quick`` added with
``--quick``). LoCoMo text is read from
../shared/eval at run time and never stored here.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.embedding import HashingEmbedder  # noqa: E402
from mnemoflow.lexical import words
from mnemoflow.memory.curation import to_scene_input
from mnemoflow.memory.l1.dedup import DedupConfig
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.links import strip_comments
from mnemoflow.memory.persona.generate import (
    PersonaContext,
    PersonaStore,
    generate_persona,
    strip_navigation,
)
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


def load_locomo(data: Path | None = None) -> list[dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("locomo_loaders", EVAL / "loaders.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.load_locomo(str(data or EVAL / "locomo" / "locomo-dev.json"))


def l1_atoms(conv: dict[str, Any], root: Path, embedder: Embedder) -> dict[str, list[L1Record]]:
    """Per speaker, the atoms the heuristic L1 engine extracts from the raw turns (as the stack runs it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.locomo_recall import TENANT, TurnClock, heuristic_pipeline, ingest, uid, workspace

    root.mkdir(parents=True, exist_ok=True)
    files, store, _, _ = workspace(root, embedder)
    clock = TurnClock()
    pipeline = heuristic_pipeline(files, store, embedder, clock, dedup=DedupConfig.for_model(embedder.model_id))
    asyncio.run(
        ingest(conv, files, pipeline, clock, {"turns": 0, "passes": 0, "llm_calls": 0, "model_calls_needed": 0})
    )
    return {
        speaker: RecordLog(files, TENANT, uid(conv["sample_id"], speaker)).read()
        for speaker in (conv["speaker_a"], conv["speaker_b"])
    }


def stop_words() -> frozenset[str]:
    import stopwordsiso  # type: ignore[import-untyped]

    return frozenset(w.lower() for w in stopwordsiso.stopwords(["en", "zh"]))


def name_words(text: str) -> list[str]:
    """The words of a scene name (``oat-milk-chemist.md``) or an archetype line, as a reader splits them."""
    return [w.lower() for w in words(text.removesuffix(".md").replace("-", " ").replace("·", " "))]


def quotes(lines: list[str], other: list[str], own: list[str]) -> list[str]:
    """Lines holding a run of the other speaker's words (8 Chinese characters or 5 English words) that the speaker
    never said themselves."""

    def runs(text: str) -> set[str]:
        toks = words(text)
        out = {" ".join(toks[i : i + 5]).lower() for i in range(len(toks) - 4)} if len(toks) >= 5 else set()
        han = "".join(c for c in text if "\u4e00" <= c <= "\u9fff")
        return out | {han[i : i + 8] for i in range(len(han) - 7)}

    theirs = set().union(*(runs(t) for t in other)) - set().union(*(runs(t) for t in own))
    return [line for line in lines if runs(line) & theirs]


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
        "best_scene": statistics.fmean(best) if best else None,
        "all_scenes": statistics.fmean(kept) if kept else None,
        "n": len(best),
    }


def gold_coverage(
    scenes: list[SceneBlock], persona: str, facts: list[str], events: list[str]
) -> dict[str, float | int | None]:
    """Shares of ``facts`` and ``events`` covered by the scenes plus the persona (see the module docstring); None
    for a kind the user has none of (our Chinese set has facts only)."""
    seen = set(content_words("\n".join([persona, *(f"{b.summary}\n{b.body}" for b in scenes)])))

    def covered(texts: list[str]) -> list[bool]:
        sets = [s for s in (set(content_words(t)) for t in texts) if s]
        return [len(s & seen) / len(s) >= COVERAGE_THRESHOLD for s in sets]

    f, e = covered(facts), covered(events)
    return {
        "facts": statistics.fmean(f) if f else None,
        "events": statistics.fmean(e) if e else None,
        "combined": statistics.fmean(f + e) if f + e else None,
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


def l1_sessions(
    conv: dict[str, Any], records: list[L1Record]
) -> tuple[dict[int, list[SceneInput]], dict[str, set[str]]]:
    """A speaker's L1 atoms by the session of their turns (one L2 run each, as for the gold facts), and atom id ->
    the dia_ids (``D3:7``) of its source turns."""
    session = {t["dia_id"]: t["session"] for t in conv["turns"]}
    by_session: dict[int, list[SceneInput]] = {}
    dia: dict[str, set[str]] = {}
    for record in records:
        dia[record.id] = set(record.source_message_ids)
        n = min(session.get(m, 0) for m in record.source_message_ids)
        by_session.setdefault(n, []).append(to_scene_input(record))
    return by_session, dia


def run_user(
    conv: dict[str, Any],
    speaker: str,
    embedder: Embedder,
    args: argparse.Namespace,
    root: Path,
    given: list[L1Record] | None = None,
) -> dict[str, Any]:
    """One speaker's scenes and persona, measured; ``given``: the speaker's L1 atoms (else the gold facts)."""
    by_session, dia = user_atoms(conv, speaker) if given is None else l1_sessions(conv, given)
    files = LocalFileStore(root)
    user = f"{conv['sample_id']}-{speaker}".replace(" ", "_")
    user = user if user.isascii() else f"{conv['sample_id']}-{hashlib.sha256(speaker.encode()).hexdigest()[:8]}"
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
    events = [e for v in (conv.get("event_summary") or {}).values() for e in v.get(speaker, [])]
    baseline = chronological(all_atoms, len(scenes))
    own = [t["text"] for t in conv["turns"] if t["speaker"] == speaker]
    other = [t["text"] for t in conv["turns"] if t["speaker"] != speaker]
    if given is None:
        facts = [a.content for a in all_atoms]
    else:  # end to end: the gold observations where the set has them, else what the speaker said
        observed = [e[0] for v in (conv.get("observation") or {}).values() for e in v.get(speaker, [])]
        facts = observed or own
    persona_text = strip_comments(strip_navigation(persona.read()))
    stop = stop_words()
    other_names = {n.lower() for n in (conv["speaker_a"], conv["speaker_b"]) if n != speaker}
    name_terms = [w for b in scenes for w in name_words(b.filename)]
    archetype_terms = name_words(_archetype(persona_text))
    persona_lines = [line for line in persona_text.splitlines() if line.startswith("- ")]
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
        "naming": {
            "scene_name_stop_words": sorted({w for w in name_terms if w in stop}),
            "archetype_stop_words": sorted({w for w in archetype_terms if w in stop}),
            "other_speaker_in_names": sorted({w for w in name_terms + archetype_terms if w in other_names}),
            "persona_lines": len(persona_lines),
            "persona_lines_quoting_other": quotes(persona_lines, other, own) if given is not None else None,
        },
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
    """The archetype line's terms (``> Archetype: a · b`` or ``> 画像：a · b``)."""
    line = next((line for line in persona.splitlines() if line.startswith("> ")), "")
    return line.replace("：", ":").split(":", 1)[-1].strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="first conversation only")
    ap.add_argument("--embedder", choices=["hashing", "minilm"], default="hashing")
    ap.add_argument("--join", type=float, default=0.45)
    ap.add_argument("--cluster", type=float, default=0.45)
    ap.add_argument("--max-creates", type=int, default=1)
    ap.add_argument("--atoms", choices=["gold", "l1"], default="gold", help="LoCoMo's observations, or L1's atoms")
    ap.add_argument("--data", help="conversations in LoCoMo's format (default: the eval set's locomo-dev.json)")
    ap.add_argument("--out", help="default bench/results/scenes.json, scenes-l1.json, scenes-l1-<data>.json")
    args = ap.parse_args()
    data = Path(args.data) if args.data else None
    if args.atoms == "gold" and data is not None:
        ap.error("--data needs --atoms l1 (a set without gold observations is scored on L1's atoms)")
    name = "scenes" + ("-l1" if args.atoms == "l1" else "") + (f"-{data.stem}" if data else "")
    out = result_path(name, args.out, quick=args.quick)
    if args.embedder == "minilm":
        from mnemoflow.embedding import MiniLMEmbedder

        embedder: Embedder = MiniLMEmbedder(threads=1)
    else:
        embedder = HashingEmbedder()
    convs = load_locomo(data)[: 1 if args.quick else None]
    source = {"gold": "LoCoMo's gold observations", "l1": "L1's atoms"}[args.atoms]
    run = Run("scenes", f"Scenes and persona without a model, from {source} of {data.stem if data else 'LoCoMo dev'}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, conv in enumerate(convs):
            extracted = l1_atoms(conv, Path(tmp) / f"l1-{k}", embedder) if args.atoms == "l1" else {}
            for speaker in (conv["speaker_a"], conv["speaker_b"]):
                rows.append(run_user(conv, speaker, embedder, args, Path(tmp), extracted.get(speaker)))
                r = rows[-1]
                print(
                    f"{r['user']:<24} scenes {r['scenes']:>2}  hit@1 {r['heuristic']['qa']['hit@1']:.3f}"
                    f" vs chronological {r['chronological']['qa']['hit@1']:.3f}",
                    file=sys.stderr,
                )

    def mean(path: list[str]) -> float | None:
        """The mean over users that have a value (None: no user has one)."""
        vals = []
        for r in rows:
            v: Any = r
            for p in path:
                v = v[p]
            vals.append(v)
        present = [v for v in vals if v is not None]
        return round(statistics.fmean(present), 4) if present else None

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
        "atoms": args.atoms,
        "data": str(data) if data else "locomo-dev",
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
    naming = {
        "scene_name_stop_words": sum(len(r["naming"]["scene_name_stop_words"]) for r in rows),
        "archetype_stop_words": sum(len(r["naming"]["archetype_stop_words"]) for r in rows),
        "other_speaker_in_names": sum(len(r["naming"]["other_speaker_in_names"]) for r in rows),
        "persona_lines": sum(r["naming"]["persona_lines"] for r in rows),
        "persona_lines_quoting_other": (
            sum(len(r["naming"]["persona_lines_quoting_other"]) for r in rows) if args.atoms == "l1" else None
        ),
    }
    result["naming"] = naming
    h, c = summary["heuristic"], summary["chronological"]
    quality = [
        [label, "n/a" if h_value is None else f"{h_value:.3f}", "n/a" if c_value is None else f"{c_value:.3f}"]
        for label, h_value, c_value in (
            ("gold-fact coverage, combined", h["gold_fact_coverage"]["combined"], c["gold_fact_coverage"]["combined"]),
            ("gold-fact coverage, facts", h["gold_fact_coverage"]["facts"], c["gold_fact_coverage"]["facts"]),
            ("gold-fact coverage, events", h["gold_fact_coverage"]["events"], c["gold_fact_coverage"]["events"]),
            ("question routed to its evidence's scene, hit@1", h["qa_hit@1"], c["qa_hit@1"]),
            ("question routed to its evidence's scene, hit@3", h["qa_hit@3"], c["qa_hit@3"]),
            ("events found in their best scene", h["event_recall_best_scene"], c["event_recall_best_scene"]),
        )
    ]
    structure = result["structure"]
    shape = [
        ["users", str(len(rows))],
        [
            "scenes per user (mean), most live at once",
            f"{structure['scenes']:.1f}, {result['max_live_scenes_any_user']}",
        ],
        [
            "persona characters (mean), most",
            f"{structure['persona_chars']:.0f}, {result['max_persona_chars_any_user']}",
        ],
        ["scene names holding a stop word", str(naming["scene_name_stop_words"])],
        ["archetype words that are stop words", str(naming["archetype_stop_words"])],
        ["names holding the other speaker's name", str(naming["other_speaker_in_names"])],
        [
            "persona lines quoting the other speaker",
            "n/a (gold atoms)" if args.atoms == "gold" else str(naming["persona_lines_quoting_other"]),
        ],
    ]
    tables = [
        Table(
            title="Heuristic scenes and persona against chronological blocks",
            columns=["measure", "heuristic", "chronological"],
            rows=quality,
        ),
        Table(title="Shape of what was written", columns=["measure", "value"], rows=shape),
    ]
    examples = {r["user"]: {"scenes": r["scene_names"], "archetype": r["archetype"]} for r in rows[:2]}
    notes = [f"{user}: scenes {', '.join(e['scenes'])}; archetype {e['archetype']}" for user, e in examples.items()]
    run.finish(tables, result, out, notes=notes)


if __name__ == "__main__":
    main()
