"""The retention sweep as the worker runs it: on the writer thread (never beside this worker's own appends),
on a timer; a failed sweep is logged and left for the next one (nothing is lost by expiring late)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from mnemoflow.config import Retention
from mnemoflow.governance.retention import Expired, sweep
from mnemoflow.handlers.context import HandlerContext
from mnemoflow.ports import FileStore

log = logging.getLogger(__name__)


class RetentionSweeper:
    def __init__(self, ctx: HandlerContext, files: FileStore, policies: Mapping[str, Retention]) -> None:
        self._ctx, self._files, self._policies = ctx, files, policies

    async def run(self) -> dict[str, Expired]:
        now = self._ctx.clock.now()
        try:
            done = await self._ctx.blocking(lambda: sweep(self._files, self._policies, now))
        except Exception as exc:
            log.error("retention sweep failed, next one retries: %s", exc)
            return {}
        for tenant, expired in done.items():
            if expired != Expired():
                log.info("retention for %s expired %s", tenant, expired.model_dump())
        return done
