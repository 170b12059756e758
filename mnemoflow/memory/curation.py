"""Per-user L2/L3 curation: when to run, what to feed the scene pass, and the persona that follows.

Why a core class and not logic in the actor: the ``UserCurator`` actor only keeps wake-ups and calls this; every
decision here is testable with a manual clock and temporary files. Everything that must survive a restart is in
one JSON file per user (:class:`CurationState` at ``ScenePaths.state``): the L2 timer, the persona counters and
the L2 cursor. The file is replaced atomically after each *successful* step only (a committed scene window, a
written persona), so a failure leaves the state of the last success and the next run retries from there.

The cursor is the ``updated`` time of the newest L1 record consumed plus the ids at exactly that time: a record
written later with the same timestamp is still picked up, none is fed twice. Superseded records are never fed
(a fact replaced before L2 saw it should not reach a scene). A failed run is retried with an exponential backoff
kept in memory (not persisted: after a restart the first retry is immediate, which is what one wants).

One caller per user at a time (the actor holds a per-user lock); the state file is not merged across writers.
An erase is another process: every write of an operation goes through an :class:`ErasureFence`, so a pass that an
erase overtakes stops and leaves none of its files behind (the outcome is ``skipped``).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from mnemoflow.errors import MnemoflowError, StorageError
from mnemoflow.governance.fence import ErasureFence, UserErased
from mnemoflow.lru import LRU
from mnemoflow.memory.l1.models import L1Record
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.persona.generate import PersonaEngine, PersonaStore, generate_persona
from mnemoflow.memory.persona.trigger import EVERY_N, PersonaState, after_scene_pass
from mnemoflow.memory.scenes import schedule as sched
from mnemoflow.memory.scenes.forget import forget_in_scenes
from mnemoflow.memory.scenes.model import SceneInput
from mnemoflow.memory.scenes.passes import DEFAULT_POLICY, SceneEngine, ScenePassReport, run_scene_passes
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.plan import ScenePolicy
from mnemoflow.memory.scenes.schedule import L2Timer, L2Timing
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.ports import Clock, FileStore
from mnemoflow.scopes import SHARED, Scope

log = logging.getLogger(__name__)

DEFAULT_TIMING = L2Timing()


class L2Cursor(BaseModel):
    """The newest L1 ``updated`` time consumed by L2, and the ids consumed at exactly that time."""

    model_config = ConfigDict(frozen=True)

    ts: AwareDatetime | None = None
    ids: tuple[str, ...] = ()

    def admits(self, record: L1Record) -> bool:
        return self.ts is None or record.updated > self.ts or (record.updated == self.ts and record.id not in self.ids)

    def advance(self, consumed: list[SceneInput], upto: datetime) -> L2Cursor:
        """The cursor after committed windows whose newest atom time is ``upto`` (windows never split a time)."""
        same = {a.id for a in consumed if a.ts == upto}
        if self.ts is not None and self.ts == upto:
            same |= set(self.ids)
        return L2Cursor(ts=upto, ids=tuple(sorted(same)))


class ScopeCuration(BaseModel):
    """The L2 cursor and the persona counters of one scope of a user."""

    model_config = ConfigDict(frozen=True)

    persona: PersonaState = PersonaState()
    cursor: L2Cursor = L2Cursor()


class CurationState(BaseModel):
    """Everything L2/L3 remembers about a user between runs (``.l2l3_state.json``).

    The timer is the user's: one run curates every scope. The shared scope's cursor and persona counters keep
    their fields; each team or agent scope with memory has its own in ``scopes`` (written only when there is one,
    so the file of a user whose agents name nobody is as it was)."""

    model_config = ConfigDict(frozen=True)

    version: int = 1
    timer: L2Timer = L2Timer()
    persona: PersonaState = PersonaState()
    cursor: L2Cursor = L2Cursor()
    scopes: dict[Scope, ScopeCuration] = Field(default_factory=dict, exclude_if=lambda v: not v)

    def of(self, scope: str) -> ScopeCuration:
        if scope == SHARED:
            return ScopeCuration(persona=self.persona, cursor=self.cursor)
        return self.scopes.get(scope, ScopeCuration())

    def with_scope(self, scope: str, part: ScopeCuration) -> CurationState:
        if scope == SHARED:
            return self.model_copy(update={"persona": part.persona, "cursor": part.cursor})
        return self.model_copy(update={"scopes": {**self.scopes, scope: part}})


@dataclass(frozen=True, slots=True)
class ScopePass:
    """One scope's scene passes in a run: what the persona step after them needs."""

    scope: str
    scenes: SceneStore
    report: ScenePassReport


Status = Literal["applied", "skipped", "failed", "dropped"]
PersonaStatus = Literal["generated", "skipped", "failed", "not_evaluated"]


@dataclass(frozen=True, slots=True)
class CurationOutcome:
    """What one run did. ``error`` names the reason of a failure; ``next_wakeup`` is when to call again."""

    tenant: str
    user: str
    status: Status
    atoms: int = 0
    passes: int = 0
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    persona: PersonaStatus = "not_evaluated"
    persona_reason: str = ""
    error: str | None = None
    next_wakeup: datetime | None = None
    cursor: datetime | None = None
    scene_files: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (times as ISO strings), for actor replies and an admin endpoint."""
        out = asdict(self)
        for k in ("next_wakeup", "cursor"):
            out[k] = out[k].isoformat() if out[k] is not None else None
        return out


def to_scene_input(record: L1Record) -> SceneInput:
    """The documented L1 → L2 seam (:class:`SceneInput`): field by field."""
    return SceneInput(
        id=record.id,
        type=record.type,
        priority=record.priority,
        content=record.content,
        created_at=record.created,
        updated_at=record.updated,
        said_at=max(record.timestamps, default=None),
    )


class Curator:
    """Runs L2 scenes and L3 persona for one user at a time, from the user's files and persisted state."""

    def __init__(
        self,
        files: FileStore,
        clock: Clock,
        scene_engine: SceneEngine,
        persona_engine: PersonaEngine,
        timing: L2Timing = DEFAULT_TIMING,
        *,
        policy: ScenePolicy = DEFAULT_POLICY,
        batch_size: int = 20,
        every_n: int = EVERY_N,
        retry_base: timedelta = timedelta(seconds=30),
        activity_resolution: timedelta = timedelta(seconds=60),
        max_tracked_failures: int = 10_000,
    ) -> None:
        self.files, self.clock = files, clock
        self.scene_engine, self.persona_engine = scene_engine, persona_engine
        self.timing, self.policy, self.batch_size, self.every_n = timing, policy, batch_size, every_n
        self.retry_base = retry_base
        self.activity_resolution = activity_resolution
        self._failures: LRU[tuple[str, str], int] = LRU(max_tracked_failures)

    # --- state -----------------------------------------------------------------------------------------------

    def load(self, tenant: str, user: str) -> CurationState:
        """The persisted state (a fresh one for a new user); :class:`StorageError` if the file is unreadable."""
        data = self.files.read_bytes(ScenePaths(tenant, user).state)
        if data is None:
            return CurationState()
        try:
            return CurationState.model_validate_json(data)
        except ValidationError as exc:
            raise StorageError(f"unreadable L2/L3 state for {tenant}/{user}: {exc.errors()[:1]}") from exc

    def _fence(self, tenant: str, user: str) -> ErasureFence:
        """The files of one operation on the user: its writes do not outlive an erase that overtakes it."""
        return ErasureFence(self.files, tenant, user, ScenePaths(tenant, user).derived)

    @staticmethod
    def _save(files: FileStore, tenant: str, user: str, state: CurationState) -> None:
        files.write_atomic(ScenePaths(tenant, user).state, state.model_dump_json().encode())

    # --- events ----------------------------------------------------------------------------------------------

    def on_l1_done(self, tenant: str, user: str) -> datetime | None:
        """An L1 pass stored atoms: pull the next L2 run earlier (never later). Returns the next wake-up (None
        when the user was erased meanwhile)."""
        files = self._fence(tenant, user)
        state = self.load(tenant, user)
        timer = sched.on_l1_done(state.timer, self.clock.now(), self.timing)
        try:
            self._save(files, tenant, user, state.model_copy(update={"timer": timer}))
        except UserErased:
            return None
        return sched.next_wakeup(timer)

    def on_activity(self, tenant: str, user: str) -> None:
        """A user turn arrived. Written at most once per ``activity_resolution`` (the rule works in hours)."""
        state, now = self.load(tenant, user), self.clock.now()
        last = state.timer.last_active
        if last is not None and now - last < self.activity_resolution:
            return
        files = self._fence(tenant, user)  # only the timer is written: no pass's content to outlive an erase
        try:
            self._save(files, tenant, user, state.model_copy(update={"timer": sched.on_activity(state.timer, now)}))
        except UserErased:
            return

    def next_wakeup(self, tenant: str, user: str) -> datetime | None:
        return sched.next_wakeup(self.load(tenant, user).timer)

    # --- runs ------------------------------------------------------------------------------------------------

    async def run_due(self, tenant: str, user: str) -> CurationOutcome | None:
        """Run L2 (then L3) if the timer says so; None when not due, ``dropped`` for an idle timer."""
        files = self._fence(tenant, user)
        try:
            state = self.load(tenant, user)
        except MnemoflowError as exc:
            return self._failed(tenant, user, f"state: {exc}")
        decision = sched.decide(state.timer, self.clock.now(), self.timing)
        if decision == "wait":
            return None
        try:
            if decision == "drop":
                self._save(files, tenant, user, state.model_copy(update={"timer": sched.on_drop(state.timer)}))
                return CurationOutcome(tenant, user, "dropped")
            return await self._run(files, tenant, user, state)
        except UserErased as exc:
            return self._erased(tenant, user, exc)

    async def run_now(self, tenant: str, user: str) -> CurationOutcome:
        """Force a pass whatever the timer says (tests, admin endpoint)."""
        files = self._fence(tenant, user)
        try:
            state = self.load(tenant, user)
        except MnemoflowError as exc:
            return self._failed(tenant, user, f"state: {exc}")
        try:
            return await self._run(files, tenant, user, state)
        except UserErased as exc:
            return self._erased(tenant, user, exc)

    def _erased(self, tenant: str, user: str, exc: UserErased) -> CurationOutcome:
        log.info("curation %s/%s stopped: %s", tenant, user, exc)
        self._failures.pop((tenant, user))
        return CurationOutcome(tenant, user, "skipped")

    async def _run(self, files: FileStore, tenant: str, user: str, state: CurationState) -> CurationOutcome:
        if not files.exists(ScenePaths(tenant, user).user_dir):  # erased (or never there): write nothing back
            return CurationOutcome(tenant, user, "skipped")
        try:
            records = RecordLog(files, tenant, user).read(live_only=False)
        except MnemoflowError as exc:
            return self._failed(tenant, user, f"L2: {exc}")
        # Each scope's scenes and persona are made from that scope's atoms only (docs/concepts/scopes.md): no
        # engine call ever sees two scopes' memories together, and no private atom reaches the shared files.
        by_scope: dict[str, list[L1Record]] = {SHARED: []}
        for record in records:
            by_scope.setdefault(record.scope, []).append(record)
        state = self._drop_emptied_scopes(files, tenant, user, state, by_scope)
        passes: list[ScopePass] = []
        for scope in [SHARED, *sorted(set(by_scope) - {SHARED})]:
            try:
                state, done = await self._scene_pass(files, tenant, user, scope, by_scope[scope], state)
            except MnemoflowError as exc:  # reading the journal or recovering failed: nothing was committed
                return self._failed(tenant, user, f"L2{_named(scope)}: {exc}")
            if done.report.error is not None:
                if done.report.applied:  # the committed windows are a successful step: keep them, retry the rest
                    self._save(files, tenant, user, state)
                return self._failed(
                    tenant, user, f"L2{_named(scope)}: {done.report.error}", done.report, state.of(scope).cursor.ts
                )
            passes.append(done)
        result: sched.L2Result = "applied" if any(p.report.applied for p in passes) else "skipped"
        timer_before = state.timer
        state = state.model_copy(
            update={"timer": sched.on_l2_done(timer_before, self.clock.now(), result, self.timing)}
        )
        self._save(files, tenant, user, state)
        self._failures.pop((tenant, user))
        return await self._after_l2(files, tenant, user, state, passes, result, timer_before)

    def _drop_emptied_scopes(
        self, files: FileStore, tenant: str, user: str, state: CurationState, by_scope: dict[str, list[L1Record]]
    ) -> CurationState:
        """A team or agent scope with no live atom left (its agent was forgotten, its memories deleted) loses its
        folder and its state, and is not curated: derived files of nothing are not kept."""
        paths = ScenePaths(tenant, user)
        emptied = {s for s, rs in by_scope.items() if s != SHARED and not any(r.live for r in rs)}
        emptied |= (set(state.scopes) | set(paths.scopes_on_disk(files))) - set(by_scope)
        for scope in sorted(emptied):
            files.remove(ScenePaths(tenant, user, scope).base)
            by_scope.pop(scope, None)
        if not emptied & set(state.scopes):
            return state
        state = state.model_copy(update={"scopes": {k: v for k, v in state.scopes.items() if k not in emptied}})
        self._save(files, tenant, user, state)
        return state

    async def _scene_pass(
        self, files: FileStore, tenant: str, user: str, scope: str, records: list[L1Record], state: CurationState
    ) -> tuple[CurationState, ScopePass]:
        """The scene passes of one scope over its atoms not consumed yet; the state with its cursor and persona
        counters moved by what was committed."""
        scenes = SceneStore(files, tenant, user, scope)
        part = state.of(scope)
        if forget_in_scenes(scenes, records, self.clock.now()):  # the persona follows, even after a failure
            part = part.model_copy(update={"persona": part.persona.model_copy(update={"rewrite_pending": True})})
            state = state.with_scope(scope, part)
            self._save(files, tenant, user, state)
        atoms = [to_scene_input(r) for r in records if r.live and part.cursor.admits(r)]
        report = await run_scene_passes(
            scenes, self.scene_engine, atoms, now=self.clock.now, policy=self.policy, batch_size=self.batch_size
        )
        committed = [o for o in report.outcomes if o.status == "applied"]
        cursor = part.cursor if report.cursor is None else part.cursor.advance(atoms, report.cursor)
        persona = part.persona
        if committed:
            persona = after_scene_pass(
                persona,
                atoms=sum(o.atoms for o in committed),
                applied=any(o.changed or o.deleted for o in committed),
                reason=report.persona_update_reason,
            )
        return state.with_scope(scope, ScopeCuration(persona=persona, cursor=cursor)), ScopePass(scope, scenes, report)

    async def _after_l2(
        self,
        files: FileStore,
        tenant: str,
        user: str,
        state: CurationState,
        passes: list[ScopePass],
        result: sched.L2Result,
        timer_before: L2Timer,
    ) -> CurationOutcome:
        """Navigation refresh and persona of each scope; a failure here is reported, the L2 step already stands.
        When scenes lost deleted memories the persona is written anew from them (it may still hold them). The
        outcome's persona status is the shared persona's."""
        errors: list[str] = []
        p_status: PersonaStatus = "not_evaluated"
        p_reason = ""
        for done in passes:
            persona_store = PersonaStore(files, tenant, user, done.scope)
            part = state.of(done.scope)
            forgot = part.persona.rewrite_pending
            status: PersonaStatus = "not_evaluated"
            reason = ""
            try:
                if done.report.applied or forgot:
                    persona_store.refresh_navigation(done.scenes.load())
                scope_result: sched.L2Result = "applied" if done.report.applied else "skipped"
                if forgot or sched.l3_after_l2(timer_before, scope_result):
                    new_persona, p_out = await generate_persona(
                        persona_store,
                        done.scenes,
                        self.persona_engine,
                        part.persona,
                        now=self.clock.now(),
                        every_n=self.every_n,
                        rewrite="memories were deleted" if forgot else None,
                    )
                    status, reason = p_out.status, p_out.reason
                    if new_persona != part.persona:
                        state = state.with_scope(done.scope, part.model_copy(update={"persona": new_persona}))
                        self._save(files, tenant, user, state)
            except (MnemoflowError, ValueError) as exc:
                log.error("persona %s/%s%s failed: %s", tenant, user, _named(done.scope), exc)
                errors.append(f"L3{_named(done.scope)}: {exc}")
                status, reason = "failed", str(exc)
            if done.scope == SHARED:
                p_status, p_reason = status, reason
        outs = [o for done in passes for o in done.report.outcomes if o.status == "applied"]
        return CurationOutcome(
            tenant,
            user,
            result,
            atoms=sum(o.atoms for o in outs),
            passes=len(outs),
            created=tuple(n for o in outs for n in o.created),
            updated=tuple(n for o in outs for n in o.updated),
            merged=tuple(n for o in outs for n in o.merged),
            deleted=tuple(n for o in outs for n in o.deleted),
            persona=p_status,
            persona_reason=p_reason,
            error="; ".join(errors) or None,
            next_wakeup=sched.next_wakeup(state.timer),
            cursor=state.cursor.ts,
            scene_files=tuple(
                name if done.scope == SHARED else f"{done.scope}/{name}"
                for done in passes
                for name in sorted(done.scenes.load())
            ),
        )

    def _failed(
        self, tenant: str, user: str, reason: str, report: ScenePassReport | None = None, cursor: datetime | None = None
    ) -> CurationOutcome:
        """A failed run: retry after ``retry_base * 2**(n-1)``, capped at ``max_interval``."""
        key = (tenant, user)
        n = (self._failures.pop(key) or 0) + 1
        self._failures.get_or_load(key, lambda _: n)
        delay = min(self.retry_base * 2 ** min(n - 1, 20), self.timing.max_interval)
        log.error("curation %s/%s failed (%d in a row), retry in %s: %s", tenant, user, n, delay, reason)
        outs = [o for o in (report.outcomes if report else ()) if o.status == "applied"]
        return CurationOutcome(
            tenant,
            user,
            "failed",
            atoms=sum(o.atoms for o in outs),
            passes=len(outs),
            error=reason,
            next_wakeup=self.clock.now() + delay,
            cursor=cursor,
        )


def _named(scope: str) -> str:
    """`` (agent:coder)`` in a message about a private scope; nothing for the shared one, whose messages are as
    they were."""
    return "" if scope == SHARED else f" ({scope})"
