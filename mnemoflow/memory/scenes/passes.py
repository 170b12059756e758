"""One L2 pass: atoms in → engine proposes a plan → rules applied → files written all-or-nothing.

Why windows: the original sent every new atom of a session in one prompt (docs/tdam-spec.md §9.21).
:func:`run_scene_passes` cuts the backlog into windows of ``batch_size`` atoms (never splitting atoms that share a
timestamp, so a timestamp cursor cannot skip one), commits each window as its own pass, and stops at the first failure,
reporting the cursor of the last committed window. The caller advances its cursor only to that value.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal, Protocol

from mnemoflow.errors import MnemoflowError, StructuredOutputError
from mnemoflow.memory.scenes.model import SceneBlock, SceneInput, format_ts
from mnemoflow.memory.scenes.plan import ScenePlan, ScenePlanRejected, ScenePolicy, apply_plan
from mnemoflow.memory.scenes.store import SceneStore

log = logging.getLogger(__name__)

DEFAULT_POLICY = ScenePolicy()


class SceneEngine(Protocol):
    """Proposes a plan for one window. ``feedback`` carries the rule violations of a refused previous plan."""

    name: str
    rejection_retries: int
    """How often a refused plan is asked again with the reasons (a model can fix it; the heuristic cannot)."""

    def fallback_for(self, error: MnemoflowError) -> SceneEngine | None:
        """The engine that plans a window this one failed (its reply invalid after the repair try, or its plan
        refused after the retries), having counted it; None: the failure stands."""
        ...

    async def plan(
        self,
        scenes: dict[str, SceneBlock],
        atoms: list[SceneInput],
        now: datetime,
        policy: ScenePolicy,
        feedback: str | None = None,
    ) -> ScenePlan: ...


@dataclass(frozen=True, slots=True)
class ScenePassOutcome:
    """What one pass did. ``cursor`` is the newest atom time it consumed (None when skipped)."""

    status: Literal["skipped", "applied"]
    pass_id: str = ""
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    atoms: int = 0
    unplaced: tuple[str, ...] = ()
    """Atom ids of the window that no scene absorbed (the model judged them not scene-worthy)."""
    cursor: datetime | None = None
    persona_update_reason: str | None = None

    @property
    def changed(self) -> tuple[str, ...]:
        return self.created + self.updated + self.merged


@dataclass(frozen=True, slots=True)
class ScenePassReport:
    """A run over a backlog: the committed passes, the cursor to store, and the error that stopped it, if any."""

    outcomes: tuple[ScenePassOutcome, ...]
    error: MnemoflowError | None = None

    @property
    def cursor(self) -> datetime | None:
        return max((o.cursor for o in self.outcomes if o.cursor), default=None)

    @property
    def applied(self) -> bool:
        return any(o.status == "applied" for o in self.outcomes)

    @property
    def persona_update_reason(self) -> str | None:
        return next((o.persona_update_reason for o in reversed(self.outcomes) if o.persona_update_reason), None)


async def run_scene_pass(
    store: SceneStore,
    engine: SceneEngine,
    atoms: list[SceneInput],
    *,
    now: datetime,
    policy: ScenePolicy = DEFAULT_POLICY,
) -> ScenePassOutcome:
    """Run one pass over ``atoms``. Raises (with nothing written) on a refused plan, a model or storage error."""
    store.recover()
    if not atoms:
        return ScenePassOutcome(status="skipped")
    current = store.load(include_deleted=True)
    live = {name: block for name, block in current.items() if not block.deleted}
    allowed = {a.id for a in atoms}
    feedback = None
    attempt = 0
    while True:
        try:
            plan = await engine.plan(live, atoms, now, policy, feedback)
            result = apply_plan(current, plan, allowed, now, policy)
            break
        except (ScenePlanRejected, StructuredOutputError) as exc:
            if isinstance(exc, ScenePlanRejected):
                log.warning("scene plan refused (engine %s, attempt %d): %s", engine.name, attempt + 1, exc.problems)
                if attempt < engine.rejection_retries:
                    attempt += 1
                    feedback = "\n".join(f"- {p}" for p in exc.problems)
                    continue
            fallback = engine.fallback_for(exc)
            if fallback is None:
                raise
            engine, feedback, attempt = fallback, None, 0
    digest = hashlib.blake2b(",".join(sorted(allowed)).encode(), digest_size=4).hexdigest()
    pass_id = f"{format_ts(now)}-{digest}"
    store.commit({name: replace(b, engine=engine.name) for name, b in result.writes.items()}, pass_id)
    placed = {i for block in result.writes.values() for i in block.atom_ids}
    return ScenePassOutcome(
        status="applied",
        pass_id=pass_id,
        created=tuple(result.created),
        updated=tuple(result.updated),
        merged=tuple(result.merged),
        deleted=tuple(result.deleted),
        atoms=len(atoms),
        unplaced=tuple(a.id for a in atoms if a.id not in placed),
        cursor=max(a.ts for a in atoms),
        persona_update_reason=plan.persona_update_reason,
    )


def windows(atoms: list[SceneInput], batch_size: int) -> list[list[SceneInput]]:
    """Time-ordered windows of about ``batch_size`` atoms; atoms with the same timestamp stay together."""
    ordered = sorted(atoms, key=lambda a: (a.ts, a.id))
    out: list[list[SceneInput]] = []
    for atom in ordered:
        if out and (len(out[-1]) < batch_size or out[-1][-1].ts == atom.ts):
            out[-1].append(atom)
        else:
            out.append([atom])
    return out


async def run_scene_passes(
    store: SceneStore,
    engine: SceneEngine,
    atoms: list[SceneInput],
    *,
    now: Callable[[], datetime],
    policy: ScenePolicy = DEFAULT_POLICY,
    batch_size: int = 20,
) -> ScenePassReport:
    """All of ``atoms`` (those newer than the caller's cursor) in windows; stops at the first failure."""
    if not atoms:
        return ScenePassReport(outcomes=(ScenePassOutcome(status="skipped"),))
    outcomes: list[ScenePassOutcome] = []
    for window in windows(atoms, batch_size):
        try:
            outcomes.append(await run_scene_pass(store, engine, window, now=now(), policy=policy))
        except MnemoflowError as exc:
            log.error("scene pass failed after %d committed window(s): %s", len(outcomes), exc)
            return ScenePassReport(outcomes=tuple(outcomes), error=exc)
    return ScenePassReport(outcomes=tuple(outcomes))
