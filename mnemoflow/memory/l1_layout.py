"""Where L1 lives on disk, beside the L0 layout of :mod:`mnemoflow.storage.layout`.

Why a separate module: ``layout.py`` is owned by the storage package; L1 adds three paths under the same user
folder (DESIGN §5) and builds them from :meth:`Layout.user_dir`, so every id is checked the same way.
Proposed for ``Layout`` once it settles: ``records_dir``, ``records_day``, ``l1_cursor``, ``l1_triggers``.
"""

from __future__ import annotations

from datetime import date

from mnemoflow.storage import Layout


class L1Layout:
    """Relative paths of the L1 history and of the per-user L1 state files."""

    @staticmethod
    def records_dir(tenant: str, user: str) -> str:
        return f"{Layout.user_dir(tenant, user)}/records"

    @classmethod
    def records_day(cls, tenant: str, user: str, day: date) -> str:
        return f"{cls.records_dir(tenant, user)}/{day.isoformat()}.jsonl"

    @staticmethod
    def cursor(tenant: str, user: str) -> str:
        """Which L0 lines L1 has consumed; written only by the extraction pipeline."""
        return f"{Layout.user_dir(tenant, user)}/state/l1_cursor.json"

    @staticmethod
    def triggers(tenant: str, user: str) -> str:
        """The trigger state machine's state; written only by whoever schedules L1 (the stream worker)."""
        return f"{Layout.user_dir(tenant, user)}/state/l1_triggers.json"

    @staticmethod
    def persona(tenant: str, user: str) -> str:
        return f"{Layout.user_dir(tenant, user)}/persona.md"

    @staticmethod
    def scenes_dir(tenant: str, user: str) -> str:
        return f"{Layout.user_dir(tenant, user)}/scenes"
