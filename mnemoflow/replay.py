"""Turn recorded conversations into API submissions: OpenAI-format agent trajectories and LoCoMo dialogues.

Recognised files (JSON): an OpenAI message array or ``{"messages": [...]}``; an OpenHands completion log
(``fncall_messages`` plus ``fncall_response``); a tau-bench list of ``{"traj": [...]}``; a LoCoMo list of
``{"conversation": ..., "sample_id": ...}``. Ids are derived from the source, so replaying a file twice submits
the same ids and stores nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.ids import check_id


def safe_id(raw: str) -> str:
    """``raw`` if it is a valid id, else a readable prefix plus a short hash (stable across runs)."""
    try:
        return check_id(raw)
    except ValueError:
        pass
    cleaned = re.sub(r"[^A-Za-z0-9_.:@-]+", "_", raw).strip("._")[:100] or "id"
    return f"{cleaned.replace('..', '_')}-{hashlib.sha1(raw.encode()).hexdigest()[:10]}"


@dataclass
class Replay:
    """What one source submits, in order: turns and tool results interleaved as they happened."""

    name: str
    items: list[TurnIn | ToolResultIn] = field(default_factory=list)


def _text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(p.get("text") or "" if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content)


def from_messages(messages: list[dict[str, Any]], name: str, user: str, start: datetime) -> Replay:
    """An agent trajectory: user/assistant text becomes turns, tool messages become tool results."""
    session = safe_id(name)
    replay = Replay(name)
    calls: dict[str, tuple[str, str]] = {}
    answered: dict[str, int] = {}
    for i, msg in enumerate(messages):
        role, ts = msg.get("role"), start + timedelta(seconds=i)
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") or {}
            args = fn.get("arguments", "")
            calls[call.get("id", "")] = (fn.get("name") or "tool", args if isinstance(args, str) else json.dumps(args))
        if role in ("user", "assistant") and (text := _text(msg.get("content")).strip()):
            replay.items.append(
                TurnIn(message_id=f"{session}-{i}", user=user, session=session, role=role, content=text, ts=ts)
            )
        elif role == "tool":
            call_id = msg.get("tool_call_id") or f"call-{i}"
            tool, args = calls.get(call_id, ("tool", ""))
            answered[call_id] = answered.get(call_id, 0) + 1  # some recorded runs reuse a call id
            unique = call_id if answered[call_id] == 1 else f"{call_id}_dup{answered[call_id]}"
            replay.items.append(
                ToolResultIn(
                    tool_call_id=safe_id(unique),
                    session=session,
                    user=user,
                    tool_name=tool,
                    arguments=args,
                    content=_text(msg.get("content")),
                    ts=ts,
                )
            )
    return replay


def _locomo_time(raw: str) -> datetime | None:
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y"):
        try:
            return datetime.strptime(" ".join(raw.split()), fmt).replace(tzinfo=UTC)
        except ValueError:
            pass
    return None


def from_locomo(sample: dict[str, Any]) -> Replay:
    """A LoCoMo dialogue: each speaker is a user; a turn is stored for both, as 'user' for its speaker, named, so
    atoms name their subject and the other speaker's turns are a person's (context), not an assistant's answers."""
    conv, sample_id = sample["conversation"], safe_id(str(sample.get("sample_id", "locomo")))
    speakers = [conv["speaker_a"], conv["speaker_b"]]
    replay = Replay(sample_id)
    k = 1
    while f"session_{k}" in conv:
        start = _locomo_time(conv.get(f"session_{k}_date_time", "")) or datetime(2000, 1, 1, tzinfo=UTC)
        for j, turn in enumerate(conv[f"session_{k}"]):
            for speaker in speakers:
                replay.items.append(
                    TurnIn(
                        message_id=safe_id(f"{sample_id}-{turn['dia_id']}"),
                        user=safe_id(f"{sample_id}-{speaker}"),
                        session=f"{sample_id}-s{k}",
                        role="user" if turn["speaker"] == speaker else "assistant",
                        name=turn["speaker"],
                        content=turn.get("text", ""),
                        ts=start + timedelta(seconds=j),
                    )
                )
        k += 1
    return replay


def load_replays(path: Path, user: str = "replay", start: datetime | None = None) -> Iterator[Replay]:
    """Every replayable source in ``path`` (a file, or a folder walked in sorted order)."""
    start = start or datetime(2025, 1, 1, tzinfo=UTC)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*.json") if p.is_file())
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        stem = f"{file.parent.name}-{file.stem}" if path.is_dir() else file.stem
        if isinstance(data, dict) and "fncall_messages" in data:
            msgs = list(data["fncall_messages"])
            last = ((data.get("fncall_response") or {}).get("choices") or [{}])[0].get("message")
            yield from_messages(msgs + ([last] if last else []), file.parent.name, user, start)
        elif isinstance(data, dict) and isinstance(data.get("messages"), list):
            yield from_messages(data["messages"], stem, user, start)
        elif isinstance(data, list) and data and isinstance(data[0], dict):
            if "traj" in data[0]:
                for e in data:
                    yield from_messages(e["traj"], f"{stem}-task{e.get('task_id')}-trial{e.get('trial')}", user, start)
            elif "conversation" in data[0]:
                yield from (from_locomo(sample) for sample in data)
            elif "role" in data[0]:
                yield from_messages(data, stem, user, start)
