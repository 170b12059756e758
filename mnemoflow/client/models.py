"""Response bodies of the HTTP API that have no model in the core: the routes answer with these and the SDK parses
into them, so a field renamed on one side breaks the other's tests instead of a user's code."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.offload.entries import OffloadEntry


class Accepted(BaseModel):
    accepted: int


class ConversationHitOut(BaseModel):
    message: L0Message
    score: float


class AtomDrillDown(BaseModel):
    record: L1Record | None
    messages: list[L0Message]
    hidden: int = Field(0, description="Source messages of another agent's conversation, not shown to this key.")


class DrilledEntry(BaseModel):
    entry: OffloadEntry
    raw: str | None = Field(None, description="The raw output as UTF-8 text (see raw_b64 when it is not)")
    raw_b64: str | None = None
    ref_url: str


class WhoAmI(BaseModel):
    """The tenant an API key belongs to (``GET /v1/whoami``): how a front door checks a key without a write."""

    tenant: str
    agent: str | None = None
    """The agent a bound key acts as (docs/concepts/scopes.md); none for a tenant admin key."""
    team: str | None = None


class SkillSummary(BaseModel):
    """A skill as the list shows it: what it is for, where it applies, and its version."""

    name: str
    when_to_use: str
    area: str
    version: int
    updated: datetime
    uses: int
    engine: str
    sources: list[str]
    steps: int = Field(description="How many steps it has.")
    pitfalls: int = Field(description="How many pitfalls it has.")


class LearntOut(BaseModel):
    task: str = Field(description="<session>#<canvas number>")
    action: str = Field(description="store, merge or skip")
    skill: str | None
    reason: str
