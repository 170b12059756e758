"""The proxy's memory side for one chat request, runtime-free: capture what is new, recall, compact, inject.

:class:`MemoryProxy` is given a :class:`MemorySide` (the serving layer's Kafka bus, session shards and recaller;
fakes in unit tests) and turns an OpenAI chat request into the array to forward plus response headers that say
what happened. Forwarding itself (HTTP, streaming) is the serving layer's job.

Order: recall and compaction run at once, so a request waits for the slower of the two, not their sum; the capture
is published when they are done, beside the upstream call. Nothing in a request waits for its own capture, and the
work a capture sets off (the stream worker writing L0, refs and offload entries, the session's shard catching up)
would otherwise take the same cores as this request's recall and compaction; a request that arrives while an earlier
capture of its session is still being published leaves those messages to it. Compaction cannot wait for recall's
size, so its budget is the window less the answer's reserve and the room recall is expected to take: the size of the
session's recall for the same user message (exact for the tool steps that reuse it), else the user's largest recall
so far or ``proxy_recall_reserve``, whichever is larger. When the recall comes back larger, or the guess left too
little room for the last user message, the array is compacted again to the exact room, so the prompt always fits;
when it comes back smaller, compaction had that much less room than the two steps in turn give it. Recall is
injected into the compacted array. A user message is recalled for once, when it is the latest: the tool steps of its
turn reuse that recall, and the message keeps its block on every later request (:mod:`mnemoflow.proxy.pins`), so
the prompt only grows and an upstream's prefix cache keeps serving it. What is written to memory meanwhile reaches
the next user turn, not the next tool step. The whole memory side has a time budget; past it, or on a memory error,
the request goes upstream untouched (``proxy_fail_open``) and the ``x-mnemoflow-memory`` header says why.

Every stage is timed where it runs (:data:`STAGES`): the request's own in :attr:`Prepared.stages_ms` (the
serving layer answers them as a ``Server-Timing`` header), and each one, the captures that run after the request
included, told to the ``observe`` callback (the serving layer's histogram).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mnemoflow.config import Settings
from mnemoflow.errors import InvalidInput, ServiceUnavailable
from mnemoflow.events import ToolResultIn, TurnIn
from mnemoflow.ids import check_id
from mnemoflow.lru import LRU
from mnemoflow.memory.recall.recaller import RecallResult
from mnemoflow.offload.messages import fingerprint, last_user
from mnemoflow.offload.replies import CompactReply
from mnemoflow.ports.files import FileStore
from mnemoflow.proxy.capture import Capture, CaptureLog, answer_turn, plan_capture, text_of
from mnemoflow.proxy.inject import inject_recall, injected_tokens, recall_tokens
from mnemoflow.proxy.pins import RecallPins
from mnemoflow.replay import safe_id
from mnemoflow.scopes import Viewer

log = logging.getLogger(__name__)
T = TypeVar("T")
U = TypeVar("U")

Message = dict[str, Any]
USER_HEADER, SESSION_HEADER, WINDOW_HEADER = "x-mnemoflow-user", "x-mnemoflow-session", "x-mnemoflow-window"
AGENT_HEADER, TEAM_HEADER = "x-mnemoflow-agent", "x-mnemoflow-team"

STAGES: dict[str, str] = {
    "capture_plan": "which messages of the array are new (on the request's path)",
    "recall": "recall as the request waited for it: a fresh recall for a new user message, else its turn's kept one",
    "embed": "the query embedding of a fresh recall",
    "search": "the index search of a fresh recall (hybrid: dense and BM25, fused)",
    "context": "the persona and navigation read of a fresh recall (beside embed and search)",
    "compact": "compaction as the request waited for it (the call to the session's shard)",
    "compact_shard": "the same compaction inside the shard (its wait for the session's lock included)",
    "compact_again": "a second compaction to the exact room when recall came back larger than guessed",
    "compact_again_shard": "that second compaction inside the shard",
    "memory": "the whole memory side (recall and compaction run at once)",
    "upstream": "the upstream's answer (to its headers, when streamed)",
    "total": "the proxy's whole handling, from its route's start to the answer's headers (Serve's hop not in it)",
    "capture": "publishing the request's new messages, Kafka acknowledged (after the memory side, off its path)",
    "capture_answer": "publishing the upstream's answer, Kafka acknowledged (after the answer is delivered)",
}
"""The proxy's stages, by the name they have in ``Server-Timing``, ``x-mnemoflow-stages-ms`` and the
``mnemoflow_proxy_stage_seconds`` histogram. Stages run at once or nest, so they do not add up."""

StageObserver = Callable[[str, float], None]
"""Told every stage a request went through, with its milliseconds (the serving layer's histogram)."""


class ChatRequest(BaseModel):
    """The fields of an OpenAI chat completion request the proxy reads; every other field is forwarded as sent."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    user: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)


class Identity(BaseModel):
    """Who is talking: the tenant comes from the API key; user and session from headers or the body; the agent and
    its team from headers (none: the default agent, whose memory is shared; docs/concepts/scopes.md)."""

    user: str
    session: str
    window: int | None
    agent: str | None = None
    team: str | None = None

    @property
    def viewer(self) -> Viewer:
        return Viewer(agent=self.agent, team=self.team)


def _as_id(raw: str) -> str:
    try:
        return check_id(raw)
    except ValueError:
        return safe_id(raw)


def _named(headers: Mapping[str, str], header: str) -> str | None:
    """An agent or team id from its header, checked: it decides what memory the request sees, so a value that is
    not an id is refused rather than mapped to one."""
    raw = headers.get(header)
    if not raw:
        return None
    try:
        return check_id(raw)
    except ValueError as exc:
        raise InvalidInput(f"{header}: {exc}") from exc


def identify(body: ChatRequest, headers: Mapping[str, str], settings: Settings) -> Identity:
    """User: ``X-Mnemoflow-User``, else the request's ``user`` field, else ``default``. Session:
    ``X-Mnemoflow-Session``, else derived from the user (and the agent, when one is named) and the conversation's
    first message, so one agent conversation keeps one session without a header. Window: ``X-Mnemoflow-Window``,
    else per model in settings. Values that are not ids are mapped to stable ids (readable prefix plus a hash);
    ``X-Mnemoflow-Agent`` and ``X-Mnemoflow-Team`` must be ids."""
    user = _as_id(headers.get(USER_HEADER) or body.user or "default")
    agent, team = _named(headers, AGENT_HEADER), _named(headers, TEAM_HEADER)
    session = headers.get(SESSION_HEADER)
    if not session:
        first = next((m for m in body.messages if m.get("role") != "system"), body.messages[0])
        who = user if agent is None else f"{user}\0{agent}"  # two agents opening alike keep two sessions
        digest = hashlib.sha256(f"{who}\0{text_of(first.get('content'))}".encode()).hexdigest()[:20]
        session = f"chat-{digest}"
    raw_window = headers.get(WINDOW_HEADER)
    if raw_window is not None:
        if not raw_window.isdigit() or int(raw_window) < 256:
            raise InvalidInput(f"{WINDOW_HEADER} must be a whole number of tokens >= 256, got {raw_window[:20]!r}")
        window: int | None = int(raw_window)
    else:
        window = settings.proxy_windows.get(body.model, settings.proxy_default_window)
    return Identity(user=user, session=_as_id(session), window=window, agent=agent, team=team)


class MemorySide(Protocol):
    """What the proxy needs of the stack. ``publish`` returns once Kafka acknowledged every event."""

    async def publish(self, tenant: str, turns: list[TurnIn], results: list[ToolResultIn]) -> None: ...

    async def recall(self, tenant: str, user: str, query: str, viewer: Viewer) -> RecallResult: ...

    async def compact(self, tenant: str, session: str, messages: list[Message], window: int) -> CompactReply: ...


@dataclass
class Prepared:
    """The array to forward and the headers to answer with (for the upstream's answer, see ``capture_answer``)."""

    identity: Identity
    messages: list[Message]
    headers: dict[str, str] = field(default_factory=dict)
    memory_ms: float = 0.0
    stages_ms: dict[str, float] = field(default_factory=dict)
    capture: Capture | None = None


class MemoryProxy:
    def __init__(
        self,
        memory: MemorySide,
        files: FileStore,
        settings: Settings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        recall_cache: int = 10_000,
        observe: StageObserver | None = None,
    ) -> None:
        """``observe``: told every stage's time (:data:`STAGES`), those of the captures after the request too."""
        self._memory = memory
        self._observe = observe
        self._captures = CaptureLog(files)
        self._pins = RecallPins(files)
        self._settings = settings
        self._clock = clock
        self._recalls: LRU[tuple[str, str], _KeptRecall] = LRU(recall_cache)
        self._largest: LRU[tuple[str, str], int] = LRU(recall_cache)  # (tenant, user) -> largest recall, tokens
        self._tasks: set[asyncio.Future[None]] = set()
        # (tenant, session) -> ids a capture of this replica is publishing: a request arriving meanwhile (a tool
        # step right after the previous answer) must not publish them again; emptied when the publish ends.
        self._publishing: dict[tuple[str, str], frozenset[str]] = {}

    def prompt_budget(self, body: ChatRequest, window: int) -> int:
        """Tokens (o200k) the prompt may hold: the window less the answer's reserve, in our tokenizer's units."""
        reserve = body.max_completion_tokens or body.max_tokens or self._settings.proxy_completion_reserve
        return int((window - reserve) / self._settings.proxy_tokens_per_o200k)

    async def prepare(self, tenant: str, body: ChatRequest, headers: Mapping[str, str]) -> Prepared:
        """Raises InvalidInput for a bad proxy header; ServiceUnavailable when the memory side fails and the
        proxy is set to fail closed. Anything else about the memory side is said in the headers."""
        ident = identify(body, headers, self._settings)
        out = Prepared(ident, body.messages, {USER_HEADER: ident.user, SESSION_HEADER: ident.session})
        start = time.perf_counter()
        budget = self._settings.proxy_memory_timeout_seconds
        try:
            await asyncio.wait_for(self._memory_phase(tenant, body, out), budget)
            out.headers["x-mnemoflow-memory"] = "ok"
        except InvalidInput as exc:  # the array breaks compaction's rules: the upstream judges it, not us
            self._bypass(out, body, f"compaction refused the messages: {exc}")
        except TimeoutError:
            self._bypass(out, body, f"timeout after {budget * 1000:.0f} ms")
        except Exception as exc:  # noqa: BLE001 - fail open is a choice about every failure of the memory side
            log.warning("proxy memory side failed for %s/%s: %r", tenant, ident.session, exc)
            self._bypass(out, body, f"{type(exc).__name__}: {exc}"[:200])
        finally:  # what the agent sent is captured whether or not the memory side answered
            if out.capture is not None:
                self._background(self._publish(tenant, ident.session, out.capture))
        out.memory_ms = (time.perf_counter() - start) * 1000
        out.headers["x-mnemoflow-memory-ms"] = f"{out.memory_ms:.1f}"
        if out.stages_ms:
            out.headers["x-mnemoflow-stages-ms"] = "; ".join(f"{k}={v:.1f}" for k, v in out.stages_ms.items())
        for stage, ms in {**out.stages_ms, "memory": out.memory_ms}.items():
            self._noted(stage, ms)
        return out

    def _noted(self, stage: str, ms: float) -> None:
        if self._observe is not None:
            try:
                self._observe(stage, ms)
            except Exception:  # noqa: BLE001 - a metrics failure must not fail the request
                log.exception("proxy stage observer failed on %s", stage)

    def _bypass(self, out: Prepared, body: ChatRequest, why: str) -> None:
        if not self._settings.proxy_fail_open:
            raise ServiceUnavailable(f"memory side failed and the proxy fails closed: {why}")
        out.messages = body.messages
        kept = {k: v for k, v in out.headers.items() if k in (USER_HEADER, SESSION_HEADER, "x-mnemoflow-captured")}
        out.headers = {**kept, "x-mnemoflow-memory": f"bypassed; {why}".replace("\n", " ")}

    async def _memory_phase(self, tenant: str, body: ChatRequest, out: Prepared) -> None:
        ident = out.identity
        key = (tenant, ident.session)
        publishing = self._publishing.get(key, frozenset())
        planning = time.perf_counter()
        captured = self._captures.captured(*key) | publishing
        plan = plan_capture(
            body.messages, ident.user, ident.session, captured, self._clock(), agent=ident.agent, team=ident.team
        )
        out.stages_ms["capture_plan"] = (time.perf_counter() - planning) * 1000
        if plan.turns or plan.results:
            # Published by prepare once the memory side is done. What another request is still publishing is not
            # recorded with this capture: that request records it, or, if its publish fails, the next one sends it.
            out.capture = replace(plan, ids=plan.ids - publishing)
            self._publishing[key] = publishing | plan.new_ids
        out.headers["x-mnemoflow-captured"] = (
            f"turns={len(plan.turns)}; tool_results={len(plan.results)}; too_large={plan.skipped}"
        )
        query = _latest_query(body.messages)
        pinned = self._pins.of(tenant, ident.session, ident.viewer)  # the LRU; on a miss a small file, as captured()
        recalling = _timed(out, "recall", self._recall(out, tenant, query, pinned))
        messages = body.messages
        if ident.window is None:
            recall = await recalling
            blocks = _blocks(pinned, query, recall)
            out.headers["x-mnemoflow-compaction"] = f"off; no window known for model {body.model[:80]}"
        else:
            prompt = self.prompt_budget(body, ident.window)
            room = self._recall_room(tenant, ident, query, pinned, messages, prompt)
            compacting = _unless_refused(self._compact(out, "compact", tenant, ident, messages, prompt - room))
            recall, reply = await _both(recalling, compacting)
            blocks = _blocks(pinned, query, recall)
            extra = injected_tokens(messages, recall.system_context if recall else "", blocks)
            if reply is None or extra > room:  # the guess was short: compact to the exact room, as if in turn
                reply = await self._compact(out, "compact_again", tenant, ident, messages, prompt - extra)
            messages, sent = reply.messages, reply.tokens_after + extra
            out.headers.update(
                {
                    "x-mnemoflow-compaction": reply.level,
                    "x-mnemoflow-window": str(ident.window),
                    "x-mnemoflow-tokens": f"before={reply.tokens_before}; recall={extra}; after={sent}",
                    "x-mnemoflow-removed": str(len(reply.removed)),
                }
            )
        messages = inject_recall(messages, recall.system_context if recall else "", blocks)
        if recall is not None:
            out.headers["x-mnemoflow-recalled"] = str(len(recall.hits))
            if degraded := ("timed_out" if recall.timed_out else recall.degraded):
                out.headers["x-mnemoflow-recall-degraded"] = degraded
            out.headers["x-mnemoflow-recall-ids"] = ",".join(h.id for h in recall.hits[:20])
        out.messages = messages

    def _recall_room(
        self,
        tenant: str,
        ident: Identity,
        query: tuple[str, str] | None,
        pinned: Mapping[str, str],
        messages: list[Message],
        prompt: int,
    ) -> int:
        """The tokens compaction leaves for what recall injects, which it cannot wait for: the blocks the earlier
        user messages keep, and the latest message's recall: the size of its turn's kept recall (exact for a tool
        step); for a new user message the user's largest recall so far, or ``proxy_recall_reserve`` (at most half
        the prompt) when larger, so compacting again is rare."""
        if query is None:
            return injected_tokens(messages, "", pinned)
        turn = query[1]
        earlier = injected_tokens(messages, "", {t: text for t, text in pinned.items() if t != turn})
        kept = self._recalls.pop((tenant, ident.session))
        if kept is not None:
            self._recalls.put((tenant, ident.session), kept)
            if kept.turn == turn:
                return earlier + recall_tokens(kept.result)
        largest = self._largest.pop((tenant, ident.user)) or 0
        if largest:
            self._largest.put((tenant, ident.user), largest)
        return earlier + max(0, min(self._settings.proxy_recall_reserve, prompt // 2), largest)

    async def _compact(
        self, out: Prepared, stage: str, tenant: str, ident: Identity, messages: list[Message], budget: int
    ) -> CompactReply:
        if budget <= 0:
            raise InvalidInput(f"window {ident.window} leaves no room for the prompt after the answer's reserve")
        reply = await _timed(out, stage, self._memory.compact(tenant, ident.session, messages, budget))
        if reply.shard_ms:
            out.stages_ms[f"{stage}_shard"] = reply.shard_ms
        return reply

    def _background(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, tenant: str, session: str, plan: Capture) -> None:
        """Off the request's path: nothing in this request waits for its own capture (a tool result compaction
        finds no offload entry for yet stays in the array as sent). A failure is logged, and as the ids were not
        recorded, the next request of the session publishes them again."""
        start = time.perf_counter()
        try:
            await self._memory.publish(tenant, plan.turns, plan.results)
            await asyncio.to_thread(self._captures.record, tenant, session, plan.ids)
        except Exception as exc:  # noqa: BLE001 - the request has gone on; the next one retries the capture
            log.warning("proxy capture failed in %s/%s (retried next request): %r", tenant, session, exc)
        finally:
            self._noted("capture", (time.perf_counter() - start) * 1000)
            key = (tenant, session)
            if rest := self._publishing.pop(key, frozenset()) - plan.new_ids:
                self._publishing[key] = rest

    async def _recall(
        self, out: Prepared, tenant: str, query: tuple[str, str] | None, pinned: Mapping[str, str]
    ) -> RecallResult | None:
        """Recall for the latest user message, once: the tool steps of its turn reuse it (its system context and
        its block). A fresh recall's block is pinned to the message (``pinned``: the session's pins, read before),
        and its own stages (embed, search, context) join ``out``'s."""
        if query is None:
            return None
        ident = out.identity
        (text, turn), key = query, (tenant, ident.session)
        kept = self._recalls.pop(key)
        if kept is not None and (kept.turn, kept.viewer) == (turn, ident.viewer):
            self._recalls.put(key, kept)
            return kept.result
        result = await self._memory.recall(tenant, ident.user, text, ident.viewer)
        out.stages_ms.update(result.stages_ms)
        user = (tenant, ident.user)
        self._largest.put(user, max(recall_tokens(result), self._largest.pop(user) or 0))
        self._recalls.put(key, _KeptRecall(turn, result, ident.viewer))
        if result.prepend_context and turn not in pinned:
            try:
                block = {turn: result.prepend_context}
                await asyncio.to_thread(self._pins.pin, tenant, ident.session, ident.viewer, block)
            except Exception as exc:  # noqa: BLE001 - this replica still injects it while it keeps the recall
                log.warning("proxy could not pin a recall in %s/%s: %r", tenant, ident.session, exc)
        return result

    async def capture_answer(self, tenant: str, prepared: Prepared, sent: list[Message], text: str) -> bool:
        """Publish the upstream's answer as an assistant turn (the id it will have when the agent sends it back);
        False when there was nothing to capture or publishing failed (logged: the answer is already delivered)."""
        ident = prepared.identity
        turn = answer_turn(sent, text, ident.user, ident.session, self._clock(), agent=ident.agent, team=ident.team)
        if turn is None:
            return False
        start = time.perf_counter()
        try:
            await self._memory.publish(tenant, [turn], [])
        except Exception as exc:  # noqa: BLE001 - the agent has its answer; the next request captures it again
            log.warning("proxy could not capture the answer in %s/%s: %r", tenant, prepared.identity.session, exc)
            return False
        finally:
            self._noted("capture_answer", (time.perf_counter() - start) * 1000)
        return True


@dataclass(frozen=True)
class _KeptRecall:
    """A session's last recall: for which user message, seen by whom."""

    turn: str
    result: RecallResult
    viewer: Viewer


def _blocks(pinned: Mapping[str, str], query: tuple[str, str] | None, recall: RecallResult | None) -> dict[str, str]:
    """Each user message's block: its pin, and the latest message's recall when it has none yet (pinned by now,
    unless the pin could not be written)."""
    if query is None or recall is None or not recall.prepend_context or query[1] in pinned:
        return dict(pinned)
    return {**pinned, query[1]: recall.prepend_context}


def _latest_query(messages: list[Message]) -> tuple[str, str] | None:
    """The latest user message's text (what recall searches with) and fingerprint; None when it has no text."""
    i = last_user(messages)
    text = text_of(messages[i].get("content")).strip() if i is not None else ""
    return (text, fingerprint(messages[i])) if i is not None and text else None


async def _unless_refused(compaction: Awaitable[CompactReply]) -> CompactReply | None:
    """A compaction to a guessed budget; None when the shard refused it (nothing was written), so that the
    exact budget decides, as it would have without the guess."""
    try:
        return await compaction
    except InvalidInput:
        return None


async def _both(first: Awaitable[T], second: Awaitable[U]) -> tuple[T, U]:
    """Run both at once; when one fails, the other is cancelled rather than left running unowned."""
    a, b = asyncio.ensure_future(first), asyncio.ensure_future(second)
    try:
        await asyncio.gather(a, b)
    except BaseException:
        a.cancel()
        b.cancel()
        raise
    return a.result(), b.result()


async def _timed(out: Prepared, stage: str, work: Awaitable[T]) -> T:
    """Await ``work`` and note how long it took: the header that says where a slow request spent its time."""
    start = time.perf_counter()
    try:
        return await work
    finally:
        out.stages_ms[stage] = (time.perf_counter() - start) * 1000


def server_timing(stages: Mapping[str, float]) -> str:
    """Stage times as a ``Server-Timing`` header value (W3C Server Timing), ``recall;dur=12.3, compact;dur=4.1``:
    what browsers' developer tools and HTTP clients show of where a request spent its time on the server."""
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in stages.items())


def parse_chat(raw: Any) -> ChatRequest:
    """The request body as a :class:`ChatRequest`, or InvalidInput naming the first problem."""
    try:
        return ChatRequest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(f"chat request: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
