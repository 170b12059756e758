"""The API replica's own HTTP listener: the one-machine stack's door (``api_door`` direct, the default).

Why: every request through Ray Serve's HTTP proxy crosses two processes and several threads before the route
runs. On our 2-core VMs a route that does nothing answers in 13-22 ms p50 through the proxy and in 3.8 ms from a
listener in the replica itself (``bench/proxy.py``'s ``serve_floor_ms`` and a bare FastAPI deployment measured
both ways), a third of what the proxy may add to a request (issue 31). Ray Serve 2.60 has this as *direct
ingress*, but it hands each replica a port from its own range behind a load balancer (HAProxy, which no package
here ships); this listener takes the API's port (Serve's proxy then listens on a free one; ``mnemoflow.cli.stack``).

What it is: a uvicorn server on the replica's event loop (the one Serve runs the app's lifespan and routes on,
so the app's Kafka producer and shard client serve both doors), serving the same FastAPI app, its lifespan off
(Serve ran it). The socket is bound with ``SO_REUSEPORT``: a second API replica on the machine shares the port
(the kernel spreads connections), and a restarted replica binds it again while the old one drains. What the
proxy did that this door does not: Serve's request queueing and its per-replica limit (``max_ongoing_requests``)
and Serve's own request metrics; the API's own limits (body size, rate limits, keys) and ``/metrics`` hold on both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn

log = logging.getLogger(__name__)


class _QuietServer(uvicorn.Server):
    """uvicorn without its signal handlers: the replica's process is Ray's, and so are its signals (uvicorn takes
    SIGINT and SIGTERM when it runs on the main thread, which Serve's user code does when configured to)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class DirectListener:
    """Started by the app's startup event, stopped by its shutdown event (Serve runs both on the replica)."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        self._app, self._host, self._port = app, host, port
        self._server: _QuietServer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET6 if ":" in self._host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            sock.bind((self._host, self._port))
        except OSError:
            sock.close()
            raise
        sock.listen(256)
        sock.setblocking(False)
        config = uvicorn.Config(
            self._app,
            lifespan="off",
            access_log=False,
            log_level="warning",
            loop="none",
            timeout_graceful_shutdown=10,  # then uvicorn cancels what still runs (a long stream)
        )
        self._server = _QuietServer(config)
        self._task = asyncio.get_running_loop().create_task(self._server.serve(sockets=[sock]))
        log.info("the API replica answers directly on %s:%d", self._host, self._port)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task


def serve_directly(app: Any, host: str, port: int) -> None:
    """Give ``app`` (built in the replica, its lifespan not yet run) a lifespan that opens and closes the
    listener. A port already taken by another program fails the replica's start, which Serve retries and logs."""
    listener = DirectListener(app, host, port)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        await listener.start()
        try:
            yield
        finally:
            await listener.stop()

    app.router.lifespan_context = lifespan
