"""UserCurator: the Ray actor that runs L2 scenes and L3 personas for many users (users are virtual actors).

Why shards of users and not one actor per user: an actor is a ~50 MiB process (docs/DESIGN.md §3). A user is hashed onto
one of M curators with ``shard_for(f"{tenant}/{user}", M)``, so one writer per user holds across the fleet. The
curator keeps only a bounded map ``user -> next wake-up``; everything else is in the user's files
(:class:`~mnemoflow.memory.curation.CurationState`). After a restart the map is rebuilt lazily: a background scan of
the data root re-adds this shard's users with a scheduled run, and every call re-adds its user. Per-user locks
keep an L1 notification from interleaving with that user's run (they share the state file).

The class is plain Python with async methods (testable without Ray); :func:`build_curators` applies ``ray.remote``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection
from datetime import datetime
from pathlib import Path
from typing import Any

import ray

from actors.routing import ActorRouter
from mnemoflow.config import MODEL_STAGES, ModelStage
from mnemoflow.embedding import HashingEmbedder
from mnemoflow.memory.curation import DEFAULT_TIMING, CurationState, Curator
from mnemoflow.memory.persona.generate import PersonaEngine
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.persona.llm import LLMPersonaEngine
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.llm import LLMSceneEngine
from mnemoflow.memory.scenes.passes import SceneEngine
from mnemoflow.memory.scenes.paths import ScenePaths
from mnemoflow.memory.scenes.schedule import L2Timing
from mnemoflow.ports import LLM, Clock, Embedder, SystemClock
from mnemoflow.sharding import shard_for, user_key
from mnemoflow.storage import LocalFileStore

log = logging.getLogger(__name__)

UserKey = tuple[str, str]


class UserCurator:
    """Owns the users hashed onto shard ``index`` of ``shards``; runs each one's L2/L3 when due."""

    def __init__(
        self,
        index: int,
        shards: int,
        data_dir: str,
        *,
        tick_seconds: float = 5.0,
        max_users: int = 100_000,
        max_concurrent_runs: int = 2,
        rescan_seconds: float = 600.0,
        timing: L2Timing = DEFAULT_TIMING,
        batch_size: int = 20,
        persona_every_n: int = 50,
        llm: LLM | None = None,
        llm_factory: Callable[[], LLM] | None = None,
        embedder: Embedder | None = None,
        clock: Clock | None = None,
        model_stages: Collection[ModelStage] = MODEL_STAGES,
    ) -> None:
        """``llm_factory`` (picklable) builds the model inside the actor; no model = heuristic engines, and so for
        ``scenes`` or ``persona`` when not in ``model_stages``."""
        self.index, self.shards = index, shards
        self._files = LocalFileStore(Path(data_dir))
        self._clock: Clock = clock or SystemClock()
        model = llm if llm is not None else (llm_factory() if llm_factory is not None else None)
        scenes_model = model if "scenes" in model_stages else None
        persona_model = model if "persona" in model_stages else None
        heuristic_scenes = HeuristicSceneEngine(embedder or HashingEmbedder())
        scene_engine: SceneEngine = (
            LLMSceneEngine(scenes_model, fallback=heuristic_scenes) if scenes_model is not None else heuristic_scenes
        )
        persona_engine: PersonaEngine = (
            LLMPersonaEngine(persona_model, fallback=HeuristicPersonaEngine())
            if persona_model is not None
            else HeuristicPersonaEngine()
        )
        self.curator = Curator(
            self._files,
            self._clock,
            scene_engine,
            persona_engine,
            timing,
            batch_size=batch_size,
            every_n=persona_every_n,
        )
        self._tick_seconds, self._rescan_seconds = tick_seconds, rescan_seconds
        self._max_users = max_users
        self._runs = asyncio.Semaphore(max_concurrent_runs)
        self._wakeups: dict[UserKey, datetime] = {}
        self._locks: dict[UserKey, tuple[asyncio.Lock, int]] = {}
        self._loop_task: asyncio.Task[None] | None = None
        self._last_scan: float | None = None
        self._counts = {"runs": 0, "failures": 0, "l1_events": 0, "ticks": 0, "evicted": 0, "scanned_users": 0}
        with contextlib.suppress(RuntimeError):  # Ray builds async actors inside their loop: restart → loop runs
            self._ensure_loop()

    # --- bookkeeping -----------------------------------------------------------------------------------------

    def _owns(self, tenant: str, user: str) -> bool:
        return shard_for(user_key(tenant, user), self.shards) == self.index

    def _schedule(self, key: UserKey, at: datetime | None) -> None:
        """Remember a wake-up; when full, forget the latest one (the next scan finds it again in its file)."""
        if at is None:
            self._wakeups.pop(key, None)
            return
        self._wakeups[key] = at
        if len(self._wakeups) > self._max_users:
            latest = max(self._wakeups, key=lambda k: self._wakeups[k])
            del self._wakeups[latest]
            self._counts["evicted"] += 1

    @contextlib.asynccontextmanager
    async def _user_lock(self, key: UserKey) -> AsyncIterator[None]:
        """One operation per user at a time; the lock is dropped when nobody holds or waits for it."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def _ensure_loop(self) -> None:
        """Start the tick loop on first use (the event loop of an async Ray actor exists only in its methods)."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._tick_loop())

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(self._tick_seconds)
            try:
                await self.tick()
            except Exception:  # the loop must outlive any one bad user or file
                log.exception("curator %d: tick failed", self.index)

    async def _rescan(self) -> None:
        """Re-add this shard's users that have a run scheduled in their state file (after a restart)."""
        loop = asyncio.get_running_loop()
        self._last_scan = loop.time()
        found = 0
        for tenant in self._files.list_dir(""):
            for user in self._files.list_dir(f"{tenant}/users"):
                try:
                    if not self._owns(tenant, user) or (tenant, user) in self._wakeups:
                        continue
                    data = self._files.read_bytes(ScenePaths(tenant, user).state)
                    if data is None:
                        continue
                    at = CurationState.model_validate_json(data).timer.next_run
                except Exception as exc:  # a stray folder or a bad file must not stop the scan
                    log.warning("curator %d: skipping %s/%s in scan: %s", self.index, tenant, user, exc)
                    continue
                if at is not None:
                    self._schedule((tenant, user), at)
                    found += 1
                await asyncio.sleep(0)  # let calls in between on a large root
        self._counts["scanned_users"] += found

    # --- API ---------------------------------------------------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        """Readiness probe that also starts the tick loop (the builder calls it)."""
        self._ensure_loop()
        return self.stats()

    async def after_l1(self, tenant: str, user: str) -> dict[str, Any]:
        """An L1 pass stored atoms for this user: schedule L2 (downward-only). Returns the next wake-up."""
        self._ensure_loop()
        key = (tenant, user)
        async with self._user_lock(key):
            at = self.curator.on_l1_done(tenant, user)
        self._schedule(key, at)
        self._counts["l1_events"] += 1
        return {"tenant": tenant, "user": user, "next_wakeup": at.isoformat() if at else None}

    async def activity(self, tenant: str, user: str) -> None:
        """A user turn arrived (keeps the user "active" for the drop rule; written at most once a minute)."""
        self._ensure_loop()
        async with self._user_lock((tenant, user)):
            self.curator.on_activity(tenant, user)

    async def run_now(self, tenant: str, user: str) -> dict[str, Any]:
        """Force an L2 (+L3) pass for this user now; returns the outcome as a dict."""
        self._ensure_loop()
        key = (tenant, user)
        async with self._runs, self._user_lock(key):
            outcome = await self.curator.run_now(tenant, user)
        self._note(key, outcome.status, outcome.next_wakeup)
        return outcome.as_dict()

    async def tick(self) -> int:
        """Run every due user (at most ``max_concurrent_runs`` at once); returns how many ran."""
        self._counts["ticks"] += 1
        loop = asyncio.get_running_loop()
        if self._last_scan is None or loop.time() - self._last_scan >= self._rescan_seconds:
            await self._rescan()
        now = self._clock.now()
        due = [k for k, at in self._wakeups.items() if at <= now]
        results = await asyncio.gather(*(self._run_due(k) for k in due))
        return sum(results)

    async def _run_due(self, key: UserKey) -> int:
        async with self._runs, self._user_lock(key):
            try:
                outcome = await self.curator.run_due(*key)
            except Exception:  # a bug for one user must not stop the others; retried at the next scan
                log.exception("curator %d: run for %s/%s crashed", self.index, *key)
                self._wakeups.pop(key, None)
                self._counts["failures"] += 1
                return 0
        if outcome is None:  # not due after all (e.g. an L1 moved it): re-read the file's time
            self._schedule(key, self.curator.next_wakeup(*key))
            return 0
        self._note(key, outcome.status, outcome.next_wakeup)
        return 1

    def _note(self, key: UserKey, status: str, at: datetime | None) -> None:
        self._counts["runs"] += int(status != "dropped")
        self._counts["failures"] += int(status == "failed")
        self._schedule(key, at)

    def stats(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "users_scheduled": len(self._wakeups),
            "locks": len(self._locks),
            "loop_running": self._loop_task is not None and not self._loop_task.done(),
            **self._counts,
        }


# --- Ray wiring -------------------------------------------------------------------------------------------------


def curator_name(index: int) -> str:
    return f"user-curator-{index}"


def build_curators(
    n: int,
    data_dir: str | Path,
    namespace: str,
    *,
    tick_seconds: float = 5.0,
    max_users: int = 100_000,
    max_concurrent_runs: int = 2,
    timing: L2Timing = DEFAULT_TIMING,
    batch_size: int = 20,
    persona_every_n: int = 50,
    llm_factory: Callable[[], LLM] | None = None,
    lifetime: str | None = None,
    model_stages: Collection[ModelStage] = MODEL_STAGES,
) -> list[Any]:
    """Create (or find) the ``n`` named curator actors, wait until each is up and its tick loop runs.

    ``lifetime="detached"`` (the cluster shape) keeps them alive after the creating process ends."""
    remote = ray.remote(UserCurator)
    root = str(Path(data_dir).resolve())
    handles = [
        remote.options(
            name=curator_name(i),
            namespace=namespace,
            get_if_exists=True,
            num_cpus=0,
            lifetime=lifetime,
            max_restarts=-1,
            max_task_retries=3,
        ).remote(
            i,
            n,
            root,
            tick_seconds=tick_seconds,
            max_users=max_users,
            max_concurrent_runs=max_concurrent_runs,
            timing=timing,
            batch_size=batch_size,
            persona_every_n=persona_every_n,
            llm_factory=llm_factory,
            model_stages=sorted(model_stages),
        )
        for i in range(n)
    ]
    ray.get([h.start.remote() for h in handles])
    log.info("%d user curators ready", n)
    return handles


class CuratorClient(ActorRouter):
    """Routes calls to the curator that owns a user; looks the named actors up lazily."""

    def __init__(self, n: int, namespace: str) -> None:
        super().__init__(n, namespace, curator_name, "user curator")

    async def after_l1(self, tenant: str, user: str) -> dict[str, Any]:
        return await self.owner(tenant, user).after_l1.remote(tenant, user)

    async def activity(self, tenant: str, user: str) -> None:
        await self.owner(tenant, user).activity.remote(tenant, user)

    async def run_now(self, tenant: str, user: str) -> dict[str, Any]:
        return await self.owner(tenant, user).run_now.remote(tenant, user)

    async def stats(self) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self.handle(i).stats.remote() for i in range(self._n))))
