"""What ``bench/chaos.py`` checks once the stack is quiet: every acknowledged event on disk exactly once and
intact, in the order it was sent; L1 settled and consistent; canvases that parse; shards that agree with the logs.

Everything here reads the files (the source of truth), never the API's view of them, except the shard check,
which asks each session's shard through the API.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mnemoflow.events import ToolResultIn, TurnIn

TENANT = "default"
Key = tuple[str, str, str]
"""An event's identity: ``("turn", user, message_id)`` or ``("tool", session, tool_call_id)``."""


@dataclass
class Acked:
    item: TurnIn | ToolResultIn
    at: float  # seconds since the run's t0, when the 202 arrived
    order: int  # position in the order of acknowledgements

    @staticmethod
    def key_of(item: TurnIn | ToolResultIn) -> Key:
        if isinstance(item, TurnIn):
            return ("turn", item.user, item.message_id)
        return ("tool", item.session, item.tool_call_id)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The lines of a JSONL file that parse (a torn line is counted by the callers that care)."""
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def line_counts(data: Path) -> tuple[int, int]:
    """(L0 lines, offload entries) of the tenant."""

    def count(pattern: str) -> int:
        return sum(p.read_bytes().count(b"\n") for p in (data / TENANT).glob(pattern))

    return count("users/*/conversations/*.jsonl"), count("sessions/*/offload.jsonl")


def wait_quiet(data: Path, want: tuple[int, int], quiet_s: float, give_up_s: float, timeout: float) -> dict[str, Any]:
    """Until no new line for ``quiet_s`` with at least ``want`` lines, or no new line for ``give_up_s``
    (something is missing), or ``timeout``."""
    t0 = time.monotonic()
    last, changed = None, time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = line_counts(data)
        if got != last:
            last, changed = got, time.monotonic()
        quiet = time.monotonic() - changed
        if (quiet >= quiet_s and got[0] >= want[0] and got[1] >= want[1]) or quiet >= give_up_s:
            break
        time.sleep(1.0)
    return {"seconds": round(time.monotonic() - t0, 1), "lines": last, "acked": want}


@dataclass
class Outcome:
    occurrences: Counter[Key]
    mismatched: set[Key]
    details: dict[str, Any]


def _in_order(stored: list[Key], acked: dict[Key, Acked]) -> bool:
    """Do the acknowledged events of one stream appear (first occurrences) in the order they were sent?"""
    first = list(dict.fromkeys(k for k in stored if k in acked))
    return first == sorted(first, key=lambda k: acked[k].order)


def check_events(data: Path, acked: dict[Key, Acked], unordered: tuple[str, ...] = ()) -> Outcome:
    """Occurrences of every event on disk (L0 lines by user and id, offload entries by session and id), turn
    content, role and session equal to what was sent, refs byte-exact, ``seq`` dense in every offload log, and
    each conversation session and tool session in the order it was sent (sessions fed by several concurrent
    senders, prefixed ``unordered``, are left out of the order check)."""
    seen: Counter[Key] = Counter()
    content: dict[Key, tuple[str, str, str]] = {}
    streams: dict[tuple[str, str], list[Key]] = {}
    torn = 0
    for path in sorted((data / TENANT).glob("users/*/conversations/*.jsonl")):
        user = path.parent.parent.name
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                torn += 1
                continue
            key = ("turn", user, m["id"])
            seen[key] += 1
            content.setdefault(key, (m.get("content"), m.get("role"), m.get("session")))
            streams.setdefault((user, m.get("session")), []).append(key)
    seq_gaps, bad_refs = [], 0
    for path in (data / TENANT).glob("sessions/*/offload.jsonl"):
        session = path.parent.name
        entries = read_jsonl(path)
        torn += len(path.read_text(encoding="utf-8", errors="replace").splitlines()) - len(entries)
        if [e.get("seq") for e in entries] != list(range(len(entries))):
            seq_gaps.append(session)
        for e in entries:
            key = ("tool", session, e["tool_call_id"])
            seen[key] += 1
            streams.setdefault(("", session), []).append(key)
    mismatched = set()
    for key, ev in acked.items():
        if seen[key] == 0:
            continue
        if isinstance(ev.item, TurnIn):
            if content.get(key) != (ev.item.content, ev.item.role, ev.item.session):
                mismatched.add(key)
            continue
        ref = data / TENANT / "sessions" / key[1] / "refs" / f"{key[2]}.md"
        try:
            exact = ref.read_bytes() == ev.item.content.encode()
        except OSError:
            exact = False
        if not exact:
            mismatched.add(key)
            bad_refs += 1
    checked = {s: keys for s, keys in streams.items() if not s[1].startswith(unordered or ("\0",))}
    out_of_order = sorted(f"{u}/{s}" if u else s for (u, s), keys in checked.items() if not _in_order(keys, acked))
    details = {
        "torn_lines": torn,
        "offload_seq_gaps": seq_gaps[:10],
        "refs_not_byte_exact": bad_refs,
        "applied_not_acked": sum(1 for k in seen if k not in acked),
        "duplicated_any_event": sum(1 for n in seen.values() if n > 1),
        "streams_order_checked": len(checked),
        "streams_out_of_order": out_of_order[:10],
    }
    return Outcome(seen, mismatched, details)


def tally(keys: list[Key], out: Outcome) -> dict[str, int]:
    return {
        "acked": len(keys),
        "lost": sum(out.occurrences[k] == 0 for k in keys),
        "duplicated": sum(out.occurrences[k] > 1 for k in keys),
        "mismatched": sum(k in out.mismatched for k in keys),
    }


def l1_snapshot(data: Path, users: list[str]) -> dict[str, Any]:
    """Atoms (every record ever added, superseded included), trigger state and extraction coverage."""
    from mnemoflow.memory.l1.records import RecordLog
    from mnemoflow.memory.l1.state import load_cursor, load_triggers
    from mnemoflow.storage import LocalFileStore

    files = LocalFileStore(data)
    ids: set[tuple[str, str]] = set()
    live = pending = running = unextracted = orphans = 0
    for user in users:
        records = RecordLog(files, TENANT, user).read(live_only=False)
        ids |= {(user, r.id) for r in records}
        state, cursor = load_triggers(files, TENANT, user), load_cursor(files, TENANT, user)
        l0_ids = set()
        for path in (data / TENANT / "users" / user / "conversations").glob("*.jsonl"):
            msgs = read_jsonl(path)
            l0_ids |= {m["id"] for m in msgs}
            # A user turn past the cursor has not been extracted (trailing assistant turns rightly wait).
            unextracted += sum(m.get("role") == "user" for m in msgs[cursor.done.get(path.stem, 0) :])
        for r in records:
            if r.live:
                live += 1
                orphans += not set(r.source_message_ids) <= l0_ids
        pending += state.pending
        running += state.running
    return {
        "ids": ids,
        "atoms": len(ids),
        "live": live,
        "pending": pending,
        "running": running,
        "unextracted_user_turns": unextracted,
        "orphan_atoms": orphans,
        "index_rows": index_rows(data),
    }


def index_rows(data: Path) -> int | None:
    """Atoms of the tenant in the SQLite index (None when it cannot be read: informative only)."""
    try:
        import apsw

        conn = apsw.Connection(str(data / "index" / "atoms.sqlite"), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.setbusytimeout(5000)
            return int(next(conn.execute("select count(*) from atoms where tenant = ?", (TENANT,)))[0])
        finally:
            conn.close()
    except Exception:  # noqa: BLE001
        return None


def wait_l1(data: Path, users: list[str], timeout: float) -> tuple[dict[str, Any], float, bool]:
    """Until no user has pending or running L1 work and every user turn is extracted, or ``timeout``."""
    t0 = time.monotonic()
    snap = l1_snapshot(data, users)
    while time.monotonic() - t0 < timeout:
        if snap["pending"] == 0 and snap["running"] == 0 and snap["unextracted_user_turns"] == 0:
            return snap, time.monotonic() - t0, True
        time.sleep(1.0)
        snap = l1_snapshot(data, users)
    return snap, time.monotonic() - t0, False


def check_canvases(data: Path) -> dict[str, Any]:
    """Every saved canvas through the official Mermaid parser (our own validator if Node is missing, said so)."""
    paths = sorted((data / TENANT).glob("sessions/*/canvases/*.mmd"))
    texts = [p.read_text(encoding="utf-8") for p in paths]
    out: dict[str, Any] = {"count": len(texts), "sessions": len({p.parent.parent.name for p in paths})}
    if not texts:
        return {**out, "valid": 0, "checker": "none needed"}
    try:
        from tests.services import official_mermaid_check

        results = official_mermaid_check(texts)
        out["checker"] = "official mermaid parser"
    except (FileNotFoundError, RuntimeError, ImportError) as exc:
        from mnemoflow.offload.canvas import validate_mermaid

        results = [{"ok": not validate_mermaid(t), "error": "; ".join(validate_mermaid(t))} for t in texts]
        out["checker"] = f"mnemoflow validate_mermaid (official parser unavailable: {str(exc)[:120]})"
    out["valid"] = sum(bool(r["ok"]) for r in results)
    out["invalid"] = [
        {"path": str(p.relative_to(data)), "error": r["error"]}
        for p, r in zip(paths, results, strict=True)
        if not r["ok"]
    ][:10]
    return out


def check_shard_states(client: httpx.Client, data: Path) -> dict[str, Any]:
    """Every session's shard state agrees with its offload log (count and last seq)."""
    wrong = []
    logs = sorted((data / TENANT).glob("sessions/*/offload.jsonl"))
    for log in logs:
        n = len(read_jsonl(log))
        try:
            state = client.get(f"/v1/sessions/{log.parent.name}/state", timeout=30).json()
        except (httpx.HTTPError, ValueError) as exc:
            wrong.append(f"{log.parent.name}: {type(exc).__name__}")
            continue
        if state.get("count") != n or state.get("last_seq") != n - 1:
            wrong.append(f"{log.parent.name}: state {state.get('count')}/{state.get('last_seq')}, log {n}")
    return {"sessions": len(logs), "disagree": wrong[:10], "disagree_count": len(wrong)}


NOTEWORTHY = (
    "supervisor",
    "restart",
    "exited",
    "died",
    "unhealthy",
    "parked",
    "giving up",
    "session expired",
    "stopping",
    "stopped",
    "traceback",
    "received",
)
ROUTINE = ("unable connect", "failed fetch", "update metadata", "notready", "connection at", "mnemoflow_api")


def log_evidence(root: Path, data: Path, limit: int = 30) -> dict[str, list[str]]:
    """The lines of the stack's own logs that say what it did about the faults (reconnect chatter left out)."""
    out = {}
    for path in [root / "up.log", *sorted((data / "logs").glob("*.log"))]:
        if not path.exists() or path.stat().st_size > 200 << 20:
            continue
        lines = [
            ln.strip()[:300]
            for ln in path.read_text(errors="replace").splitlines()
            if any(w in ln.lower() for w in NOTEWORTHY) and not any(w in ln.lower() for w in ROUTINE)
        ]
        if lines:
            out[path.name] = lines[:limit] + ([f"... {len(lines) - limit} more"] if len(lines) > limit else [])
    return out
