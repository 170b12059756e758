"""The API replica's own listener (``serving/direct.py``): it serves the app it is given on the named port for as
long as the app's lifespan runs, and a second one (a second replica on the machine) shares the port; the stack
refuses an API port another program holds, shared or not."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from mnemoflow.cli.main import app
from mnemoflow.cli.stack import refuse_taken_port
from mnemoflow.errors import ServiceUnavailable
from serving.direct import serve_directly
from streams.broker import free_port


def app_named(name: str) -> FastAPI:
    app = FastAPI()

    @app.get("/who")
    async def who() -> dict[str, str]:
        return {"replica": name}

    return app


def test_the_listener_lives_with_the_lifespan_and_shares_its_port() -> None:
    asyncio.run(lives_and_shares())


async def lives_and_shares() -> None:
    port = free_port("127.0.0.1")
    first, second = app_named("a"), app_named("b")
    serve_directly(first, "127.0.0.1", port)
    serve_directly(second, "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/who"
    async with first.router.lifespan_context(first):
        async with httpx.AsyncClient() as client:
            assert (await client.get(url)).json() == {"replica": "a"}
        async with second.router.lifespan_context(second):  # SO_REUSEPORT: the kernel spreads new connections
            seen = set()
            for _ in range(20):
                async with httpx.AsyncClient() as client:  # a new connection each time
                    seen.add((await client.get(url)).json()["replica"])
            assert seen == {"a", "b"}
        async with httpx.AsyncClient() as client:  # the second closed: the first still answers
            assert (await client.get(url)).json() == {"replica": "a"}
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_a_stack_refuses_an_api_port_another_listener_shares() -> None:
    """Another stack's replica listens with SO_REUSEPORT, which ours would join (the kernel would split clients
    between the two stacks): the stack refuses the port before starting anything, and takes it once it is free."""
    asyncio.run(refused_while_shared())


async def refused_while_shared() -> None:
    port = free_port("127.0.0.1")
    other = app_named("another stack")
    serve_directly(other, "127.0.0.1", port)
    async with other.router.lifespan_context(other):
        with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{port} is taken"):
            refuse_taken_port("127.0.0.1", port)
    refuse_taken_port("127.0.0.1", port)  # free again
    refuse_taken_port("127.0.0.1", 0)  # a free port is chosen later


def test_up_stops_before_starting_anything_on_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"MNEMOFLOW_CONFIG": str(tmp_path / "none.toml"), "MNEMOFLOW_API_HOST": "127.0.0.1"}
        result = CliRunner().invoke(app, ["up", "--port", str(port), "--data-dir", str(tmp_path / "data")], env=env)
    assert result.exit_code == 2, result.output
    assert f"127.0.0.1:{port} is taken" in " ".join(result.output.split())
    assert not (tmp_path / "data").exists()  # no broker, no Ray, no API key: nothing was started
