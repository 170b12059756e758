"""Turning raw topic records into typed events, and what a batch of them did.

Records that do not parse are not retried (they never will parse): the caller parks them on the dead-letter
topic with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

E = TypeVar("E", bound=BaseModel)


@dataclass(frozen=True)
class Rejected:
    value: bytes
    reason: str


@dataclass(frozen=True)
class Parsed(Generic[E]):
    events: list[E]
    rejected: list[tuple[int, Rejected]]  # (index in the batch, why)


def parse_batch(model: type[E], values: Sequence[bytes]) -> Parsed[E]:
    """Each value validated on its own by the model's validator: a value is one record's JSON, and a bad one is
    rejected alone. The validator is called directly, without ``model_validate_json``'s per-call argument checks
    (a tenth of a worker's parsing, which runs for every event it consumes); one call over a JSON array of the
    batch was measured no faster, and would let one record's bytes pose as several."""
    validate = model.__pydantic_validator__.validate_json
    events: list[E] = []
    rejected: list[tuple[int, Rejected]] = []
    for i, value in enumerate(values):
        try:
            events.append(validate(value))
        except ValidationError as exc:
            reason = "; ".join(_describe(e) for e in exc.errors()[:5])
            rejected.append((i, Rejected(value, reason)))
    return Parsed(events, rejected)


def _describe(error: Any) -> str:
    where = ".".join(map(str, error["loc"]))
    return f"{where}: {error['msg']}" if where else str(error["msg"])
