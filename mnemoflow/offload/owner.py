"""Which agent a session belongs to (docs/concepts/scopes.md): ``sessions/<session>/owner.json``.

Why: offload entries, refs and canvases are per session, and a session is one agent's conversation with a user. The
first tool result that names an agent or a team records it as the session's owner (first writer wins: the tool
results of a session are written by one worker, in order); a key bound to another agent or team then gets 404 for
the session's entries, refs, canvases, state and compaction, as for another tenant's session. A session whose
results name no agent has no owner: it is the default agent's, and any key of the tenant may use it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from mnemoflow.events import ToolResultEvent
from mnemoflow.ids import SafeId
from mnemoflow.ports import FileStore
from mnemoflow.scopes import Caller
from mnemoflow.storage import Layout


class SessionOwner(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: SafeId | None = None
    team: SafeId | None = None


def owner_path(tenant: str, session: str) -> str:
    return f"{Layout.session_dir(tenant, session)}/owner.json"


def owner_of(files: FileStore, tenant: str, session: str) -> SessionOwner | None:
    raw = files.read_bytes(owner_path(tenant, session))
    return SessionOwner.model_validate_json(raw) if raw else None


def record_owners(files: FileStore, events: Iterable[ToolResultEvent]) -> None:
    """Record the owner of each session of ``events`` that names an agent or team and has none yet."""
    first: dict[tuple[str, str], SessionOwner] = {}
    for e in events:
        if e.agent is not None or e.team is not None:
            first.setdefault((e.tenant, e.session), SessionOwner(agent=e.agent, team=e.team))
    for (tenant, session), owner in first.items():
        if owner_of(files, tenant, session) is None:
            files.write_atomic(owner_path(tenant, session), owner.model_dump_json().encode())


def may_use(caller: Caller, owner: SessionOwner | None) -> bool:
    """An admin key uses every session, any key an unowned one; a bound key only its own agent's, or its team's
    sessions that belong to no agent."""
    if caller.admin or owner is None:
        return True
    if owner.agent is not None:
        return owner.agent == caller.agent
    return owner.team == caller.team
