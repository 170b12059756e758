"""Typed errors of the SDK, one per answer a caller handles differently, all under :class:`MnemoflowError`.

::

    MnemoflowError
    └── ApiError                  the API answered with an error status (``status``, ``detail``)
        ├── InvalidRequest        400 / 422: fix the request; nothing was written
        ├── Unauthorized          401: the key is missing or unknown
        ├── NotFound              404
        ├── Conflict              409
        ├── PayloadTooLarge       413: send smaller batches
        ├── RateLimited           429 after every retry (``retry_after`` seconds)
        └── ServerError           5xx after every retry
    └── ApiUnreachable            no answer (connect, read or write failed) after every retry
"""

from __future__ import annotations

import httpx

from mnemoflow.errors import MnemoflowError


class ApiError(MnemoflowError):
    """The API answered with an error status; ``detail`` is its reason."""

    def __init__(self, status: int, detail: str, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path} -> {status}: {detail}".strip())
        self.status = status
        self.detail = detail


class InvalidRequest(ApiError):
    """400 or 422: the request was refused before anything was written. Fix it; retrying will not help."""


class Unauthorized(ApiError):
    """401: the API key is missing or unknown. Check the key you passed to the client."""


class NotFound(ApiError):
    """404: the user, session, atom, ref or node does not exist (yet: events land asynchronously)."""


class Conflict(ApiError):
    """409: an id was reused with a different body."""


class PayloadTooLarge(ApiError):
    """413: the body is over the server's limit (``MNEMOFLOW_MAX_BODY_BYTES``); send smaller batches."""


class RateLimited(ApiError):
    """429 on every try: the tenant's rate limit. ``retry_after`` is the server's last hint in seconds."""

    def __init__(self, status: int, detail: str, method: str = "", path: str = "", retry_after: float = 0) -> None:
        super().__init__(status, detail, method, path)
        self.retry_after = retry_after


class ServerError(ApiError):
    """5xx on every try: a part of the stack is down or failing; ``mnemoflow status`` names it."""


class ApiUnreachable(MnemoflowError):
    """No answer from the API on every try (connection refused, timeout). Check the URL and that it runs."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: InvalidRequest,
}


def error_for(response: httpx.Response) -> ApiError:
    """The typed error for an error response (the API's ``{"detail": ...}`` body, or its text)."""
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        detail = response.text
    detail = detail if isinstance(detail, str) else str(detail)
    method, path = response.request.method, response.request.url.path
    status = response.status_code
    if status == 429:
        return RateLimited(status, detail, method, path, retry_after=_retry_after(response))
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return cls(status, detail, method, path)


def _retry_after(response: httpx.Response) -> float:
    try:
        return max(0.0, float(response.headers.get("retry-after", "0")))
    except ValueError:
        return 0.0
