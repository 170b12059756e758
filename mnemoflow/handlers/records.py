"""What a handler takes in (raw topic records) and what it parks (dead letters), with the parsing between them.

A record that does not parse is parked at once with the reason (it never will parse); where it came from
(topic, partition, offset) and its bytes go with it, so an operator can fix and replay it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict

from mnemoflow.capture import parse_batch

E = TypeVar("E", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One record as the consumer received it (``topic`` None: made by a handler, not read from a topic).
    ``headers`` are read only when tracing is on (they carry the trace context): None otherwise."""

    value: bytes
    key: bytes | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None = None


class DeadLetter(BaseModel):
    """One record of ``mnemoflow.dead-letters``: the parked record's origin and bytes, and why it was parked."""

    model_config = ConfigDict(frozen=True)

    topic: str | None
    partition: int | None
    offset: int | None
    key: str
    value_b64: str
    reason: str
    parked_at: AwareDatetime

    @classmethod
    def of(cls, record: RawRecord, reason: str, at: datetime) -> DeadLetter:
        return cls(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            key=(record.key or b"").decode(errors="replace"),
            value_b64=base64.b64encode(record.value).decode(),
            reason=reason,
            parked_at=at,
        )

    @property
    def value(self) -> bytes:
        """The parked record's bytes."""
        return base64.b64decode(self.value_b64)


@dataclass(frozen=True, slots=True)
class Parsed(Generic[E]):
    """The events of a batch that parsed, the records they came from (same order), and the rejects, parked."""

    events: list[E]
    records: list[RawRecord]
    parked: list[DeadLetter]


def parse_records(model: type[E], records: Sequence[RawRecord], what: str, at: datetime) -> Parsed[E]:
    parsed = parse_batch(model, [r.value for r in records])
    if not parsed.rejected:  # the usual batch: no index to filter the records by
        return Parsed(parsed.events, list(records), [])
    bad = {i for i, _ in parsed.rejected}
    parked = [DeadLetter.of(records[i], f"invalid {what}: {rejected.reason}", at) for i, rejected in parsed.rejected]
    return Parsed(parsed.events, [r for i, r in enumerate(records) if i not in bad], parked)
