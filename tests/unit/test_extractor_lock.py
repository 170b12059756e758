"""One L1 pass per user across extractor replicas: the file lock the replicas share on the data volume."""

from __future__ import annotations

import asyncio
from pathlib import Path

from serving.extractor import across_replicas


def test_a_second_pass_on_the_same_user_waits_for_the_first(tmp_path: Path) -> None:
    lock, order = tmp_path / "t" / "users" / "ana" / "state" / "l1.lock", []

    async def pass_(name: str, hold_s: float) -> None:
        async with across_replicas(lock):  # each call opens the file anew, as another process would
            order.append(f"{name} in")
            await asyncio.sleep(hold_s)
            order.append(f"{name} out")

    async def both() -> None:
        first = asyncio.create_task(pass_("first", 0.5))
        await asyncio.sleep(0.05)
        await asyncio.gather(first, pass_("second", 0))

    asyncio.run(both())
    assert order == ["first in", "first out", "second in", "second out"]


def test_passes_of_different_users_do_not_wait(tmp_path: Path) -> None:
    async def held() -> None:
        async with across_replicas(tmp_path / "ana.lock"):
            await asyncio.wait_for(_enter(tmp_path / "bo.lock"), 0.1)

    asyncio.run(held())


async def _enter(path: Path) -> None:
    async with across_replicas(path):
        pass
