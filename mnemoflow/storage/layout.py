"""The storage layout of docs/DESIGN.md §5, as relative paths under the data root.

Every argument is a checked id (:mod:`mnemoflow.ids`), so a path built here cannot escape its tenant.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date

from mnemoflow.config import SERVICE_DIRS
from mnemoflow.ids import check_id
from mnemoflow.ports.files import FileStore


class Layout:
    """Paths of each layer, relative to the FileStore root."""

    @staticmethod
    def user_dir(tenant: str, user: str) -> str:
        return f"{check_id(tenant)}/users/{check_id(user)}"

    @classmethod
    def conversations_dir(cls, tenant: str, user: str) -> str:
        return f"{cls.user_dir(tenant, user)}/conversations"

    @classmethod
    def conversation_day(cls, tenant: str, user: str, day: date) -> str:
        return f"{cls.conversations_dir(tenant, user)}/{day.isoformat()}.jsonl"

    @classmethod
    def records_dir(cls, tenant: str, user: str) -> str:
        return f"{cls.user_dir(tenant, user)}/records"

    @classmethod
    def records_day(cls, tenant: str, user: str, day: date) -> str:
        return f"{cls.records_dir(tenant, user)}/{day.isoformat()}.jsonl"

    @classmethod
    def l1_cursor(cls, tenant: str, user: str) -> str:
        """Which L0 lines L1 has consumed; written only by the extraction pipeline."""
        return f"{cls.user_dir(tenant, user)}/state/l1_cursor.json"

    @classmethod
    def l1_triggers(cls, tenant: str, user: str) -> str:
        """The L1 trigger state; written only by the stream worker that owns the user's partition."""
        return f"{cls.user_dir(tenant, user)}/state/l1_triggers.json"

    @staticmethod
    def session_dir(tenant: str, session: str) -> str:
        return f"{check_id(tenant)}/sessions/{check_id(session)}"

    @classmethod
    def ref(cls, tenant: str, session: str, tool_call_id: str) -> str:
        return f"{cls.session_dir(tenant, session)}/{cls.ref_name(tool_call_id)}"

    @staticmethod
    def ref_name(tool_call_id: str) -> str:
        """The ref path as stored in an offload entry, relative to the session folder."""
        return f"refs/{check_id(tool_call_id)}.md"

    @classmethod
    def offload(cls, tenant: str, session: str) -> str:
        return f"{cls.session_dir(tenant, session)}/offload.jsonl"

    @classmethod
    def session_state(cls, tenant: str, session: str) -> str:
        return f"{cls.session_dir(tenant, session)}/state.json"

    @staticmethod
    def agents_skills_dir(tenant: str) -> str:
        """The folder of every agent's private skills (one folder per agent)."""
        return f"{check_id(tenant)}/skills/agent"

    @classmethod
    def skills_dir(cls, tenant: str, agent: str | None = None) -> str:
        """A tenant's skills (``shared``), or one agent's private ones (``agent/<agent>``)."""
        if agent:
            return f"{cls.agents_skills_dir(tenant)}/{check_id(agent)}"
        return f"{check_id(tenant)}/skills/shared"


def users(files: FileStore, tenant: str | None = None) -> Iterator[tuple[str, str]]:
    """Every (tenant, user) with a folder under the data root (one tenant, or all of them)."""
    for t in [tenant] if tenant else [n for n in files.list_dir("") if n not in SERVICE_DIRS]:
        for u in files.list_dir(f"{t}/users"):
            yield t, u
