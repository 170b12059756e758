"""A bundle (a tar) as an HTTP download: written off the event loop, then streamed."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import IO

from fastapi.responses import StreamingResponse

SPOOL_BYTES = 8 << 20
"""Kept in memory up to this size, on disk beyond."""


async def tar_download(write: Callable[[IO[bytes]], object], filename: str) -> StreamingResponse:
    """``write`` the bundle into a spooled file, then stream it: the export never waits on a slow client (it reads
    files and must not hold them across the network), and a large bundle does not sit in memory."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)
    await asyncio.to_thread(write, spool)
    spool.seek(0)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while chunk := await asyncio.to_thread(spool.read, 1 << 20):
                yield chunk
        finally:
            spool.close()

    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return StreamingResponse(chunks(), media_type="application/x-tar", headers=headers)
