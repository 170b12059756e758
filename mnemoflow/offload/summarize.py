"""L1 summaries of tool results (docs/tdam-spec.md §5.3): extractive heuristic, or the LLM port in batches.

Small results need no summary: below ``summary_min_tokens`` the stub would not be shorter than the output, so
the result is kept raw (score 10 = "nothing to lose", reclaim never stubs it since a stub cannot save tokens).
The heuristic keeps what an agent looks back for: why the call failed (:mod:`.failures`), the identifiers the output
introduced (:mod:`.identifiers`: paths, test ids, dotted symbols, error types), then the first lines, error lines,
``key: value`` lines and the last lines, bounded in length. Its score says how much of the output the summary
covers. Whichever engine summarises, the failure line is read by code, so a canvas marks a failed call blocked
even when the model's summary does not say so. An LLM batch that fails validation raises (the caller retries; the
cursor does not move), never a silent half-result.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mnemoflow.errors import MnemoflowError
from mnemoflow.llm.fallback import fell_back
from mnemoflow.offload.config import OffloadConfig
from mnemoflow.offload.entries import OffloadEntry, read_ref
from mnemoflow.offload.failures import body_lines, failure
from mnemoflow.offload.identifiers import ranked
from mnemoflow.offload.messages import ToolPair
from mnemoflow.ports import FileStore
from mnemoflow.ports.llm import LLM
from mnemoflow.prompts import offload_summary
from mnemoflow.prompts.offload_summary import SummaryReply
from mnemoflow.tokens import estimate_tokens

_ERROR_RE = re.compile(r"error|exception|traceback|failed|failure|fatal|denied|not found|no such|assert", re.I)
_KV_RE = re.compile(r"^\s*[\w .-]{1,40}\s*[:=]\s*\S")
_EXIT_RE = re.compile(r"exit code|returncode|passed|failed|\d+ (tests?|errors?|warnings?)", re.I)
_IDS = "ids: "


@dataclass(frozen=True, slots=True)
class Summary:
    """One tool result's summary, its replaceability score, and, for a failed call, the line that says why."""

    tool_call_id: str
    summary: str
    score: int
    error: str | None = None


def _line(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _error(text: str) -> str | None:
    found = failure(text)
    return found.describe() if found else None


def _identifiers(text: str, arguments: str, error: str | None, room: int) -> str:
    """``ids: a/b.py, x.y, …`` of what the output introduced (not what the call already named), within ``room``."""
    kept: list[str] = []
    used = len(_IDS)
    for ident in ranked(text, [arguments, error or ""]):
        cost = len(ident.text) + 2
        if ident.kind == "error_line" and error is not None:
            continue  # the failure line says it already
        if used + cost > room or any(ident.text in k for k in kept):
            continue  # a shorter one further down may still fit; ``a.b`` is in ``a.b.c`` already
        kept.append(ident.text)
        used += cost
    return _IDS + ", ".join(kept) if kept else ""


def heuristic_summary(pair: ToolPair, cfg: OffloadConfig | None = None) -> Summary:
    """Extractive summary: the tool and its output's size, why it failed, the identifiers it introduced, then its
    head, error, key-value and tail lines. The text is at most ``summary_max_chars``, the identifiers take at most
    ``summary_ids_chars`` more: they come before the lines because they are what the agent comes back for."""
    cfg = cfg or OffloadConfig()
    text = pair.result
    error = _error(text)
    lines = body_lines(text.splitlines())  # the tool's trailing [status] lines say nothing a summary needs
    if estimate_tokens(text) < cfg.summary_min_tokens:
        return Summary(pair.tool_call_id, _line("\n".join(lines) or "(no output)", cfg.summary_max_chars), 10, error)
    head = f"{pair.tool_name}: {len(lines)} lines"  # the call's arguments stand right before its result
    parts = [head, *([f"FAILED {error}"] if error else [])]
    room = cfg.summary_max_chars - sum(len(p) + 3 for p in parts)
    ids = _identifiers("\n".join(lines), pair.arguments, error, cfg.summary_ids_chars - 3)
    picked: list[str] = []

    def take(candidates: Sequence[str], n: int) -> None:
        for ln in candidates:
            if n <= 0:
                return
            s = _line(ln)
            if s and s not in picked and s not in (error or ""):
                picked.append(s)
                n -= 1

    take(lines[:2], 2)
    take([ln for ln in lines if _ERROR_RE.search(ln)], 3)
    take([ln for ln in lines if _EXIT_RE.search(ln)], 2)
    take([ln for ln in lines if _KV_RE.match(ln)], 2)
    take(lines[-2:], 2)
    shown = " / ".join(picked)
    if len(shown) > room:
        shown = shown[: room - 1] + "…" if room > 1 else ""
    out = " | ".join([*parts, *([ids] if ids else []), *([shown] if shown else [])])
    covered = sum(len(p) for p in picked) / max(len(text), 1)
    errors = error is not None or any(_ERROR_RE.search(p) for p in picked)
    score = max(1, min(9, round(3 + 10 * covered) - (2 if errors else 0)))
    return Summary(pair.tool_call_id, out, score, error)


def pair_of(files: FileStore, tenant: str, session: str, entry: OffloadEntry) -> ToolPair:
    """The call and raw result behind an offload entry, as the summarisers read it."""
    raw = read_ref(files, tenant, session, entry.tool_call_id) or b""
    return ToolPair(entry.tool_call_id, entry.tool_name, entry.arguments, raw.decode("utf-8", "replace"))


def needs_summary(pair: ToolPair, cfg: OffloadConfig) -> bool:
    return estimate_tokens(pair.result) >= cfg.summary_min_tokens


async def llm_summaries(
    pairs: Sequence[ToolPair], llm: LLM, cfg: OffloadConfig | None = None, user_intent: str = ""
) -> list[Summary]:
    """Summaries from the model, ``summary_batch`` pairs per call; small results get the heuristic (no call).

    An id the model left out falls back to the heuristic for that pair, so every pair gets exactly one summary; so
    does every pair of a batch whose call failed (invalid after the repair try, or no model answering).
    """
    cfg = cfg or OffloadConfig()
    out: dict[str, Summary] = {}
    big = [p for p in pairs if needs_summary(p, cfg)]
    for p in pairs:
        if not needs_summary(p, cfg):
            out[p.tool_call_id] = heuristic_summary(p, cfg)
    for i in range(0, len(big), cfg.summary_batch):
        batch = big[i : i + cfg.summary_batch]
        try:
            reply = await llm.complete(
                offload_summary.build(list(batch), user_intent),
                SummaryReply,
                max_tokens=offload_summary.ITEM_TOKENS * len(batch) + 64,
                stage="offload_summary",
            )
        except MnemoflowError as exc:
            fell_back(llm, "offload_summary", exc)
            reply = SummaryReply(items=[])
        batch_results = {p.tool_call_id: p.result for p in batch}
        for item in reply.items:
            if item.tool_call_id in batch_results and item.tool_call_id not in out:
                error = _error(batch_results[item.tool_call_id])
                out[item.tool_call_id] = Summary(
                    item.tool_call_id, item.summary[: cfg.summary_max_chars], item.score, error
                )
        for p in batch:
            out.setdefault(p.tool_call_id, heuristic_summary(p, cfg))
    return [out[p.tool_call_id] for p in pairs]
