"""Dashboard login: the API key in an HttpOnly cookie, resolved and rate limited exactly like the JSON API's header.

Why a cookie: a browser cannot add ``Authorization`` to a link it follows. The cookie is HttpOnly (no script reads
it), SameSite=Strict (no other site's page sends it) and scoped to ``/ui``; the JSON routes never read it, so it
cannot be used to write through them.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import HTTPException, Request

from serving.security import TenantGate

COOKIE = "mnemoflow_key"
LOGIN = "/ui/login"


def safe_next(target: str | None) -> str:
    """Where to go after logging in: a dashboard path only (never another site: no open redirect)."""
    if target and (target == "/ui" or target.startswith("/ui/")) and "\\" not in target and "//" not in target:
        return target
    return "/ui"


class UiGate:
    """FastAPI dependency of the dashboard pages: the cookie's key → its tenant → the tenant's rate limit.

    No key, or one that no longer resolves (rotated away): a redirect to the login page, which brings the person
    back to the page asked for.
    """

    def __init__(self, gate: TenantGate) -> None:
        self._gate = gate

    def tenant_for(self, key: str) -> str | None:
        return self._gate.keys.tenant_for(key) if key else None

    def __call__(self, request: Request) -> str:
        tenant = self.tenant_for(request.cookies.get(COOKIE, ""))
        if tenant is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            raise HTTPException(303, "log in first", headers={"Location": f"{LOGIN}?next={quote(target, safe='')}"})
        return self._gate.admit(tenant)
