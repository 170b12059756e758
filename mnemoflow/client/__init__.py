"""The Python SDK: :class:`Client` and :class:`AsyncClient` over httpx, with the API's own pydantic models.

Every write is idempotent by its id, so the clients retry what may not have arrived; errors are typed
(:mod:`mnemoflow.client.errors`); list endpoints come as iterators that fetch page by page.
"""

from mnemoflow.client.clients import AsyncClient, Client
from mnemoflow.client.errors import (
    ApiError,
    ApiUnreachable,
    Conflict,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
)
from mnemoflow.events import ToolResultIn, TurnIn

__all__ = [
    "ApiError",
    "ApiUnreachable",
    "AsyncClient",
    "Client",
    "Conflict",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "ServerError",
    "ToolResultIn",
    "TurnIn",
    "Unauthorized",
]
