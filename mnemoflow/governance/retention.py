"""The retention sweep: delete a tenant's raw data older than its settings allow (default: keep forever).

What expires: L0 day files (by the day in their name), offload entries with their refs, and refs alone (the entry
stays, saying the output was there). The newest entry of a session always stays, so the next tool result gets
the next sequence number. Totals are kept per tenant in ``<tenant>/retention.json`` for ``/metrics``.

Who runs it: each stream worker, on its writer thread, so a sweep never interleaves with that worker's own
appends. In the embedded shape (one worker) nothing else writes ``offload.jsonl``; with several workers a
rewrite of a session's log can race another worker's append to it (see the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime, timedelta

from pydantic import BaseModel

from mnemoflow.config import Retention
from mnemoflow.ids import check_id
from mnemoflow.offload.entries import OffloadEntry
from mnemoflow.ports import FileStore
from mnemoflow.storage import Layout
from mnemoflow.storage.layout import users


class Expired(BaseModel):
    l0_days: int = 0
    offload_entries: int = 0
    refs: int = 0

    def plus(self, other: Expired) -> Expired:
        return Expired(**{k: getattr(self, k) + getattr(other, k) for k in Expired.model_fields})


def totals_path(tenant: str) -> str:
    return f"{check_id(tenant)}/retention.json"


def read_totals(files: FileStore, tenant: str) -> Expired:
    data = files.read_bytes(totals_path(tenant))
    return Expired.model_validate_json(data) if data else Expired()


def _day(name: str) -> date | None:
    try:
        return date.fromisoformat(name.removesuffix(".jsonl"))
    except ValueError:
        return None


def _sweep_l0(files: FileStore, tenant: str, days: int, now: datetime) -> int:
    cutoff, n = (now - timedelta(days=days)).date(), 0
    for _, user in users(files, tenant):
        folder = Layout.conversations_dir(tenant, user)
        for name in files.list_dir(folder):
            day = _day(name)
            if day is not None and day < cutoff:
                files.remove(f"{folder}/{name}")
                n += 1
    return n


def _sweep_session(files: FileStore, tenant: str, session: str, policy: Retention, now: datetime) -> Expired:
    path = Layout.offload(tenant, session)
    lines = list(files.read_lines(path))
    entries = [OffloadEntry.model_validate_json(line) for line in lines]
    entry_cut = now - timedelta(days=policy.offload_days) if policy.offload_days else None
    ref_cut = now - timedelta(days=policy.refs_days) if policy.refs_days else None
    drop = {i for i, e in enumerate(entries[:-1]) if entry_cut is not None and e.ts < entry_cut}
    refs = 0
    for i, e in enumerate(entries):
        if i in drop or (ref_cut is not None and e.ts < ref_cut):
            refs += int(files.remove(Layout.ref(tenant, session, e.tool_call_id)) > 0)
    if drop:
        kept = "".join(line + "\n" for i, line in enumerate(lines) if i not in drop)
        files.write_atomic(path, kept.encode())
    return Expired(offload_entries=len(drop), refs=refs)


def sweep(files: FileStore, policies: Mapping[str, Retention], now: datetime) -> dict[str, Expired]:
    """Apply every tenant's policy once; returns what expired, per tenant, and adds it to the tenant's totals."""
    out: dict[str, Expired] = {}
    for tenant, policy in policies.items():
        done = Expired()
        if policy.l0_days:
            done = done.plus(Expired(l0_days=_sweep_l0(files, tenant, policy.l0_days, now)))
        if policy.offload_days or policy.refs_days:
            for session in files.list_dir(f"{tenant}/sessions"):
                done = done.plus(_sweep_session(files, tenant, session, policy, now))
        if done != Expired():
            files.write_atomic(totals_path(tenant), read_totals(files, tenant).plus(done).model_dump_json().encode())
        out[tenant] = done
    return out
