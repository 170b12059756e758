"""The benchmarks that start Ray, Serve or the whole stack, each run as a script in its ``--smoke`` mode, writing to
a temporary path (tests/bench_smoke.py): it starts as a user starts it, runs to the end and writes a well-formed
result. The stack's benchmarks use the session's Apache Kafka broker (``MNEMOFLOW_KAFKA_BOOTSTRAP``) rather than
starting one each; Ray is their own, as it is for a user.

bench/scale.py (a two-node cluster of its own whose phases restart workers and replicas and kill a raylet: about
3.5 minutes on 2 cores even on tiny data) and bench/chaos.py (``mnemoflow up`` under one worker SIGKILL, then its
checks: about 2 minutes) are smoked only with ``MNEMOFLOW_BENCH_SMOKE_SLOW=1``: together they would double what
the smoke runs add to the suite. tests/integration/test_cluster_scale.py runs the same cluster shape,
tests/integration/test_embedded_up.py kills each part of ``mnemoflow up``, and tests/unit/test_bench_chaos.py
checks chaos's accounting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnemoflow.config import Settings
from mnemoflow.llm.models import MODELS, is_verified
from streams.broker_kafka import EmbeddedKafka
from tests.bench_smoke import EVAL, check_report, run_bench
from tests.services import TEST_MODEL

pytestmark = pytest.mark.integration
SLOW = "MNEMOFLOW_BENCH_SMOKE_SLOW"
slow = pytest.mark.skipif(os.environ.get(SLOW) != "1", reason=f"minutes on 2 cores: set {SLOW}=1 to run it")
needs_locomo = pytest.mark.skipif(not (EVAL / "locomo" / "locomo-dev.json").exists(), reason="LoCoMo data not found")


@needs_locomo
def test_serving_and_extraction(tmp_path: Path) -> None:
    """bench/serving.py, which runs bench/extraction.py's measure (on LoCoMo turns): a one-machine Ray of its own,
    the embedder and extractor deployments, and one short call of the smallest fetched model."""
    result = run_bench("serving", "--smoke", out=tmp_path / "serving.json", timeout=600)
    check_report(result, "serving", {"embed_per_s", "extraction", "cpu_engine", "serve_b64_vs_inproc", "stages"})
    assert set(result["embed_per_s"]) == {"inproc_b1", "inproc_b64", "serve_b1", "serve_b64"}
    extraction = result["extraction"]
    assert extraction["users"] == 4
    for engine in ("heuristic", "model_server"):
        assert all(extraction[engine][mode]["rps"] > 0 for mode in ("batched", "unbatched")), extraction[engine]
    stages = result["stages"]
    embeddings, extractions = stages["embeddings"]["by_kind"], stages["extraction"]["by_kind"]
    assert set(embeddings) == {"serve_b1", "serve_b64"} and len(extractions) == 4
    for kind in [*embeddings.values(), *extractions.values()]:
        assert kind["requests"] > 0 and {"end_to_end", "serve_hop", "replica"} <= kind["stages_ms"].keys(), kind
        assert all(s["n"] == kind["requests"] and s["p50"] <= s["p99"] for s in kind["stages_ms"].values()), kind
    assert all("pass" in kind["stages_ms"] for kind in extractions.values())
    assert stages["embeddings"]["how"]["serve_hop"].startswith("derived")  # a subtraction says it is one
    if is_verified(MODELS[TEST_MODEL], Settings().models_dir / MODELS[TEST_MODEL].file_name):
        assert set(result["cpu_engine"]) == {TEST_MODEL}, result["cpu_engine"]


def test_serve_ingress(tmp_path: Path) -> None:
    """A fresh one-machine Ray per ingress kind (Serve's proxy, and direct ingress), 10 requests each."""
    result = run_bench("serve_ingress", "--smoke", out=tmp_path / "serve_ingress.json", timeout=600)
    check_report(result, "serve_ingress", {"requests", "proxy", "direct"})
    assert result["requests"] == 10
    for kind in ("proxy", "direct"):
        assert 0 < result[kind]["p50"] <= result[kind]["p90"] <= result[kind]["p99"], result[kind]


def test_ingest(tmp_path: Path, apache_kafka: EmbeddedKafka) -> None:
    env = {"MNEMOFLOW_KAFKA_BOOTSTRAP": apache_kafka.bootstrap}
    result = run_bench("ingest", "--smoke", out=tmp_path / "ingest.json", timeout=600, env=env)
    check_report(result, "ingest", {"kafka_to_l0_events_per_s", "api_to_l0_events_per_s", "idle_rss_mib"})
    assert result["events"] == {"kafka": 500, "api": 200} and result["smoke"]
    assert result["kafka_to_l0_events_per_s"]["apache"] > 0 and result["api_to_l0_events_per_s"]["apache"] > 0
    assert result["kafka_to_l0_events_per_s"]["tansu"] is None  # one stack in a smoke run
    assert result["idle_rss_mib"] > 0 and result["loaded_rss_mib"] > 0


def test_proxy(tmp_path: Path, apache_kafka: EmbeddedKafka) -> None:
    if not (EVAL / "trajectories" / "openhands_swebench_verified").exists():
        pytest.skip(f"trajectories not found under {EVAL}")
    env = {"MNEMOFLOW_KAFKA_BOOTSTRAP": apache_kafka.bootstrap}
    args = ["--smoke", "--embedder", "minilm"]
    result = run_bench("proxy", *args, out=tmp_path / "proxy.json", timeout=600, env=env)
    report = check_report(result, "proxy", {"added_latency_ms", "prompt_tokens", "latency", "tokens", "stages"})
    assert result["requests_per_mode"] == 2 and result["tokens"]["requests"] == 4
    assert result["seeded_atoms_found"] > 0  # recall searched a real index
    assert result["prompt_tokens"]["proxy"] > 0 and result["prompt_tokens"]["direct"] > 0
    assert {"first", "repeat"} <= result["latency"].keys()
    by_kind, how = result["stages"]["by_kind"], result["stages"]["how"]
    assert set(by_kind) == {"first", "repeat", "agent_step", "chat_step"}
    assert (by_kind["first"]["requests"], by_kind["agent_step"]["requests"], by_kind["chat_step"]["requests"]) == (
        2,
        4,
        4,
    )
    assert result["seeded_skills"] > 0  # the system part carries a skills index
    for kind in ("agent_step", "chat_step"):  # every step after a session's first compared with the one before
        reuse = result["prefix_reuse"][kind]
        assert reuse["direct"]["requests"] == reuse["proxy"]["requests"] == 3, reuse
        assert reuse["direct"]["reuse"] > 0.5 and 0 <= reuse["proxy"]["reuse"] <= 1, reuse
    every = {"end_to_end", "serve_hop", "total", "capture_plan", "memory", "recall", "compact", "upstream"}
    for kind, got in by_kind.items():
        stages = got["stages_ms"]
        assert every | {"capture_answer"} <= stages.keys(), (kind, sorted(stages))
        assert all(s["p50"] <= s["p99"] and s["n"] <= got["requests"] for s in stages.values()), (kind, stages)
        assert stages["end_to_end"]["p50"] >= stages["total"]["p50"] >= stages["memory"]["p50"], (kind, stages)
    first = by_kind["first"]["stages_ms"]
    assert {"embed", "search", "context", "compact_shard", "capture"} <= first.keys()  # a fresh recall, 20 captured
    assert first["capture"]["n"] == 2 and "capture" not in by_kind["repeat"]["stages_ms"]  # nothing new to capture
    assert how["serve_hop"].startswith("derived") and how["compact_hop"].startswith("derived")
    [stage_table] = [t for t in report.tables if t.title.startswith("Where the time goes")]
    assert [row[0] for row in stage_table.rows][:3] == ["end_to_end", "serve_hop", "total"]


@slow
@needs_locomo
def test_scale(tmp_path: Path) -> None:
    result = run_bench("scale", "--smoke", out=tmp_path / "scale.json", timeout=1200)
    check_report(result, "scale", {"kafka_to_l0_events_per_s", "extraction_jobs_per_s", "recall_rps", "recovery"})
    assert all(phase["complete"] for phase in result["ingest"].values()), result["ingest"]
    assert set(result["recall_rps"]) == {"1", "2"} and all(r["failed"] == 0 for r in result["extraction"].values())
    assert set(result["recovery"]) == {"worker_sigkill", "api_replica_sigkill", "second_node_raylet_sigkill"}


@slow
@needs_locomo
def test_chaos(tmp_path: Path) -> None:
    """One worker SIGKILL under traffic, then every check; ``mnemoflow up`` is the checkout's."""
    result = run_bench("chaos", "--smoke", out=tmp_path / "chaos.json", timeout=900)
    check_report(result, "chaos", {"by_fault", "l1", "canvases", "shard_state", "stop", "targets"})
    assert result["faults"] == {"worker_sigkill": 1} and result["events_acked"] > 0
    assert all(result["targets"].values()), result["targets"]
