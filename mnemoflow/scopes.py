"""Scopes: which agents of a tenant may see a piece of one user's memory (docs/concepts/scopes.md).

A scope is ``shared`` (every agent serving the user), ``team:<team>`` or ``agent:<agent>``. Why a plain string and
not a model: it is stored as is in record lines, index rows and filter expressions, so a ``records/*.jsonl`` line
reads plainly and the string is its own filter literal; :data:`Scope` checks its shape at every boundary (the part
after the colon follows the id rule of :mod:`mnemoflow.ids`, so a scope never needs escaping in a filter).

The writer's side is :func:`own_scope` / :func:`requested_scope` (who said it); the reader's side is
:class:`Viewer` (who asks). A caller with no agent and no team is the anonymous default agent: everything it
writes is shared and, unless it holds an admin key, it sees only shared memory. :class:`Caller` is what an API key
binds: a tenant admin, or one agent or team of a tenant, and what a request may then act as.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

from mnemoflow.errors import NotFound
from mnemoflow.ids import ID_MAX, ID_PATTERN, SafeId, check_id

ScopeKind = Literal["shared", "team", "agent"]
"""What a request may ask for a message's memories (``visibility``); resolved with its author into a scope."""

SHARED: Final = "shared"
SCOPE_PATTERN = rf"^(shared|(team|agent):{ID_PATTERN.removeprefix('^').removesuffix('$')})$"
Scope = Annotated[str, StringConstraints(max_length=ID_MAX + len("agent:"), pattern=SCOPE_PATTERN)]
"""``shared``, ``team:<id>`` or ``agent:<id>``."""


def scope_parts(scope: str) -> tuple[str, str]:
    """``("agent", "coder")`` for ``agent:coder``, ``("shared", "")`` for ``shared``."""
    kind, _, name = scope.partition(":")
    return kind, name


def agent_scope(agent: str) -> str:
    return f"agent:{check_id(agent)}"


def team_scope(team: str) -> str:
    return f"team:{check_id(team)}"


def own_scope(agent: str | None, team: str | None) -> str:
    """The narrowest scope of an author: its agent's, else its team's, else shared (the default agent)."""
    if agent is not None:
        return agent_scope(agent)
    return team_scope(team) if team is not None else SHARED


def requested_scope(kind: ScopeKind, agent: str | None, team: str | None) -> str:
    """The scope a request asked for, with the author's ids. Raises ValueError (a 422 at the API) when the author
    lacks the id the kind needs: there is no team to share with, or no agent to keep it private to."""
    if kind == "shared":
        return SHARED
    if kind == "team":
        if team is None:
            raise ValueError("visibility 'team' needs a team: name the agent's team")
        return team_scope(team)
    if agent is None:
        raise ValueError("visibility 'agent' needs an agent: name the agent")
    return agent_scope(agent)


def visibility_has_its_owner(request: Any) -> Any:
    """A ``model_validator(mode="after")`` for models with ``agent``, ``team`` and ``visibility``: asking for 'team'
    needs a team and 'agent' an agent (a 422 with the reason at the API). A model without ``visibility`` passes."""
    if (kind := getattr(request, "visibility", None)) is not None:
        requested_scope(kind, request.agent, request.team)
    return request


_WIDTH = {"agent": 0, "team": 1, "shared": 2}


def narrowest(scopes: list[str]) -> str:
    """Of scopes of one author (so nested: its agent's within its team's within shared), the one fewest may see."""
    if not scopes:
        raise ValueError("narrowest of no scope")
    return min(scopes, key=lambda s: _WIDTH[scope_parts(s)[0]])


class Viewer(BaseModel):
    """Who reads as an agent: an agent of a team, a team, or the default agent (neither). (Reading every scope, as
    the admin routes do, is no viewer at all: ``visible=None`` in the index.)"""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: SafeId | None = None
    team: SafeId | None = None

    def scopes(self) -> tuple[str, ...]:
        """What the index filter takes: shared, then the team's, then the agent's."""
        out = [SHARED]
        if self.team is not None:
            out.append(team_scope(self.team))
        if self.agent is not None:
            out.append(agent_scope(self.agent))
        return tuple(out)


class Caller(BaseModel):
    """Who holds the API key of a request: a tenant admin (neither agent nor team: every key from before scopes), or
    a key bound to one agent (and its team) or to one team."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: SafeId
    agent: SafeId | None = None
    team: SafeId | None = None

    @property
    def admin(self) -> bool:
        return self.agent is None and self.team is None

    def acting_as(self, agent: str | None, team: str | None) -> tuple[str | None, str | None]:
        """The (agent, team) a request runs as, given what its body names. An admin key acts as whatever it names;
        a bound key as itself, filling in what the body left out. A bound key naming another agent or team gets
        NotFound, the answer to another tenant's user: the key learns nothing about what exists."""
        if self.admin:
            return agent, team
        if agent not in (None, self.agent) or team not in (None, self.team):
            named = f"agent {agent}" if agent not in (None, self.agent) else f"team {team}"
            raise NotFound(f"no {named} for this key")
        return self.agent, self.team

    def sees(self, scope: str) -> bool:
        """Whether the key may read this scope's memory where it names the scope itself (persona, scenes): an
        admin key every scope, a bound key its own viewer's."""
        return self.admin or scope in self.viewer(None, None).scopes()

    def viewer(self, agent: str | None, team: str | None) -> Viewer:
        """What an agent-facing read (recall, memory search) may see: the agent and team the request acts as. An
        admin key naming nobody recalls as the default agent, shared memory only, so that a client from before
        scopes never receives a named agent's private memory; admin keys see every scope on the admin routes."""
        acting_agent, acting_team = self.acting_as(agent, team)
        return Viewer(agent=acting_agent, team=acting_team)
