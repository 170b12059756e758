"""Skills benchmark: do skills distilled from solved tasks come back for the next task of the same kind?

Data: the 50 OpenHands SWE-bench Verified runs of the development split (``results.json`` says which resolved
their issue). Each run is replayed call by call through :func:`mnemoflow.offload.session.compact_session` (heuristic
engine, real files in a tmp dir), so its canvas is the one the service would draw, then the skill pass
(:func:`mnemoflow.skills.learn.learn_session`) distils it. Two folds: the runs are sorted by instance id and split
into even and odd positions; the resolved runs of one half are distilled, every run of the other half queries with
its first user message (the issue text), then the halves swap.

* **kind of fix** of a run: its repository and the first two folders of the code files its editor calls changed
  (``django/contrib``, ``sympy/core``), read from the trajectory by this script, not by the distiller;
* **hit@3**: of the queries for which a skill of the same kind exists, the share with one among the top 3 recalled
  (:func:`mnemoflow.skills.index.rank_skills`: BM25 over the skills, fused with e5 when ``--dense``);
  **wrong@1**: the share whose first skill is of another kind; **baseline**: the same two figures for BM25 over the
  raw first messages of the source runs (a run found stands for its skill);
* **size**: o200k tokens of each full skill, and of the system-context index of all skills and of 50 (the 50 are
  distilled from every run, resolved or not, success not required: only their size is measured);
* **grounding**: the share of steps whose files and commands (after the stage; for a model's sentence, the paths and
  names in it) are all found in the arguments of the source run's tool calls; **drill-down**: the share of steps
  and pitfalls whose node is on the source canvas with every tool call's ref byte-equal to the run's tool output;
* **duplicates** after distilling every resolved run twice (the second pass must store nothing).

Usage: ``python bench/skills.py [--dense] [--llm qwen2.5-1.5b]``; ``--smoke --out PATH`` runs on 6 runs (the tests).
With ``--llm`` the packaged model rewrites each successful draft (:mod:`mnemoflow.skills.writer`), as the session
shard does when ``skills`` is one of its model stages; writes ``bench/results/skills-<model>.json``.
Writes ``bench/results/skills.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import ROOT, Run, Table, result_path  # noqa: E402
from mnemoflow.lexical import bm25_scores  # noqa: E402
from mnemoflow.offload.canvas_update import canvas_names, load_canvas  # noqa: E402
from mnemoflow.offload.entries import OffloadWriter, read_ref  # noqa: E402
from mnemoflow.offload.messages import last_user  # noqa: E402
from mnemoflow.offload.session import compact_session  # noqa: E402
from mnemoflow.skills.index import rank_skills, skills_index  # noqa: E402
from mnemoflow.skills.learn import Learnt, learn_session, learn_session_with_model  # noqa: E402
from mnemoflow.skills.merge import Similarity, descriptor, lexical_similarity, vector_similarity  # noqa: E402
from mnemoflow.skills.model import Skill, render_skill  # noqa: E402
from mnemoflow.skills.store import SkillStore  # noqa: E402
from mnemoflow.skills.writer import anchors  # noqa: E402
from mnemoflow.storage import LocalFileStore  # noqa: E402
from mnemoflow.testing import ManualClock  # noqa: E402
from mnemoflow.tokens import count_tokens  # noqa: E402

TENANT = "bench"
WINDOW = 32_000
NOW = datetime(2026, 1, 1, tzinfo=UTC)
_REPO_FILE = re.compile(r"^/workspace/[^/]+/(.+)$")


def _load_loaders(eval_dir: Path) -> Any:
    spec = importlib.util.spec_from_file_location("mnemoflow_eval_loaders", eval_dir / "loaders.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_user(messages: Sequence[dict[str, Any]]) -> str:
    return next(str(m.get("content") or "") for m in messages if m["role"] == "user")


def kind_of_fix(instance: str, messages: Sequence[dict[str, Any]]) -> str:
    """``django/contrib`` style label: the repository and the first two folders of the changed code files."""
    repo = instance.split("__", 1)[0]
    folders: list[str] = []
    for m in messages:
        for call in m.get("tool_calls") or ():
            try:
                args = json.loads(call["function"]["arguments"])
            except (TypeError, ValueError):
                continue
            if args.get("command") not in ("str_replace", "insert", "create") or not isinstance(args.get("path"), str):
                continue
            match = _REPO_FILE.match(args["path"])
            if not match or re.search(r"(?:^|/)tests?/|(?:^|/)test_|reproduc|debug", match.group(1)):
                continue
            folders.append("/".join(match.group(1).split("/")[:2]))
    return f"{repo}:{max(set(folders), key=folders.count) if folders else '?'}"


async def replay(files: LocalFileStore, session: str, messages: list[dict[str, Any]]) -> None:
    """The run as the service sees it: compaction before every assistant step (which draws the canvas)."""
    clock, writer = ManualClock(), OffloadWriter(files)
    steps = [i for i, m in enumerate(messages) if m["role"] == "assistant" and i and last_user(messages[:i])]
    for i in steps:
        await compact_session(files, TENANT, session, messages[:i], WINDOW, clock=clock, writer=writer)
        clock.advance(10)
    await compact_session(files, TENANT, session, messages, WINDOW, clock=clock, writer=writer)


def _items(step: str) -> list[str]:
    body = step.split(": ", 1)[1] if ": " in step else step
    body = re.sub(r" \(\+\d+ more\)$", "", body)
    return [re.sub(r" \([a-z_, ]+\)$", "", i).strip() for i in body.split("; ") if i.strip()]


def _in_run(item: str, args: str) -> bool:
    """Every word of ``item`` is in the run's call arguments (a path shown relative to the project root is found
    inside the absolute one; ``.``, the root itself, is not a word), or, for a sentence a model wrote, it names
    files or commands (:func:`mnemoflow.skills.writer.anchors`) and every one of them is there."""
    words = [w.strip("'\"`") for w in item.rstrip("…").split() if w not in (".", "./")]
    if words and all(w.removeprefix("./") in args for w in words):
        return True
    names = {a.strip("`'\"") for a in anchors(item)}
    return bool(names) and all(n.removeprefix("./") in args for n in names)


def grounded(skill: Skill, runs: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
    """(steps with a file or command all of whose words are in the source run's call arguments, steps)."""
    hit = 0
    for step in skill.steps:
        calls = [c["function"]["arguments"] for m in runs[step.source.session] for c in m.get("tool_calls") or ()]
        args = " ".join(json.dumps(json.loads(a)) if a.startswith("{") else a for a in calls).replace('\\"', '"')
        hit += any(_in_run(item, args) for item in _items(step.text))
    return hit, len(skill.steps)


def drills_down(files: LocalFileStore, skill: Skill, runs: dict[str, list[dict[str, Any]]]) -> tuple[int, int]:
    """(steps and pitfalls whose node resolves to refs byte-equal to the run's outputs, steps and pitfalls)."""
    ok = 0
    refs = [*skill.steps, *skill.pitfalls]
    for item in refs:
        session, node_id = item.source.session, item.source.node_id
        outputs = {m["tool_call_id"]: m["content"] for m in runs[session] if m["role"] == "tool"}
        name = next((n for n in canvas_names(files, TENANT, session) if n.startswith(item.source.canvas_prefix)), None)
        canvas = load_canvas(files, TENANT, session, name) if name else None
        node = canvas.node(node_id) if canvas else None
        ok += bool(node and node.tool_call_ids) and all(
            read_ref(files, TENANT, session, t) == str(outputs.get(t, "")).encode() for t in node.tool_call_ids
        )
    return ok, len(refs)


def _rank_runs(query: str, sources: list[str], runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    scores = bm25_scores(query, [first_user(runs[s]) for s in sources])
    return [sources[i] for i in sorted(range(len(sources)), key=lambda i: -scores[i])[:3] if scores[i] > 0]


def fold_figures(
    skills: list[Skill],
    queries: list[str],
    runs: dict[str, list[dict[str, Any]]],
    kinds: dict[str, str],
    embed: Callable[[list[str]], list[list[float]]] | None,
) -> dict[str, Any]:
    """hit@3 and wrong@1 for the skills and for the baseline, over queries with a skill of their kind."""
    vectors = embed([descriptor(s) for s in skills]) if embed and skills else None
    sources = sorted({src.split("#")[0] for s in skills for src in s.sources})

    def kinds_of(skill: Skill) -> set[str]:
        return {kinds[src.split("#")[0]] for src in skill.sources}

    out: dict[str, Any] = {"queries": 0, "hit3": 0, "wrong1": 0, "base_hit3": 0, "base_wrong1": 0}
    out |= {"no_skill_of_kind": 0, "details": []}
    for q in queries:
        kind = kinds[q]
        if not any(kind in kinds_of(s) for s in skills):
            out["no_skill_of_kind"] += 1
            continue
        text = first_user(runs[q])
        qv = embed([text])[0] if embed else None
        top = rank_skills(text, skills, 3, qv, vectors)
        base = _rank_runs(text, sources, runs)
        out["queries"] += 1
        out["details"].append(
            {"query": q, "kind": kind, "top3": [[s.name, sorted(kinds_of(s))] for s in top], "baseline_top3": base}
        )
        out["hit3"] += any(kind in kinds_of(s) for s in top)
        out["wrong1"] += bool(top) and kind not in kinds_of(top[0])
        out["base_hit3"] += any(kinds[s] == kind for s in base)
        out["base_wrong1"] += bool(base) and kinds[base[0]] != kind
    return out


async def measure(eval_dir: Path, smoke: bool, dense: bool, llm_name: str | None = None) -> dict[str, Any]:
    loaders = _load_loaders(eval_dir)
    folder = eval_dir / "trajectories" / "openhands_swebench_verified"
    records = loaders.load_trajectory_records(str(folder))
    resolved = set(json.loads((folder / "results.json").read_text())["resolved"])
    runs = {r["meta"]["instance_id"]: r["messages"] for r in records}
    names = sorted(runs)[:6] if smoke else sorted(runs)
    kinds = {n: kind_of_fix(n, runs[n]) for n in names}
    embed = None
    similarity: Similarity = lexical_similarity
    if dense:
        from mnemoflow.config import Settings
        from mnemoflow.embedding.factory import build_embedder

        embedder = build_embedder(Settings())
        embed = embedder.embed
        similarity = vector_similarity(embedder)
    llm = None
    if llm_name:
        from mnemoflow.config import Settings
        from mnemoflow.llm.factory import build_llm

        llm = build_llm(Settings(llm=llm_name))
    model_seconds: list[float] = []

    async def learn(files: LocalFileStore, session: str, agent: str) -> list[Learnt]:
        if llm is None:
            return learn_session(files, TENANT, session, NOW, agent=agent, similarity=similarity)
        started = time.perf_counter()
        done = await learn_session_with_model(files, TENANT, session, NOW, llm, agent=agent)
        model_seconds.append(time.perf_counter() - started)
        return done

    with tempfile.TemporaryDirectory(prefix="mnemoflow-skills-") as tmp:
        files = LocalFileStore(Path(tmp))
        for n in names:
            await replay(files, n, runs[n])
        halves = [names[0::2], names[1::2]]
        folds, learnt, sizes, ground, drill = [], [], [], [0, 0], [0, 0]
        for i, (source, target) in enumerate((halves, halves[::-1])):
            store_agent = f"fold{i}"
            for n in source:
                if n in resolved:
                    learnt += await learn(files, n, store_agent)
            skills = SkillStore(files, TENANT, store_agent).all()
            folds.append(fold_figures(skills, target, runs, kinds, embed))
            for s in skills:
                sizes.append(count_tokens(render_skill(s)))
                g, d = grounded(s, runs), drills_down(files, s, runs)
                ground = [ground[0] + g[0], ground[1] + g[1]]
                drill = [drill[0] + d[0], drill[1] + d[1]]
        # Duplicates: every resolved run distilled twice into one store.
        before = after = 0
        for attempt in range(2):
            for n in names:
                if n in resolved:
                    await learn(files, n, "twice")
            count = len(SkillStore(files, TENANT, "twice").names())
            before, after = (count, after) if attempt == 0 else (before, count)
        twice = SkillStore(files, TENANT, "twice").all()
        sources = [src for s in twice for src in s.sources]
        # Index size at 50 skills: every run, success not required (size only).
        forced = _forced_skills(files, names)
    total = {k: sum(f[k] for f in folds) for k in folds[0] if k != "details"}
    looked_ok = {x.task.split("#")[0] for x in learnt if x.action in ("store", "merge")}
    return {
        "runs": len(names),
        "resolved_runs": sum(n in resolved for n in names),
        "dense": dense,
        "folds": folds,
        "queries_with_a_skill_of_their_kind": total["queries"],
        "hit_at_3": _share(total["hit3"], total["queries"]),
        "wrong_at_1": _share(total["wrong1"], total["queries"]),
        "baseline_hit_at_3": _share(total["base_hit3"], total["queries"]),
        "baseline_wrong_at_1": _share(total["base_wrong1"], total["queries"]),
        "queries_without_a_skill_of_their_kind": total["no_skill_of_kind"],
        "resolved_runs_that_looked_successful": len(looked_ok),
        "skill_tokens_p50": statistics.median(sizes) if sizes else 0,
        "skill_tokens_max": max(sizes, default=0),
        "index_tokens_all": count_tokens(skills_index(twice)),
        "skills_all": len(twice),
        "index_tokens_50": count_tokens(skills_index(forced[:50])),
        "skills_for_index_50": len(forced[:50]),
        "steps_grounded": _share(ground[0], ground[1]),
        "drill_down_ok": _share(drill[0], drill[1]),
        "skills_after_first_pass": before,
        "skills_after_second_pass": after,
        "duplicate_sources": len(sources) - len(set(sources)),
        "kinds": kinds,
        "llm": llm_name,
        "written_by_model": sum(s.engine == "llm" for s in twice),
        "model_seconds_per_task_p50": round(statistics.median(model_seconds), 1) if model_seconds else None,
        "skills": [render_skill(s) for s in twice],
    }


def _forced_skills(files: LocalFileStore, names: list[str]) -> list[Skill]:
    """One skill per run whatever its outcome (only to measure the index's size at 50 skills)."""
    from mnemoflow.skills.distil import distil
    from mnemoflow.skills.tasks import task_traces

    out: dict[str, Skill] = {}
    for n in names:
        for trace in task_traces(files, TENANT, n):
            found = distil(trace, NOW)
            if found.skill is not None:
                name = found.skill.name if found.skill.name not in out else f"{found.skill.name[:44]}-{len(out)}"
                out[name] = found.skill.model_copy(update={"name": name})
    return list(out.values())


def _share(a: int, b: int) -> float:
    return round(a / b, 3) if b else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eval-dir", default=str(ROOT.parent / "shared" / "eval"))
    ap.add_argument("--dense", action="store_true", help="rank and match with the configured e5 embedder too")
    ap.add_argument("--llm", help="write skills with this packaged model (e.g. qwen2.5-1.5b), as the shard would")
    ap.add_argument("--out", help="default bench/results/skills.json (with --smoke, the temp folder)")
    ap.add_argument("--smoke", action="store_true", help="6 runs (the tests)")
    args = ap.parse_args()
    out = result_path(f"skills-{args.llm}" if args.llm else "skills", args.out, smoke=args.smoke)
    engine = f"{args.llm} writing" if args.llm else "heuristic engine"
    run = Run("skills", f"Skills distilled from solved OpenHands runs, recalled for the next run ({engine})")
    r = asyncio.run(measure(Path(args.eval_dir), args.smoke, args.dense, args.llm))
    retrieval = [
        [
            "skills (" + ("BM25 + e5, RRF" if r["dense"] else "BM25") + ")",
            f"{r['hit_at_3']:.1%}",
            f"{r['wrong_at_1']:.1%}",
        ],
        [
            "baseline: BM25 over the source runs' first messages",
            f"{r['baseline_hit_at_3']:.1%}",
            f"{r['baseline_wrong_at_1']:.1%}",
        ],
    ]
    quality = [
        ["runs (resolved)", f"{r['runs']} ({r['resolved_runs']})"],
        ["queries with a skill of their kind (of the other half)", str(r["queries_with_a_skill_of_their_kind"])],
        ["skills from all resolved runs", str(r["skills_all"])],
        ["full skill, o200k tokens p50 / max (target ≤ 800)", f"{r['skill_tokens_p50']:.0f} / {r['skill_tokens_max']}"],
        ["index, tokens for all skills", str(r["index_tokens_all"])],
        [f"index, tokens for {r['skills_for_index_50']} skills (target ≤ 300 at 50)", str(r["index_tokens_50"])],
        ["steps with a file or command of the source run", f"{r['steps_grounded']:.1%}"],
        ["steps and pitfalls that drill down to byte-equal refs", f"{r['drill_down_ok']:.1%}"],
        [
            "skills after distilling twice (first / second pass)",
            f"{r['skills_after_first_pass']} / {r['skills_after_second_pass']}",
        ],
        ["tasks in more than one skill", str(r["duplicate_sources"])],
        *(
            [[f"skills written by {r['llm']} (the rest: its draft)", f"{r['written_by_model']} of {r['skills_all']}"]]
            if r["llm"]
            else []
        ),
    ]
    run.finish(
        [
            Table(
                title="Skill recall for the next run's first message",
                columns=["ranking", "hit@3", "wrong@1"],
                rows=retrieval,
            ),
            Table(title="Skills: size, grounding, drill-down, duplicates", columns=["measure", "value"], rows=quality),
        ],
        r,
        out,
    )


if __name__ == "__main__":
    main()
