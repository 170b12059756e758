"""Per-tenant API keys (admin keys, and keys bound to one agent or team), per-tenant rate limits and the request
body limit."""

from __future__ import annotations

import hmac
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, Self, TypeVar

from fastapi import HTTPException, Request
from pydantic import SecretStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemoflow.config import AgentKey
from mnemoflow.errors import NotFound
from mnemoflow.ratelimit import RateLimiter, retry_after
from mnemoflow.scopes import Caller, visibility_has_its_owner

ADMIN_ONLY = (
    "this route needs a tenant admin key: a key bound to an agent or a team submits turns and tool results and "
    "recalls, and reads nothing else yet (docs/concepts/scopes.md)"
)


class KeyRing:
    """Maps an API key to its holder with constant-time comparisons against every key: a tenant's admin keys
    (``api_keys``) and its keys bound to one agent or team (``agent_keys``, docs/concepts/scopes.md).

    A tenant may hold several keys (rotation: add the new key, move clients, remove the old one); settings refuse
    a key held twice, so at most one holder matches.
    """

    def __init__(
        self, keys: dict[str, list[SecretStr]], agent_keys: Mapping[str, list[AgentKey]] | None = None
    ) -> None:
        self._keys = [(Caller(tenant=t), key.get_secret_value().encode()) for t, ring in keys.items() for key in ring]
        self._keys += [
            (Caller(tenant=t, agent=k.agent, team=k.team), k.key.get_secret_value().encode())
            for t, ring in (agent_keys or {}).items()
            for k in ring
        ]

    def caller_for(self, presented: str) -> Caller | None:
        candidate = presented.encode()
        found = None
        for caller, key in self._keys:
            if hmac.compare_digest(candidate, key):  # no early exit: timing does not tell which key matched
                found = caller
        return found

    def tenant_for(self, presented: str) -> str | None:
        """The tenant of an admin key (what the dashboard logs in with); None for a bound key or an unknown one."""
        caller = self.caller_for(presented)
        return caller.tenant if caller is not None and caller.admin else None

    def caller(self, request: Request) -> Caller:
        """The holder of the request's key, or 401."""
        header = request.headers.get("authorization", "")
        presented = header[7:] if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
        caller = self.caller_for(presented) if presented else None
        if caller is None:
            raise HTTPException(401, "missing or unknown API key (send 'Authorization: Bearer <key>')")
        return caller

    def __call__(self, request: Request) -> str:
        """FastAPI dependency of the routes that read a tenant's memory unfiltered: the admin key's tenant, 401 for
        an unknown key, 403 for a key bound to an agent or a team (fail closed until a route filters by scope)."""
        caller = self.caller(request)
        if not caller.admin:
            raise HTTPException(403, ADMIN_ONLY)
        return caller.tenant


class Authored(Protocol):
    """A request body that names who it comes from: a turn, a tool result, a memory to remember."""

    @property
    def agent(self) -> str | None: ...

    @property
    def team(self) -> str | None: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...


Submitted = TypeVar("Submitted", bound=Authored)


def acting(caller: Caller, items: Sequence[Submitted]) -> list[Submitted]:
    """The submitted bodies as the key's holder: a bound key's agent and team filled in where the body left them
    out; 404 when the body names another agent or team (as for another tenant's user), 422 when one asks for
    'team' or 'agent' visibility with no team or agent to keep it to; nothing of a refused batch is published."""
    out = []
    for i, item in enumerate(items):
        try:
            agent, team = caller.acting_as(item.agent, item.team)
            out.append(visibility_has_its_owner(item.model_copy(update={"agent": agent, "team": team})))
        except NotFound as exc:
            raise HTTPException(404, str(exc)) from exc
        except ValueError as exc:
            raise HTTPException(422, f"item {i}: {exc}" if len(items) > 1 else str(exc)) from exc
    return out


class TenantGate:
    """FastAPI dependency of the authenticated routes: the key resolves the tenant (else 401), then the tenant's
    token bucket admits the request (else 429 with ``Retry-After``). Unknown keys never reach a bucket, so the
    limiter holds at most one bucket per configured tenant."""

    def __init__(self, keys: KeyRing, limiter: RateLimiter) -> None:
        self.keys = keys
        self._limiter = limiter

    def __call__(self, request: Request) -> str:
        return self.admit(self.keys(request))

    def caller(self, request: Request) -> Caller:
        """FastAPI dependency of the routes that act as an agent or team (submissions, recall): the key's holder,
        admitted by its tenant's bucket."""
        caller = self.keys.caller(request)
        self.admit(caller.tenant)
        return caller

    def admit(self, tenant: str) -> str:
        """The rate limit alone, for a tenant already resolved from a key (the dashboard's key is a cookie)."""
        wait = self._limiter.acquire(tenant)
        if wait > 0:
            limit, seconds = self._limiter.limit(tenant), retry_after(wait)
            raise HTTPException(
                429,
                f"rate limit of tenant {tenant} exceeded ({limit.per_second:g} requests/s, burst {limit.burst}); "
                f"retry in {seconds}s",
                headers={"Retry-After": str(seconds)},
            )
        return tenant


class BodyLimit:
    """ASGI middleware: refuse bodies over ``max_bytes`` with 413, by header or while reading.

    The body is read here (at most ``max_bytes`` are held) and handed on whole, so a chunked upload without a
    Content-Length cannot get past the limit either.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, suffix_limits: Mapping[str, int] | None = None) -> None:
        """``suffix_limits``: other limits for paths ending so (a bundle import is larger than any event batch)."""
        self.app = app
        self.max_bytes = max_bytes
        self.suffix_limits = dict(suffix_limits or {})

    def _limit(self, scope: Scope) -> int:
        path = scope.get("path", "")
        return next((n for suffix, n in self.suffix_limits.items() if path.endswith(suffix)), self.max_bytes)

    async def _reject(self, send: Send, limit: int) -> None:
        body = json.dumps({"detail": f"request body over {limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await self._reject(send, limit)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # the client went away; let the app see it
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await self._reject(send, limit)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def buffered() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, buffered, send)
