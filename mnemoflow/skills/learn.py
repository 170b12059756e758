"""The skill pass: every finished long task of a session, distilled and folded into the tenant's skills."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from mnemoflow.ports.files import FileStore
from mnemoflow.skills.distil import distil
from mnemoflow.skills.merge import Similarity, fold, lexical_similarity
from mnemoflow.skills.store import SkillStore
from mnemoflow.skills.tasks import task_traces

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Learnt:
    """What the pass did with one task: ``action`` (store, merge, skip), the skill written and why."""

    task: str
    action: str
    skill: str | None
    reason: str


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
    """Distil each canvas of ``tenant/session`` but the ``unfinished`` ones (canvas file names: the task still
    going on) and fold it into the skills (shared, or ``agent``'s own).

    Idempotent: a task already among a skill's sources is skipped, so a retried or repeated pass adds nothing."""
    store = SkillStore(files, tenant, agent)
    out = []
    for trace in task_traces(files, tenant, session):
        if trace.canvas_name in unfinished:
            continue
        found = distil(trace, now)
        if found.skill is None:
            out.append(Learnt(trace.key, "skip", None, found.reason))
            continue
        decision = fold(store.all(), found.skill, now, succeeded=found.succeeded, similarity=similarity)
        if decision.write is not None:
            store.put(decision.write)
        name = decision.write.name if decision.write is not None else decision.target
        reason = decision.reason if found.succeeded else f"{found.reason}; {decision.reason}"
        log.info("skill pass %s/%s task %s: %s %s (%s)", tenant, session, trace.key, decision.action, name, reason)
        out.append(Learnt(trace.key, decision.action, name, reason))
    return out
