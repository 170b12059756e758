"""The external evaluation data beside the repository (``../shared/eval``), read through its own loaders: one place
for the benchmarks that replay its trajectories, so they load them, and cut the proxy's requests from them, alike."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from typing import Any

from bench.report import ROOT

EVAL = ROOT.parent / "shared" / "eval"


@lru_cache(maxsize=1)
def loaders() -> Any:
    """``../shared/eval/loaders.py``, imported once."""
    spec = importlib.util.spec_from_file_location("eval_loaders", EVAL / "loaders.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def trajectories(name: str) -> list[list[dict[str, Any]]]:
    """The runs of one trajectory set (``openhands_swebench_verified``, ``tau_bench_airline``) as chat arrays."""
    runs: list[list[dict[str, Any]]] = loaders().load_trajectories(str(EVAL / "trajectories" / name))
    return runs


def twenty_message_requests(n: int) -> list[list[dict[str, Any]]]:
    """The first 20 messages of up to ``n`` tau-bench airline runs whose 20th message is the user's: a request an
    agent sends after a few turns, ending where recall has a query."""
    out = []
    for traj in trajectories("tau_bench_airline"):
        if len(traj) > 20 and traj[19]["role"] == "user":
            out.append(traj[:20])
        if len(out) == n:
            break
    return out
