"""The API's skill passes: one at a time per skill set in this process, run now (the explicit call) or in the
background (when a session ends).

Why one at a time: a pass reads the skill set, decides store/merge/skip and writes, so two passes at once could both
store one new skill. (Other processes do not share these locks: docs/limitations.md.)
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime

from mnemoflow.ports.files import FileStore
from mnemoflow.scopes import SHARED, agent_scope, scope_parts
from mnemoflow.skills.learn import Learnt, learn_session, owner_agent

log = logging.getLogger(__name__)


class SkillPasses:
    def __init__(self, files: FileStore, counted: Callable[[list[Learnt]], None] = lambda done: None) -> None:
        """``counted``: told what each pass did (the API's ``mnemoflow_api_skill_tasks``)."""
        self._files = files
        self._counted = counted
        self._locks: defaultdict[tuple[str, str], asyncio.Lock] = defaultdict(asyncio.Lock)
        self._background: set[asyncio.Task[list[Learnt]]] = set()

    def default_scope(self, tenant: str, session: str) -> str:
        """Where a session's skills go unless asked (:func:`mnemoflow.skills.learn.owner_agent`)."""
        agent = owner_agent(self._files, tenant, session)
        return agent_scope(agent) if agent else SHARED

    def lock(self, tenant: str, scope: str) -> asyncio.Lock:
        return self._locks[(tenant, scope)]

    async def run(self, tenant: str, session: str, scope: str) -> list[Learnt]:
        agent = scope_parts(scope)[1] or None
        async with self.lock(tenant, scope):
            done = await asyncio.to_thread(learn_session, self._files, tenant, session, datetime.now(UTC), agent=agent)
        self._counted(done)
        return done

    def start(self, tenant: str, session: str) -> None:
        """Run the pass in the background; a failure is logged (the pass is idempotent: the next one redoes it)."""
        task = asyncio.get_running_loop().create_task(self.run(tenant, session, self.default_scope(tenant, session)))
        self._background.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[list[Learnt]]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("a background skill pass failed; the next one redoes it: %s", exc, exc_info=exc)
