"""Which scope an extracted atom gets (docs/concepts/scopes.md): from its type, its sources and its author, in code.

Facts about the user (``persona``, and ``episodic`` the user said) are shared with every agent serving the user; an
instruction, and what the agent itself told the user (an atom citing only assistant messages), belong to the agent
that had the conversation, or to its team when the author is a team with no agent, and are shared when the author
is the default agent (no agent, no team: today's behaviour). A source message that asked for a visibility
overrides the type; a draft citing several messages takes the narrowest scope they give.

Why not ask the model: the scope is an access boundary. The extractor only ever sees one author's messages
(:func:`~mnemoflow.memory.l1.window.split_by_author`), and a rule over its output cannot be talked into widening it.
"""

from __future__ import annotations

from collections.abc import Sequence

from mnemoflow.memory.l0 import L0Message
from mnemoflow.memory.l1.models import AtomDraft
from mnemoflow.memory.l1.window import Author
from mnemoflow.scopes import SHARED, ScopeKind, narrowest, own_scope, requested_scope


def is_private_kind(draft: AtomDraft, sources: Sequence[L0Message]) -> bool:
    """An instruction to the agent, or what the agent said (every source an assistant message)."""
    return draft.type == "instruction" or (bool(sources) and all(m.role == "assistant" for m in sources))


def decide_scope(draft: AtomDraft, sources: Sequence[L0Message], author: Author, asked: ScopeKind | None = None) -> str:
    """The scope of ``draft``, extracted from ``sources`` (its cited messages, all of ``author``), or remembered
    through the API with no source and, perhaps, the visibility the request ``asked`` for."""
    if asked is not None:
        return requested_scope(asked, author.agent, author.team)
    by_type = own_scope(author.agent, author.team) if is_private_kind(draft, sources) else SHARED
    scopes = [
        requested_scope(m.visibility, author.agent, author.team) if m.visibility is not None else by_type
        for m in sources
    ]
    return narrowest(scopes) if scopes else by_type
