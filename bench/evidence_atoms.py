"""Evidence turns that produced no atom: what the heuristic L1 extractor drops of the turns that answer questions.

Recall over atoms can only find what an atom cites. A turn a question's answer rests on (LoCoMo's ``evidence``
dia_ids, LongMemEval's ``has_answer`` turns) that yields no atom is lost to the atom search whatever its ranking,
and a raw-turn search still has it. This measures, per development set, the share of evidence turns that no atom
of the speaker's own memory cites, before dedup (extraction alone: the windows of one L1 pass over the whole
history, as :func:`mnemoflow.memory.l1.window.plan_windows` cuts them). Dedup can drop a repeat later; that loss
shows in the recall benchmarks, not here.

Sets: LoCoMo dev (categories 1-4; each speaker is a user, the other speaker's turns are named ``assistant`` turns,
as in ``bench/locomo_recall.py``; a turn counts in its speaker's memory), our Chinese dialogues
(``bench/data/zh-dialogues.json``, same format) and the 60 LongMemEval-S dev questions (the user's has_answer
turns, and the assistant's, which become ``Assistant: ...`` atoms when they answer a request). No embedder, no
index: a few seconds a set.

    python bench/evidence_atoms.py
    python bench/evidence_atoms.py --smoke --out /tmp/evidence.json   # the first item of each set: seconds

Writes ``bench/results/evidence_atoms.json`` with the dropped turns' ids (never their text: the eval data stays in
../shared/eval).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.locomo_recall import (  # noqa: E402
    evidence_by_speaker,
    load_module,
    speaker_events,
    uid,
    without_atom,
)
from bench.longmemeval_recall import safe, turn_event, turns_of  # noqa: E402
from bench.report import Run, Table, result_path  # noqa: E402
from mnemoflow.events import TurnEvent  # noqa: E402
from mnemoflow.memory.l0 import L0Writer  # noqa: E402
from mnemoflow.memory.l1.heuristic import HeuristicExtractor  # noqa: E402
from mnemoflow.memory.l1.state import L1Cursor  # noqa: E402
from mnemoflow.memory.l1.window import plan_windows  # noqa: E402
from mnemoflow.storage import LocalFileStore  # noqa: E402

TENANT = "evidence"


def drafted(files: LocalFileStore, user: str, events: list[TurnEvent]) -> list[tuple[str, ...]]:
    """The source message ids of each atom the heuristic extractor makes, over one pass of the whole history."""
    L0Writer(files).write(events)
    extractor = HeuristicExtractor()
    cited: list[tuple[str, ...]] = []
    for window in plan_windows(files, TENANT, user, L1Cursor()):
        if window.new:
            drafts = asyncio.run(extractor.extract(user, window, ""))
            cited += [d.source_message_ids for d in drafts]
    return cited


def locomo(convs: list[dict[str, Any]], files: LocalFileStore) -> dict[str, Any]:
    """LoCoMo-format conversations: evidence turns of questions in categories 1-4, each in its speaker's memory."""
    evidence = total = drafts = 0
    missed: list[str] = []
    for conv in convs:
        for name, own in evidence_by_speaker(conv).items():
            user = uid(conv["sample_id"], name)
            events = speaker_events(TENANT, user, name, conv["turns"])
            atoms = drafted(files, user, events)
            cited = {i for src in atoms for i in src}
            drafts += len(atoms)
            evidence += len(own)
            missed += [f"{conv['sample_id']}:{e}" for e in own if e not in cited]
        total += len(conv["turns"])
    return summary(evidence, missed, total, drafts)


def longmemeval(items: list[dict[str, Any]], files: LocalFileStore) -> dict[str, Any]:
    """LongMemEval questions: each history its own user; evidence is every has_answer turn, user or assistant."""
    evidence = total = drafts = 0
    missed: list[str] = []
    by_type: dict[str, list[int]] = {}
    for item in items:
        user = safe(item["question_id"])
        turns = turns_of(item)
        events = [turn_event(TENANT, user, t) for t in turns]
        atoms = drafted(files, user, events)
        cited = {i for src in atoms for i in src}
        drafts += len(atoms)
        wanted = [t["id"] for t in turns if t["evidence"]]
        lost = [e for e in wanted if e not in cited]
        counts = by_type.setdefault(item["question_type"], [0, 0])
        counts[0] += len(wanted)
        counts[1] += len(lost)
        evidence += len(wanted)
        missed += [f"{item['question_id']}:{e}" for e in lost]
        total += len(turns)
    out = summary(evidence, missed, total, drafts)
    out["by_type"] = {k: {"evidence_turns": v[0], "without_atom": v[1]} for k, v in sorted(by_type.items())}
    return out


def summary(evidence: int, missed: list[str], turns: int, atoms: int) -> dict[str, Any]:
    return {"turns": turns, "atoms": atoms, **without_atom(evidence, missed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--out", help="default bench/results/evidence_atoms.json (with --smoke, the temp folder)")
    ap.add_argument("--smoke", action="store_true", help="the first conversation or question of each set (the tests)")
    args = ap.parse_args()
    out = result_path("evidence_atoms", args.out, smoke=args.smoke)
    loaders = load_module(Path(args.eval_dir) / "loaders.py", "mnemoflow_eval_loaders")
    eval_dir = Path(args.eval_dir)
    first = 1 if args.smoke else None
    sets = {
        "locomo-dev": lambda f: locomo(loaders.load_locomo(str(eval_dir / "locomo" / "locomo-dev.json"))[:first], f),
        "zh-dialogues": lambda f: locomo(
            loaders.load_locomo(str(ROOT / "bench" / "data" / "zh-dialogues.json"))[:first], f
        ),
        "longmemeval-s-dev": lambda f: longmemeval(
            json.loads((eval_dir / "longmemeval" / "longmemeval-s-dev.json").read_text())[:first], f
        ),
    }
    run = Run("evidence_atoms", "Evidence turns with no drafted atom (heuristic L1, no embedder)")
    result: dict[str, Any] = {}
    for name, measure in sets.items():
        with tempfile.TemporaryDirectory(prefix="mnemoflow-evidence-") as tmp:
            result[name] = measure(LocalFileStore(Path(tmp)))
    rows = [
        [
            name,
            str(r["turns"]),
            str(r["atoms"]),
            str(r["evidence_turns"]),
            str(r["without_atom"]),
            f"{r['share_without_atom']:.1%}",
        ]
        for name, r in result.items()
    ]
    columns = ["set", "turns", "atoms", "evidence turns", "without an atom", "share"]
    run.finish([Table(title="Evidence turns without an atom", columns=columns, rows=rows)], result, out)


if __name__ == "__main__":
    main()
