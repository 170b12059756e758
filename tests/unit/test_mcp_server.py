"""The MCP server through the official SDK's own client, over stdio (a subprocess, as a host starts it) and over
streamable HTTP (a key per request), with the API app and its fakes behind it."""

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.services import asgi_server
from tests.unit.test_api_memory import setup  # noqa: F401 - the memory app with fakes, shared as a fixture

mcp = pytest.importorskip("mcp")
httpx2 = pytest.importorskip("httpx2")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mnemoflow.mcp.server import build_server  # noqa: E402

TOOLS = {
    "memory_search",
    "conversation_search",
    "remember",
    "forget",
    "get_persona",
    "drill_down",
    "skill_search",
    "skill_read",
}


@pytest.fixture
def api_url(setup: tuple) -> Iterator[str]:  # noqa: F811
    with asgi_server(setup[0].app) as url:
        yield url


async def exercise(client: Client) -> dict[str, Any]:
    tools = {t.name for t in (await client.list_tools()).tools}
    found = await client.call_tool("memory_search", {"user": "ana", "query": "what milk does she drink"})
    hit = found.structured_content["result"][0]
    drilled = await client.call_tool("drill_down", {"user": "ana", "atom_id": hit["id"]})
    persona = await client.call_tool("get_persona", {"user": "ana"})
    convo = await client.call_tool("conversation_search", {"user": "ana", "query": "oat milk"})
    missing = await client.call_tool("drill_down", {"session": "s", "node_id": "N9"})
    remembered = await client.call_tool("remember", {"user": "ana", "text": "Ana likes green tea"})
    skills = await client.call_tool("skill_search", {"query": "fix a timezone crash"})
    no_skill = await client.call_tool("skill_read", {"name": "dateparse-timezone"})
    bad_name = await client.call_tool("skill_read", {"name": "../etc"})
    return {
        "skills": skills.structured_content["result"],
        "no_skill": no_skill,
        "bad_name": bad_name,
        "tools": tools,
        "hit": hit,
        "drilled": drilled.structured_content,
        "persona": persona,
        "convo": convo.structured_content["result"],
        "missing": missing,
        "remembered": remembered,
    }


def check(out: dict[str, Any]) -> None:
    assert out["tools"] == TOOLS
    assert "oat milk" in out["hit"]["text"]
    assert [m["id"] for m in out["drilled"]["atom"]["messages"]] == out["hit"]["source_message_ids"]
    assert out["persona"].structured_content == {"result": ""}  # no persona yet: empty, not an error
    assert out["convo"][0]["message"]["id"] == "m0"
    assert out["missing"].is_error and "no entries for node N9" in out["missing"].content[0].text
    assert out["remembered"].structured_content["status"] in ("pending", "applied")
    assert out["skills"] == []  # none distilled in this tenant yet
    assert out["no_skill"].is_error and "no skill named dateparse-timezone" in out["no_skill"].content[0].text
    assert out["bad_name"].is_error and "is not a skill name" in out["bad_name"].content[0].text


def test_stdio_with_the_hosts_key(api_url: str) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mnemoflow.cli", "mcp", "--api", api_url, "--key", "key-acme"]
    )

    async def run() -> dict[str, Any]:
        async with Client(params) as client:
            return await exercise(client)

    check(asyncio.run(run()))


def test_streamable_http_authenticates_each_tenant(api_url: str) -> None:
    server = build_server(api_url, public_url="http://127.0.0.1")
    app = server.streamable_http_app()
    with asgi_server(app, lifespan="on") as mcp_url:

        def connect(key: str | None) -> Client:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            http = httpx2.AsyncClient(headers=headers, timeout=30)
            return Client(streamable_http_client(f"{mcp_url}/mcp", http_client=http))

        async def run() -> tuple[dict[str, Any], Any, list[str]]:
            async with connect("key-acme") as client:
                out = await exercise(client)
            async with connect("key-other") as other:  # another tenant: sees none of acme's memories
                theirs = await other.call_tool("memory_search", {"user": "ana", "query": "oat milk"})
            refused = []
            for key in ("wrong", None):
                try:
                    async with connect(key) as client:
                        await client.list_tools()
                except Exception as exc:  # noqa: BLE001 - the SDK's error type for a 401 is what we inspect
                    refused.append(repr(exc))
            return out, theirs, refused

        out, theirs, refused = asyncio.run(run())
        statuses = [
            httpx.post(f"{mcp_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=h).status_code
            for h in ({"Authorization": "Bearer wrong"}, {})
        ]
    check(out)
    assert theirs.structured_content == {"result": []}
    assert len(refused) == 2 and statuses == [401, 401]  # the SDK client gives up; the endpoint says why
