"""The MCP server: mnemoflow's agent tools for any MCP host, built with the official ``mcp`` SDK.

It is a front door, not a second memory: every tool is one call of the SDK (:mod:`mnemoflow.client`) to the
HTTP API, so tenancy, validation and rate limits are the API's own. Over stdio the host starts it with a tenant's
API key; over streamable HTTP each request carries ``Authorization: Bearer <key>``, the key is checked against
the API (``GET /v1/whoami``, cached for a minute) and the tools run with that caller's key, so one server serves
every tenant and a key sees only its own tenant.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from mnemoflow.client import AsyncClient, NotFound, Unauthorized
from mnemoflow.client.models import AtomDrillDown, ConversationHitOut, DrilledEntry, SkillSummary
from mnemoflow.errors import ConfigError
from mnemoflow.governance.operations import OperationStatus
from mnemoflow.lru import LRU
from mnemoflow.memory.recall.recaller import RecallHit

try:
    from mcp.server import MCPServer
    from mcp.server.auth.middleware.auth_context import get_access_token
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError as exc:  # pragma: no cover - the extra is part of dev
    raise ConfigError("the MCP server needs the official MCP SDK: pip install 'mnemoflow[mcp]'") from exc

INSTRUCTIONS = (
    "Long-term memory of the user and drill-down into offloaded tool output. Search memories before asking the "
    "user something they may have said before; drill down when a recalled memory or a canvas node is not enough. "
    "Before a task like one done before, look for a skill (skill_search, skill_read): its steps and pitfalls."
)
AtomKind = Literal["persona", "episodic", "instruction"]
UserArg = Annotated[str, Field(description="The user id whose memory to use.")]


class DrillDown(BaseModel):
    """What ``drill_down`` found: an atom's record and source messages, or a canvas node's entries with their
    raw outputs, or one tool call's raw output."""

    atom: AtomDrillDown | None = None
    entries: list[DrilledEntry] = Field(default_factory=list)
    raw: str | None = None


class _Clients:
    """One SDK client per API key (bounded), and which tenant a key belongs to (checked once a minute)."""

    def __init__(self, api_url: str, ttl_s: float = 60.0) -> None:
        self._api_url = api_url
        self._clients: LRU[str, AsyncClient] = LRU(256)
        self._tenants: LRU[str, tuple[str, float]] = LRU(1024)
        self._ttl = ttl_s

    def get(self, key: str) -> AsyncClient:
        return self._clients.get_or_load(key, lambda k: AsyncClient(self._api_url, k, timeout=30))

    async def tenant(self, key: str) -> str | None:
        known = self._tenants.pop(key)
        if known is not None and known[1] > time.monotonic():
            self._tenants.put(key, known)
            return known[0]
        try:
            tenant = await self.get(key).whoami()
        except Unauthorized:
            return None
        self._tenants.put(key, (tenant, time.monotonic() + self._ttl))
        return tenant


class KeyVerifier:
    """The MCP SDK's ``TokenVerifier`` over mnemoflow API keys: a key is valid when the API names its tenant."""

    def __init__(self, clients: _Clients) -> None:
        self._clients = clients

    async def verify_token(self, token: str) -> AccessToken | None:
        tenant = await self._clients.tenant(token)
        return None if tenant is None else AccessToken(token=token, client_id=tenant, scopes=[])


def build_server(api_url: str, api_key: str | None = None, public_url: str | None = None) -> MCPServer:
    """``api_key``: the stdio shape (one tenant, the host's key). Without it, the HTTP shape: every request must
    carry a key, checked against the API; ``public_url`` is where the server is reached (``http://host:port``)."""
    clients = _Clients(api_url)
    if api_key is None:
        resource = (public_url or "http://127.0.0.1:8765").rstrip("/") + "/mcp"
        auth = AuthSettings(issuer_url=api_url, resource_server_url=resource, validate_token_resource=False)
        server = MCPServer("mnemoflow", instructions=INSTRUCTIONS, auth=auth, token_verifier=KeyVerifier(clients))
    else:
        server = MCPServer("mnemoflow", instructions=INSTRUCTIONS)

    def api() -> AsyncClient:
        token = get_access_token()
        key = token.token if token is not None else api_key
        if key is None:
            raise ToolError("no API key: send 'Authorization: Bearer <mnemoflow key>'")
        return clients.get(key)

    @server.tool()
    async def memory_search(
        user: UserArg, query: str, limit: Annotated[int, Field(ge=1, le=20)] = 5, type: AtomKind | None = None
    ) -> list[RecallHit]:
        """Search the user's long-term memories (facts, preferences, instructions, events); each hit has an id
        for drill_down and the ids of the messages it came from."""
        return await api().memory_search(user, query, limit, type)

    @server.tool()
    async def conversation_search(
        user: UserArg, query: str, limit: Annotated[int, Field(ge=1, le=50)] = 5, session: str | None = None
    ) -> list[ConversationHitOut]:
        """Search the user's raw past conversation (every message as said), optionally within one session."""
        return await api().conversation_search(user, query, limit, session)

    @server.tool()
    async def remember(
        user: UserArg, text: str, type: AtomKind = "persona", priority: Annotated[int, Field(ge=-1, le=100)] = 50
    ) -> OperationStatus:
        """Store a memory about the user now, without waiting for extraction (deduplicated against what is
        known). Answers once it is applied, or pending if that takes over five seconds."""
        return await api().remember(user, text, type, priority, wait=5)

    @server.tool()
    async def forget(user: UserArg, atom_id: str) -> OperationStatus:
        """Delete one memory (an id from memory_search): it leaves recall and search at once."""
        try:
            return await api().forget(user, atom_id, wait=5)
        except NotFound as exc:
            raise ToolError(f"no memory {atom_id} for user {user}") from exc

    @server.tool()
    async def get_persona(user: UserArg) -> str:
        """The user's persona: who they are and how they like to work, with a map of their memory scenes."""
        try:
            return await api().persona(user)
        except NotFound:
            return ""

    @server.tool()
    async def skill_search(query: str, limit: Annotated[int, Field(ge=1, le=20)] = 3) -> list[SkillSummary]:
        """Find skills (procedures learnt from finished tasks) that fit a request: name, when to use, area."""
        return await api().search_skills(query, limit)

    @server.tool()
    async def skill_read(name: str) -> str:
        """A skill by name (from the skills index or skill_search): when to use it, its steps and its pitfalls,
        each with the session#node it came from (drill_down with that session and node_id for the raw output)."""
        try:
            return await api().skill(name)
        except NotFound as exc:
            raise ToolError(f"no skill named {name}") from exc
        except ValueError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    async def drill_down(
        user: str | None = None,
        atom_id: str | None = None,
        session: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
    ) -> DrillDown:
        """From a summary to its source. An atom (user + atom_id): its record and the messages it came from. A
        canvas node (session + node_id): its offload entries with each raw tool output. A tool call (session +
        tool_call_id): its raw output, byte-exact."""
        client = api()
        try:
            if atom_id is not None and user is not None:
                return DrillDown(atom=await client.atom(user, atom_id))
            if session is not None and node_id is not None:
                return DrillDown(entries=await client.node(session, node_id))
            if session is not None and tool_call_id is not None:
                raw = await client.ref(session, tool_call_id)
                return DrillDown(raw=raw.decode("utf-8", errors="replace"))
        except NotFound as exc:
            raise ToolError(exc.detail) from exc
        raise ToolError("give user and atom_id, or session and node_id, or session and tool_call_id")

    return server


def run(server: MCPServer, transport: Literal["stdio", "http"], host: str = "127.0.0.1", port: int = 8765) -> Any:
    """Serve until stopped: stdio for a host that starts the server, streamable HTTP at ``/mcp`` otherwise."""
    if transport == "stdio":
        return server.run("stdio")
    return server.run("streamable-http", host=host, port=port)
