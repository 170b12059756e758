"""What the HTTP routes need, injected once by :func:`serving.api.create_api` (fakes in unit tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Path

from mnemoflow.config import Settings
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.ids import SafeId
from mnemoflow.memory.recall.recaller import Recaller
from mnemoflow.offload.replies import CompactReply
from mnemoflow.offload.session_state import SessionState
from mnemoflow.storage import LocalFileStore
from serving.bus import EventBus
from serving.metrics import ApiMetrics
from serving.skill_passes import SkillPasses

PathId = Annotated[SafeId, Path(description="an id: letters, digits, _ - . : @; no path characters")]

StateReader = Callable[[str, str], Awaitable[SessionState]]
Compactor = Callable[[str, str, list[dict[str, Any]], int], Awaitable[CompactReply]]


@dataclass
class ApiDeps:
    settings: Settings
    bus: EventBus
    files: LocalFileStore
    session_state: StateReader | None = None
    compact: Compactor | None = None
    recaller_factory: Callable[[], Recaller] | None = None
    metrics: ApiMetrics = field(default_factory=ApiMetrics)
    skills: SkillPasses = field(init=False)
    _recaller: Recaller | None = field(default=None, init=False)
    _building: asyncio.Future[Recaller] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.skills = SkillPasses(self.files, self.metrics.skills_learnt)

    async def recaller(self) -> Recaller:
        """Built once, on first use (it loads the embedding model and opens the index), off the event loop.

        Callers share one build and wait for it shielded: a caller that gives up (``/health`` has a deadline)
        leaves the build running for the next one. A build that failed is tried again by the next caller.
        """
        if self.recaller_factory is None:
            raise ServiceUnavailable("long-term memory is not configured on this API")
        if self._recaller is None:
            build = self._building
            if build is None or (build.done() and (build.cancelled() or build.exception() is not None)):
                build = self._building = asyncio.ensure_future(asyncio.to_thread(self.recaller_factory))
            self._recaller = await asyncio.shield(build)
        return self._recaller
