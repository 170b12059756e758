"""Replay client: submits turns and tool results in source order through the SDK, with a rich progress bar."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from mnemoflow.client import Client
from mnemoflow.client.calls import batches, submit
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.replay import load_replays


@dataclass
class ReplayTotals:
    sources: int = 0
    turns: int = 0
    tool_results: int = 0


def run_replay(
    path: Path, api: str, key: str, *, user: str, limit: int | None, batch: int, console: Console
) -> ReplayTotals:
    replays = list(load_replays(path, user=user))[:limit]
    totals = ReplayTotals()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Client(api, key, timeout=60) as client, Progress(*columns, console=console) as bar:
        task = bar.add_task("replaying", total=sum(len(r.items) for r in replays))
        for replay in replays:
            bar.update(task, description=replay.name[:40])
            for chunk in batches(replay.items, batch):
                client.send(submit(chunk))  # retried on no answer, 429 and 5xx: ids make a resend harmless
                bar.advance(task, len(chunk))
            totals.sources += 1
            totals.turns += sum(isinstance(i, TurnIn) for i in replay.items)
            totals.tool_results += sum(isinstance(i, ToolResultIn) for i in replay.items)
    return totals
