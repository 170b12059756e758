"""Events on the Kafka topics: what an agent submits, stamped with its tenant.

The API validates the ``*In`` bodies; the tenant comes from the API key, never from the body. The events are
the wire format of ``mnemoflow.turns`` (key ``tenant/user``) and ``mnemoflow.tool-results`` (key
``tenant/session``). Each carries the id that makes every sink idempotent.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

from mnemoflow.ids import SafeId, WireId
from mnemoflow.scopes import ScopeKind, visibility_has_its_owner

MAX_TEXT_CHARS = 256 * 1024  # one event must fit in a Kafka record (1 MB by default) even when JSON-escaped


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _utc(ts: datetime) -> datetime:
    return ts.astimezone(UTC)


_AGENT = Field(
    None,
    description="The agent that had this conversation (docs/concepts/scopes.md); none: the default agent.",
    exclude_if=lambda v: v is None,
)
_TEAM = Field(
    None,
    description="The agent's team; its memories marked 'team' are shared within it.",
    exclude_if=lambda v: v is None,
)
_UNSET_IS_ABSENT = Field(None, exclude_if=lambda v: v is None)
"""An event of a client that names no agent is the same JSON as before scopes, so a worker of the previous release
still reads it during a rolling upgrade (the events forbid unknown fields)."""


class TurnIn(_Strict):
    """One conversation message as an agent submits it."""

    message_id: SafeId
    user: SafeId
    session: SafeId
    role: Literal["user", "assistant"]
    content: str = Field(max_length=MAX_TEXT_CHARS)
    ts: AwareDatetime | None = Field(None, description="When the message was said; the server's time if absent.")
    name: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description=(
            "Who said it (OpenAI's message `name`), e.g. the user's display name: atoms then name their subject."
        ),
    )
    agent: SafeId | None = _AGENT
    team: SafeId | None = _TEAM
    visibility: ScopeKind | None = Field(
        None,
        description="Who may see the memories of this message: 'shared' (every agent of the user), 'team' or "
        "'agent' (only this one); absent: decided by the kind of memory (facts about the user are shared).",
        exclude_if=lambda v: v is None,
    )
    # That 'team' has a team and 'agent' an agent is checked once the key's agent and team are filled in
    # (serving.security.acting): a bound key need not repeat them. The wire event checks it again.


class ToolResultIn(_Strict):
    """One tool call and its raw output."""

    tool_call_id: SafeId
    session: SafeId
    user: SafeId | None = None
    tool_name: str = Field(min_length=1, max_length=256)
    arguments: str | dict[str, Any] = Field(default="", description="The call's arguments, JSON text or object.")
    content: str = Field(max_length=MAX_TEXT_CHARS, description="Raw tool output; stored byte-exact.")
    ts: AwareDatetime | None = None
    agent: SafeId | None = _AGENT
    team: SafeId | None = _TEAM


class TurnEvent(_Strict):
    tenant: WireId
    message_id: WireId
    user: WireId
    session: WireId
    role: Literal["user", "assistant"]
    content: str
    ts: AwareDatetime
    name: str | None = None
    agent: WireId | None = _UNSET_IS_ABSENT
    team: WireId | None = _UNSET_IS_ABSENT
    visibility: ScopeKind | None = _UNSET_IS_ABSENT

    _ts_utc = field_validator("ts")(_utc)
    _owned = model_validator(mode="after")(visibility_has_its_owner)

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.user}"

    @classmethod
    def from_input(cls, tenant: str, body: TurnIn, now: datetime) -> TurnEvent:
        return cls(tenant=tenant, **body.model_dump(exclude={"ts"}), ts=body.ts or now)


class ToolResultEvent(_Strict):
    tenant: WireId
    tool_call_id: WireId
    session: WireId
    user: WireId | None = None
    tool_name: str
    arguments: str
    content: str
    ts: AwareDatetime
    agent: WireId | None = _UNSET_IS_ABSENT
    team: WireId | None = _UNSET_IS_ABSENT

    _ts_utc = field_validator("ts")(_utc)

    @property
    def key(self) -> str:
        return f"{self.tenant}/{self.session}"

    @classmethod
    def from_input(cls, tenant: str, body: ToolResultIn, now: datetime) -> ToolResultEvent:
        args = body.arguments if isinstance(body.arguments, str) else json.dumps(body.arguments, sort_keys=True)
        fields = body.model_dump(exclude={"ts", "arguments"})
        return cls(tenant=tenant, **fields, arguments=args, ts=body.ts or now)
