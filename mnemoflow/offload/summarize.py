"""L1 summaries of tool results (docs/tdam-spec.md §5.3): extractive heuristic, or the LLM port in batches.

Small results need no summary: below ``summary_min_tokens`` the stub would not be shorter than the output, so
the result is kept raw (score 10 = "nothing to lose", reclaim never stubs it since a stub cannot save tokens).
The heuristic keeps what an agent looks back for: the first lines, error lines, ``key: value`` lines and the last
lines, bounded in length. Its score says how much of the output the summary covers. An LLM batch that fails
validation raises (the caller retries; the cursor does not move), never a silent half-result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.messages import ToolPair
from mnemoflow.ports.llm import LLM
from mnemoflow.prompts import offload_summary
from mnemoflow.prompts.offload_summary import SummaryReply
from mnemoflow.tokens import estimate_tokens

_ERROR_RE = re.compile(r"error|exception|traceback|failed|failure|fatal|denied|not found|no such|assert", re.I)
_KV_RE = re.compile(r"^\s*[\w .-]{1,40}\s*[:=]\s*\S")
_EXIT_RE = re.compile(r"exit code|returncode|passed|failed|\d+ (tests?|errors?|warnings?)", re.I)


@dataclass(frozen=True, slots=True)
class Summary:
    tool_call_id: str
    summary: str
    score: int


def _line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def heuristic_summary(pair: ToolPair, cfg: OffloadConfig | None = None) -> Summary:
    """Extractive summary: call, head, error lines, key values, tail; at most ``summary_max_chars``."""
    cfg = cfg or OffloadConfig()
    text = pair.result
    if estimate_tokens(text) < cfg.summary_min_tokens:
        return Summary(pair.tool_call_id, _line(text, cfg.summary_max_chars), 10)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    picked: list[str] = []

    def take(candidates: Sequence[str], n: int) -> None:
        for ln in candidates:
            if n <= 0:
                return
            s = _line(ln)
            if s and s not in picked:
                picked.append(s)
                n -= 1

    take(lines[:2], 2)
    take([ln for ln in lines if _ERROR_RE.search(ln)], 3)
    take([ln for ln in lines if _EXIT_RE.search(ln)], 2)
    take([ln for ln in lines if _KV_RE.match(ln)], 2)
    take(lines[-2:], 2)
    head = f"{pair.tool_name}({_line(pair.arguments, 80)}): {len(lines)} lines"
    out = head + " | " + " / ".join(picked)
    if len(out) > cfg.summary_max_chars:
        out = out[: cfg.summary_max_chars - 1] + "…"
    covered = sum(len(p) for p in picked) / max(len(text), 1)
    errors = any(_ERROR_RE.search(p) for p in picked)
    score = max(1, min(9, round(3 + 10 * covered) - (2 if errors else 0)))
    return Summary(pair.tool_call_id, out, score)


def needs_summary(pair: ToolPair, cfg: OffloadConfig) -> bool:
    return estimate_tokens(pair.result) >= cfg.summary_min_tokens


async def llm_summaries(
    pairs: Sequence[ToolPair], llm: LLM, cfg: OffloadConfig | None = None, user_intent: str = ""
) -> list[Summary]:
    """Summaries from the model, ``summary_batch`` pairs per call; small results get the heuristic (no call).

    An id the model left out falls back to the heuristic for that pair, so every pair gets exactly one summary.
    """
    cfg = cfg or OffloadConfig()
    out: dict[str, Summary] = {}
    big = [p for p in pairs if needs_summary(p, cfg)]
    for p in pairs:
        if not needs_summary(p, cfg):
            out[p.tool_call_id] = heuristic_summary(p, cfg)
    for i in range(0, len(big), cfg.summary_batch):
        batch = big[i : i + cfg.summary_batch]
        reply = await llm.complete(
            offload_summary.build(list(batch), user_intent),
            SummaryReply,
            max_tokens=120 * len(batch) + 64,
            stage="offload_summary",
        )
        wanted = {p.tool_call_id for p in batch}
        for item in reply.items:
            if item.tool_call_id in wanted and item.tool_call_id not in out:
                out[item.tool_call_id] = Summary(item.tool_call_id, item.summary[: cfg.summary_max_chars], item.score)
        for p in batch:
            out.setdefault(p.tool_call_id, heuristic_summary(p, cfg))
    return [out[p.tool_call_id] for p in pairs]
