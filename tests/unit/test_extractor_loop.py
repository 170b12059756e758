"""A model-free L1 pass runs on the extractor's pass loop, so the replica's own loop keeps answering (health checks,
new batches) while the pass holds its thread, as CPU work does."""

from __future__ import annotations

import asyncio
import threading

import pytest

from serving.extractor import PassLoop


def test_the_callers_loop_runs_while_the_work_holds_its_thread() -> None:
    started, released = threading.Event(), threading.Event()
    passes = PassLoop()

    async def work() -> str:
        started.set()
        assert released.wait(10), "the caller's loop never ran while the work held its thread"
        return threading.current_thread().name

    async def caller() -> str:
        pending = asyncio.ensure_future(passes.run(work))
        await asyncio.to_thread(started.wait, 10)
        released.set()  # only possible if this loop is not the one the work blocks
        return await pending

    assert asyncio.run(caller()) == "l1-passes"


def test_an_error_of_the_work_reaches_the_caller() -> None:
    async def work() -> None:
        raise ValueError("bad pass")

    async def caller() -> None:
        await PassLoop().run(work)

    with pytest.raises(ValueError, match="bad pass"):
        asyncio.run(caller())
