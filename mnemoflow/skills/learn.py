"""The skill pass: every finished long task of a session, distilled and folded into the tenant's skills.

Two halves, so that the model's rewrite (async, slow) sits between them without holding files open: :func:`drafts`
reads and distils the tasks (heuristic), :func:`fold_all` folds the skills into the set and writes. With no model,
:func:`learn_session` runs both; with one, :func:`learn_session_with_model` rewrites each successful draft first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from mnemoflow.offload.owner import owner_of
from mnemoflow.ports.files import FileStore
from mnemoflow.ports.llm import LLM
from mnemoflow.skills.distil import Distilled, distil
from mnemoflow.skills.merge import Similarity, fold, lexical_similarity
from mnemoflow.skills.store import SkillStore
from mnemoflow.skills.tasks import task_traces
from mnemoflow.skills.writer import written_by_model

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Learnt:
    """What the pass did with one task: ``action`` (store, merge, skip), the skill written and why."""

    task: str
    action: str
    skill: str | None
    reason: str


def owner_agent(files: FileStore, tenant: str, session: str) -> str | None:
    """Whose skills a session's tasks become: its owner agent's own (skills are private by default, as in the
    system we re-implement), else None, the shared set."""
    owner = owner_of(files, tenant, session)
    return owner.agent if owner is not None else None


def drafts(
    files: FileStore, tenant: str, session: str, now: datetime, unfinished: Collection[str] = ()
) -> list[tuple[str, Distilled]]:
    """``(task key, distilled)`` for each canvas of the session but the ``unfinished`` ones (canvas file names:
    the task still going on)."""
    return [
        (trace.key, distil(trace, now))
        for trace in task_traces(files, tenant, session)
        if trace.canvas_name not in unfinished
    ]


def fold_all(
    store: SkillStore,
    found: list[tuple[str, Distilled]],
    now: datetime,
    similarity: Similarity = lexical_similarity,
    where: str = "",
) -> list[Learnt]:
    """Fold each distilled task into ``store`` in order. Idempotent: a task already among a skill's sources is
    skipped, so a retried or repeated pass adds nothing."""
    out = []
    existing = {s.name: s for s in store.all()}  # read once, kept up to date with what this pass writes
    for key, item in found:
        if item.skill is None:
            out.append(Learnt(key, "skip", None, item.reason))
            continue
        decision = fold(list(existing.values()), item.skill, now, succeeded=item.succeeded, similarity=similarity)
        if decision.write is not None:
            store.put(decision.write)
            existing[decision.write.name] = decision.write
        name = decision.write.name if decision.write is not None else decision.target
        reason = decision.reason if item.succeeded else f"{item.reason}; {decision.reason}"
        log.info("skill pass %s task %s: %s %s (%s)", where, key, decision.action, name, reason)
        out.append(Learnt(key, decision.action, name, reason))
    return out


def learn_session(
    files: FileStore,
    tenant: str,
    session: str,
    now: datetime,
    *,
    agent: str | None = None,
    similarity: Similarity = lexical_similarity,
    unfinished: Collection[str] = (),
) -> list[Learnt]:
    """Distil the session's finished tasks and fold them into the skills (shared, or ``agent``'s own)."""
    found = drafts(files, tenant, session, now, unfinished)
    return fold_all(SkillStore(files, tenant, agent), found, now, similarity, f"{tenant}/{session}")


async def learn_session_with_model(
    files: FileStore,
    tenant: str,
    session: str,
    now: datetime,
    llm: LLM,
    *,
    agent: str | None = None,
    unfinished: Collection[str] = (),
) -> list[Learnt]:
    """As :func:`learn_session`, each successful task's draft rewritten by the model first (a failed task only
    adds pitfalls, which the draft holds as they were). Tasks already distilled are not sent to the model."""
    store = SkillStore(files, tenant, agent)
    found = await asyncio.to_thread(drafts, files, tenant, session, now, unfinished)
    known = {src for s in await asyncio.to_thread(store.all) for src in s.sources}
    written = []
    for key, item in found:
        if item.skill is not None and item.succeeded and key not in known:
            item = Distilled(await written_by_model(item.skill, llm), item.succeeded, item.reason)
        written.append((key, item))
    return await asyncio.to_thread(fold_all, store, written, now, lexical_similarity, f"{tenant}/{session}")
