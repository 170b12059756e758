"""Replay client: posts turns and tool results in source order, in batches, with a rich progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.replay import load_replays


@dataclass
class ReplayTotals:
    sources: int = 0
    turns: int = 0
    tool_results: int = 0


def _post(client: httpx.Client, items: list[TurnIn | ToolResultIn]) -> None:
    if isinstance(items[0], TurnIn):
        url, body = "/v1/turns", {"turns": [i.model_dump(mode="json") for i in items]}
    else:
        url, body = "/v1/tool-results", {"results": [i.model_dump(mode="json") for i in items]}
    response = client.post(url, json=body)
    if response.status_code >= 400:
        raise RuntimeError(f"POST {url} -> {response.status_code}: {response.text[:500]}")


def chunks(items: list[TurnIn | ToolResultIn], batch: int, max_chars: int = 600_000) -> list[list]:
    """Consecutive runs of one kind, cut at ``batch`` items or about ``max_chars`` of content (body limit)."""
    out: list[list] = []
    size = 0
    for item in items:
        full = bool(out) and (len(out[-1]) >= batch or size + len(item.content) > max_chars)
        if not out or type(out[-1][0]) is not type(item) or full:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item.content)
    return out


def run_replay(
    path: Path, api: str, key: str, *, user: str, limit: int | None, batch: int, console: Console
) -> ReplayTotals:
    replays = list(load_replays(path, user=user))[:limit]
    totals = ReplayTotals()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=api, headers=headers, timeout=60) as client, Progress(*columns, console=console) as bar:
        task = bar.add_task("replaying", total=sum(len(r.items) for r in replays))
        for replay in replays:
            bar.update(task, description=replay.name[:40])
            for chunk in chunks(replay.items, batch):
                _post(client, chunk)
                bar.advance(task, len(chunk))
            totals.sources += 1
            totals.turns += sum(isinstance(i, TurnIn) for i in replay.items)
            totals.tool_results += sum(isinstance(i, ToolResultIn) for i in replay.items)
    return totals
