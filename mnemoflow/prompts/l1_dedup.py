"""L1 dedup prompt (docs/tdam-spec.md §3.4): one batched call deciding store / update / merge / skip for the new
memories that the similarity gate could not decide. The pool holds only candidates of this user; the pipeline rejects
``target_ids`` that are not candidates of that memory."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field

from mnemoflow.memory.l1.models import DedupDecision
from mnemoflow.ports.llm import ChatMessage

VERSION = "l1-dedup/1"


class DedupOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decisions: list[DedupDecision] = Field(max_length=20)


@dataclass(frozen=True, slots=True)
class PoolItem:
    record_id: str
    content: str
    type: str
    priority: int


@dataclass(frozen=True, slots=True)
class NewItem:
    record_id: str
    content: str
    type: str
    priority: int
    candidate_ids: list[str]


SYSTEM = """You detect duplicates and conflicts between NEW memories and EXISTING memories of one user.
For each new memory choose one action:
- store: genuinely new information.
- skip: an existing memory already says this or says it better.
- update: same fact or event and the new one is more specific, newer, or corrects it; it replaces target_ids.
- merge: complementary information about the same fact or event; write one fuller memory replacing target_ids.
target_ids must be ids from that memory's candidates. For update and merge give merged_content (keeping still
valid old details), merged_type and merged_priority. Repeated preference -> merge; explicit change -> update;
identical -> skip. Answer with one decision per new memory."""


def build_messages(pool: list[PoolItem], new: list[NewItem]) -> list[ChatMessage]:
    existing = json.dumps([asdict(p) for p in pool], ensure_ascii=False, indent=1) if pool else "(empty)"
    parts = [f"EXISTING memories:\n{existing}"]
    for i, item in enumerate(new, 1):
        body = {k: v for k, v in asdict(item).items() if k != "candidate_ids"}
        parts.append(
            f"NEW {i}: {json.dumps(body, ensure_ascii=False)}\n"
            f"candidates: {', '.join(item.candidate_ids) or 'none (store)'}"
        )
    return [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content="\n\n".join(parts))]
