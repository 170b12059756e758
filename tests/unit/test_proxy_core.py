"""The proxy's runtime-free parts: idempotent capture ids, recall injection, identity, the streamed answer."""

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemoflow.config import Settings
from mnemoflow.errors import InvalidInput
from mnemoflow.memory.recall.recaller import RecallResult
from mnemoflow.offload.messages import fingerprint
from mnemoflow.offload.replies import CompactReply
from mnemoflow.proxy.answer import StreamedAnswer, answer_text
from mnemoflow.proxy.capture import CaptureLog, answer_turn, plan_capture
from mnemoflow.proxy.inject import inject_recall, recall_tokens
from mnemoflow.proxy.pipeline import ChatRequest, MemoryProxy, Prepared, identify, server_timing
from mnemoflow.scopes import Viewer
from mnemoflow.storage import LocalFileStore

NOW = datetime(2026, 5, 1, 12, tzinfo=UTC)
CALL = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}
ARRAY = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.py\nb.py"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": [{"type": "text", "text": "ok"}]},
    {"role": "assistant", "content": "ok"},
]


def test_capture_is_idempotent_and_only_new_messages_are_planned() -> None:
    first = plan_capture(ARRAY, "ana", "s1", frozenset(), NOW)
    assert [(t.role, t.content) for t in first.turns] == [
        ("user", "List the files."),
        ("assistant", "ok"),
        ("user", "ok"),
        ("assistant", "ok"),
    ]
    assert len({t.message_id for t in first.turns}) == 4  # the second "ok" of the assistant is another message
    [result] = first.results
    assert (result.tool_call_id, result.tool_name, result.arguments, result.content) == (
        "call_1",
        "bash",
        '{"cmd": "ls"}',
        "a.py\nb.py",
    )
    assert plan_capture(ARRAY, "ana", "s1", first.ids, NOW).turns == []  # the same array again: nothing new
    longer = plan_capture([*ARRAY, {"role": "user", "content": "thanks"}], "ana", "s1", first.ids, NOW)
    assert [t.content for t in longer.turns] == ["thanks"] and longer.results == []
    again = plan_capture(ARRAY, "ana", "s1", frozenset(), NOW)
    assert [t.message_id for t in again.turns] == [t.message_id for t in first.turns]  # ids are stable
    assert plan_capture(ARRAY, "ana", "s2", frozenset(), NOW).turns[0].message_id != first.turns[0].message_id


def test_an_answer_gets_the_id_it_will_have_when_sent_back() -> None:
    turn = answer_turn(ARRAY, "ok", "ana", "s1", NOW)
    assert turn is not None
    back = plan_capture([*ARRAY, {"role": "assistant", "content": "ok"}], "ana", "s1", frozenset(), NOW)
    assert back.turns[-1].message_id == turn.message_id
    assert answer_turn(ARRAY, "  ", "ana", "s1", NOW) is None


def test_capture_log_survives_a_replica_that_forgot(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    CaptureLog(files).record("acme", "s1", frozenset({"px-1"}))
    assert CaptureLog(files).captured("acme", "s1") == {"px-1"}  # a new replica reads the file
    assert CaptureLog(files).captured("acme", "s2") == frozenset()


def test_recall_goes_to_the_system_prompt_and_each_block_before_its_user_message() -> None:
    block = "<relevant-memories>tea</relevant-memories>"
    out = inject_recall(ARRAY, "PERSONA", {fingerprint(ARRAY[5]): block, fingerprint(ARRAY[1]): "older"})
    assert out[0]["content"] == "You are helpful.\n\nPERSONA"
    assert out[5]["content"][0] == {"type": "text", "text": block}
    assert out[1]["content"] == "older\n\nList the files."  # an earlier user message keeps its own block
    assert ARRAY[0]["content"] == "You are helpful."  # the agent's array is not touched
    bare = inject_recall([{"role": "user", "content": "hi"}], "PERSONA", {fingerprint(ARRAY[5]): block})
    assert bare == [{"role": "system", "content": "PERSONA"}, {"role": "user", "content": "hi"}]


def test_identity_from_headers_body_and_settings() -> None:
    settings = Settings(proxy_windows={"small": 4096})
    body = ChatRequest(model="small", messages=ARRAY, user="ana@example.com")
    ident = identify(body, {}, settings)
    assert ident.user == "ana@example.com" and ident.window == 4096 and ident.session.startswith("chat-")
    assert identify(body, {}, settings).session == ident.session  # one conversation, one session
    other = identify(body.model_copy(update={"messages": ARRAY[:1] + [{"role": "user", "content": "x"}]}), {}, settings)
    assert other.session != ident.session
    hdr = identify(
        body, {"x-mnemoflow-user": "bo", "x-mnemoflow-session": "run/7", "x-mnemoflow-window": "900"}, settings
    )
    assert (hdr.user, hdr.window) == ("bo", 900) and "/" not in hdr.session
    assert identify(body.model_copy(update={"model": "big"}), {}, settings).window is None
    with pytest.raises(InvalidInput, match="x-mnemoflow-window"):
        identify(body, {"x-mnemoflow-window": "lots"}, settings)


def test_the_agent_and_its_team_come_from_headers_and_must_be_ids() -> None:
    """docs/concepts/scopes.md: the proxy captures and recalls as the agent it is told; none is the default agent."""
    settings = Settings()
    body = ChatRequest(model="m", messages=ARRAY, user="ana")
    plain = identify(body, {}, settings)
    assert (plain.agent, plain.team, plain.viewer) == (None, None, Viewer())
    coder = identify(body, {"x-mnemoflow-agent": "coder", "x-mnemoflow-team": "eng"}, settings)
    assert coder.viewer == Viewer(agent="coder", team="eng")
    assert coder.session != plain.session  # two agents opening the same conversation keep two sessions
    with pytest.raises(InvalidInput, match="x-mnemoflow-agent"):
        identify(body, {"x-mnemoflow-agent": "../other"}, settings)
    plan = plan_capture(ARRAY, "ana", "s1", frozenset(), NOW, agent="coder", team="eng")
    assert {(t.agent, t.team) for t in [*plan.turns, *plan.results]} == {("coder", "eng")}
    answer = answer_turn(ARRAY, "ok", "ana", "s1", NOW, agent="coder", team="eng")
    assert answer is not None and (answer.agent, answer.team) == ("coder", "eng")
    assert {t.agent for t in plan_capture(ARRAY, "ana", "s1", frozenset(), NOW).turns} == {None}


def test_streamed_answer_is_read_across_chunk_boundaries() -> None:
    stream = (
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}\n\ndata: [DONE]\n\n'
    )
    answer = StreamedAnswer()
    for i in range(0, len(stream), 7):
        answer.feed(stream[i : i + 7])
    assert answer.text == "Hello"
    assert answer_text(b'{"choices":[{"message":{"content":"Hi"}}]}') == "Hi"
    assert answer_text(b"not json") == ""


class FlakyMemory:
    """A memory side whose first publish fails: the request must go on, the next one must publish again."""

    def __init__(self) -> None:
        self.published: list[list[str]] = []
        self.failures = 1

    async def publish(self, tenant: str, turns: list, results: list) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker away")
        self.published.append([t.message_id for t in turns])

    async def recall(self, tenant: str, user: str, query: str, viewer: Viewer) -> RecallResult:
        return RecallResult(prepend_context="", system_context="", hits=[], persona="")

    async def compact(self, tenant: str, session: str, messages: list, window: int) -> object:
        raise AssertionError("no window is configured: compaction must not run")


async def settled(proxy: MemoryProxy) -> None:
    """Wait for the captures the proxy publishes in the background (a fixed sleep is too short on a busy box)."""
    async with asyncio.timeout(10):
        while proxy._tasks:
            await asyncio.gather(*proxy._tasks)


def test_a_failed_capture_does_not_fail_the_request_and_is_published_again(tmp_path: Path) -> None:
    memory = FlakyMemory()
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), Settings(), clock=lambda: NOW)
    body = ChatRequest(model="m", messages=ARRAY[:2])

    async def twice() -> list[str]:
        states = []
        for _ in range(2):
            prepared = await proxy.prepare("acme", body, {"x-mnemoflow-session": "s1"})
            states.append(prepared.headers["x-mnemoflow-memory"])
            await settled(proxy)
        return states

    assert asyncio.run(twice()) == ["ok", "ok"]
    assert len(memory.published) == 1 and len(memory.published[0]) == 1  # the retry published the user turn


class GatedMemory(FlakyMemory):
    """A memory side whose publishes wait for a gate and may fail: requests arrive while a capture is in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 0
        self.gate = asyncio.Event()
        self.attempts: list[list[str]] = []
        self.fail_first = False

    async def publish(self, tenant: str, turns: list, results: list) -> None:
        ids = [t.message_id for t in turns]
        self.attempts.append(ids)
        await self.gate.wait()
        if self.fail_first and ids == self.attempts[0]:
            self.fail_first = False
            raise ConnectionError("broker away")
        await super().publish(tenant, turns, results)


def test_a_request_during_a_capture_in_flight_does_not_publish_it_again(tmp_path: Path) -> None:
    """A tool step right after an answer often arrives before the previous request's capture is acknowledged:
    it publishes only what is new to both; if the capture in flight fails, the next request sends it again."""
    memory = GatedMemory()
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), Settings(), clock=lambda: NOW)
    session = {"x-mnemoflow-session": "s1"}

    async def steps() -> list[str]:
        captured = []
        for n in (2, 5):  # the second array holds the first and three messages more
            prepared = await proxy.prepare("acme", ChatRequest(model="m", messages=ARRAY[:n]), session)
            captured.append(prepared.headers["x-mnemoflow-captured"])
        memory.fail_first = True  # the first publish in flight fails, the second succeeds
        memory.gate.set()
        await settled(proxy)
        prepared = await proxy.prepare("acme", ChatRequest(model="m", messages=ARRAY[:5]), session)
        captured.append(prepared.headers["x-mnemoflow-captured"])
        await settled(proxy)
        return captured

    assert asyncio.run(steps()) == [
        "turns=1; tool_results=0; too_large=0",
        "turns=1; tool_results=1; too_large=0",  # not the user turn the first request is publishing
        "turns=1; tool_results=0; too_large=0",  # that user turn, its publish having failed
    ]
    first, second, third = memory.attempts
    assert first == third and len(first) == 1 and first[0] not in second
    assert memory.published == [second, third]
    assert not proxy._publishing  # nothing left over once the publishes are done


class ScriptedMemory:
    """A memory side that records what compaction was asked and when; recall waits until compaction has started,
    so a proxy that ran them one after the other would never finish."""

    def __init__(self, recall: RecallResult, concurrent: bool = True) -> None:
        self.result = recall
        self.recalls = 0
        self.budgets: list[int] = []
        self._concurrent = concurrent
        self.refuse_below = 0
        self._compacting = asyncio.Event()
        self.viewers: list[Viewer] = []
        self.shard_ms = 0.0

    async def publish(self, tenant: str, turns: list, results: list) -> None:
        return None

    async def recall(self, tenant: str, user: str, query: str, viewer: Viewer) -> RecallResult:
        self.recalls += 1
        self.viewers.append(viewer)
        if self._concurrent:
            await asyncio.wait_for(self._compacting.wait(), 5)
        return self.result

    async def compact(self, tenant: str, session: str, messages: list, window: int) -> CompactReply:
        self._compacting.set()
        self.budgets.append(window)
        if window < self.refuse_below:  # as the shard does, before writing anything
            raise InvalidInput(f"window of {window} tokens is too small for the last user message")
        kept = [messages[0], messages[-1]]  # what a compaction to this budget keeps, stood in for
        return CompactReply(
            messages=kept, removed=[], level="aggressive", tokens_before=500, tokens_after=40, shard_ms=self.shard_ms
        )


def _prepare(proxy: MemoryProxy, body: ChatRequest, times: int = 1) -> list[Prepared]:
    async def run() -> list[Prepared]:
        return [await proxy.prepare("acme", body, {"x-mnemoflow-session": "s1"}) for _ in range(times)]

    return asyncio.run(run())


def test_recall_and_compaction_run_at_once_and_the_upstream_gets_what_sequential_would_send(tmp_path: Path) -> None:
    recall = RecallResult(
        prepend_context="<relevant-memories>tea</relevant-memories>", system_context="PERSONA", hits=[], persona=""
    )
    memory = ScriptedMemory(recall)
    settings = Settings(proxy_windows={"m": 8192}, proxy_recall_reserve=1000)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), settings, clock=lambda: NOW)
    body = ChatRequest(model="m", messages=ARRAY[:2], max_tokens=192)
    [prepared] = _prepare(proxy, body)
    assert prepared.headers["x-mnemoflow-memory"] == "ok"  # recall waited for compaction to start: no deadlock
    assert memory.budgets == [8192 - 192 - 1000]  # the prompt less the recall reserve, fixed before recall ends
    blocks = {fingerprint(ARRAY[1]): recall.prepend_context}
    assert prepared.messages == inject_recall([ARRAY[0], ARRAY[1]], "PERSONA", blocks)  # compacted, then injected
    assert set(prepared.stages_ms) == {"capture_plan", "recall", "compact"}
    assert "x-mnemoflow-recall-degraded" not in prepared.headers


def test_every_stage_is_timed_for_the_headers_and_the_observer_the_captures_after_the_request_too(
    tmp_path: Path,
) -> None:
    """A fresh recall's own stages and the shard's side of a compaction join the request's; the captures, which run
    after the memory side, reach the observer only (the histogram), each once."""
    recall = RecallResult(
        prepend_context="tea", system_context="", hits=[], persona="", stages_ms={"embed": 3.0, "search": 2.0}
    )
    memory = ScriptedMemory(recall, concurrent=False)
    memory.shard_ms = 4.5
    seen: list[tuple[str, float]] = []
    settings = Settings(proxy_windows={"m": 8192})
    captures = LocalFileStore(tmp_path, fsync=False)
    proxy = MemoryProxy(memory, captures, settings, clock=lambda: NOW, observe=lambda s, ms: seen.append((s, ms)))

    async def run() -> Prepared:
        prepared = await proxy.prepare(
            "acme", ChatRequest(model="m", messages=ARRAY[:2]), {"x-mnemoflow-session": "s1"}
        )
        await settled(proxy)
        assert await proxy.capture_answer("acme", prepared, ARRAY[:2], "Noted.")
        return prepared

    prepared = asyncio.run(run())
    stages = prepared.stages_ms
    assert set(stages) == {"capture_plan", "recall", "embed", "search", "compact", "compact_shard"}
    assert (stages["embed"], stages["search"], stages["compact_shard"]) == (3.0, 2.0, 4.5)  # as measured where run
    assert all(ms >= 0 for ms in stages.values())
    assert "embed=3.0; search=2.0" in prepared.headers["x-mnemoflow-stages-ms"]
    names = [name for name, _ in seen]
    assert sorted(names) == sorted([*stages, "memory", "capture", "capture_answer"])  # each stage once
    assert dict(seen)["memory"] == prepared.memory_ms
    assert server_timing({"recall": 12.345, "total": 60}) == "recall;dur=12.3, total;dur=60.0"


def test_a_failing_observer_does_not_fail_the_request(tmp_path: Path) -> None:
    def broken(stage: str, ms: float) -> None:
        raise RuntimeError("metrics away")

    memory = ScriptedMemory(RecallResult(prepend_context="", system_context="", hits=[], persona=""), False)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), Settings(), clock=lambda: NOW, observe=broken)
    [prepared] = _prepare(proxy, ChatRequest(model="m", messages=ARRAY[:2]))
    assert prepared.headers["x-mnemoflow-memory"] == "ok"


def test_a_recall_answered_by_bm25_alone_is_said_in_the_headers(tmp_path: Path) -> None:
    recall = RecallResult(prepend_context="", system_context="", hits=[], persona="", degraded="lexical")
    proxy = MemoryProxy(
        ScriptedMemory(recall, concurrent=False),
        LocalFileStore(tmp_path, fsync=False),
        Settings(),
        clock=lambda: NOW,
    )
    [prepared] = _prepare(proxy, ChatRequest(model="m", messages=ARRAY[:2]))
    assert prepared.headers["x-mnemoflow-recall-degraded"] == "lexical"


def test_a_recall_larger_than_its_reserve_has_the_array_compacted_again_to_fit(tmp_path: Path) -> None:
    recall = RecallResult(prepend_context="memory " * 300, system_context="", hits=[], persona="")
    memory = ScriptedMemory(recall)
    settings = Settings(proxy_windows={"m": 4096}, proxy_recall_reserve=100)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), settings, clock=lambda: NOW)
    [prepared] = _prepare(proxy, ChatRequest(model="m", messages=ARRAY[:2], max_tokens=96))
    extra = recall_tokens(recall)
    assert extra > 100 and memory.budgets == [4000 - 100, 4000 - extra]  # the second one leaves the exact room
    assert "compact_again" in prepared.headers["x-mnemoflow-stages-ms"]
    assert prepared.headers["x-mnemoflow-tokens"] == f"before=500; recall={extra}; after={40 + extra}"


def test_a_tool_step_compacts_once_to_the_exact_room_and_a_refused_guess_is_retried_exactly(tmp_path: Path) -> None:
    recall = RecallResult(prepend_context="memory " * 50, system_context="", hits=[], persona="")
    extra = recall_tokens(recall)
    memory = ScriptedMemory(recall, concurrent=False)
    settings = Settings(proxy_windows={"m": 4096}, proxy_recall_reserve=1000)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), settings, clock=lambda: NOW)
    _prepare(proxy, ChatRequest(model="m", messages=ARRAY[:2], max_tokens=96), times=2)
    assert memory.recalls == 1 and memory.budgets == [4000 - 1000, 4000 - extra]  # the step knows its recall
    small = MemoryProxy(memory, LocalFileStore(tmp_path / "b", fsync=False), settings, clock=lambda: NOW)
    memory.budgets, memory.refuse_below = [], 3500  # the reserve's guess leaves too little for the last message
    [prepared] = _prepare(small, ChatRequest(model="m", messages=ARRAY[:2], max_tokens=96))
    assert prepared.headers["x-mnemoflow-memory"] == "ok" and memory.budgets == [4000 - 1000, 4000 - extra]


def test_a_new_session_leaves_room_for_the_users_largest_recall(tmp_path: Path) -> None:
    recall = RecallResult(prepend_context="memory " * 50, system_context="", hits=[], persona="")
    extra = recall_tokens(recall)
    memory = ScriptedMemory(recall, concurrent=False)
    settings = Settings(proxy_windows={"m": 4096}, proxy_recall_reserve=10)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), settings, clock=lambda: NOW)
    body = ChatRequest(model="m", messages=ARRAY[:2], max_tokens=96)
    for session in ("s1", "s2"):
        asyncio.run(proxy.prepare("acme", body, {"x-mnemoflow-session": session, "x-mnemoflow-user": "ana"}))
    assert memory.budgets == [4000 - 10, 4000 - extra, 4000 - extra]  # s2 compacts once, to the exact room
    small = RecallResult(prepend_context="tea", system_context="", hits=[], persona="")
    memory.result, headers = small, {"x-mnemoflow-session": "s3", "x-mnemoflow-user": "ana"}
    asyncio.run(proxy.prepare("acme", body, headers))  # s3's recall for this message is small
    memory.budgets, memory.result = [], recall
    asyncio.run(proxy.prepare("acme", body.model_copy(update={"messages": ARRAY[:1] + [ARRAY[5]]}), headers))
    assert memory.budgets == [4000 - extra]  # a new user message: room for the user's largest, not s3's last one


def test_a_user_message_is_recalled_for_once_and_keeps_its_block_so_the_prompt_only_grows(tmp_path: Path) -> None:
    """The tool steps of a turn reuse its recall even after a write to memory; at the next user turn the earlier
    message keeps the block it had, in this replica and in one that never saw it (the pin is on disk)."""
    memory = ScriptedMemory(RecallResult(prepend_context="tea", system_context="P", hits=[], persona=""), False)
    files = LocalFileStore(tmp_path, fsync=False)
    proxy = MemoryProxy(memory, files, Settings(), clock=lambda: NOW)
    first_turn = ChatRequest(model="m", messages=ARRAY[:4])
    [step1, step2] = _prepare(proxy, first_turn, times=2)
    memory.result = RecallResult(prepend_context="coffee", system_context="Q", hits=[], persona="")
    [step3] = _prepare(proxy, first_turn)  # memory changed during the tool loop: the same prompt anyway
    assert memory.recalls == 1 and step1.messages == step2.messages == step3.messages
    assert step1.messages[1]["content"] == "tea\n\nList the files."
    next_turn = ChatRequest(model="m", messages=ARRAY[:6])
    [turn2] = _prepare(proxy, next_turn)
    assert memory.recalls == 2 and turn2.messages[1:4] == step1.messages[1:4]  # the earlier block stays
    assert turn2.messages[5]["content"][0] == {"type": "text", "text": "coffee"}
    [elsewhere] = _prepare(MemoryProxy(memory, files, Settings(), clock=lambda: NOW), next_turn)
    assert elsewhere.messages == turn2.messages  # another replica injects the same bytes


def test_a_pin_is_the_viewers_own(tmp_path: Path) -> None:
    memory = ScriptedMemory(RecallResult(prepend_context="secret", system_context="", hits=[], persona=""), False)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), Settings(), clock=lambda: NOW)
    coder = {"x-mnemoflow-session": "s1", "x-mnemoflow-agent": "coder"}
    asyncio.run(proxy.prepare("acme", ChatRequest(model="m", messages=ARRAY[:2]), coder))
    memory.result = RecallResult(prepend_context="", system_context="", hits=[], persona="")
    later = ChatRequest(model="m", messages=ARRAY[:6])
    other = asyncio.run(proxy.prepare("acme", later, {"x-mnemoflow-session": "s1"}))
    assert all("secret" not in str(m["content"]) for m in other.messages)  # another agent, no pin of coder's
    same = asyncio.run(proxy.prepare("acme", later, coder))
    assert same.messages[1]["content"] == "secret\n\nList the files."


def test_the_proxy_recalls_as_the_agent_its_headers_name_and_keeps_no_recall_across_agents(tmp_path: Path) -> None:
    memory = ScriptedMemory(RecallResult(prepend_context="tea", system_context="", hits=[], persona=""), False)
    proxy = MemoryProxy(memory, LocalFileStore(tmp_path, fsync=False), Settings(), clock=lambda: NOW)
    body = ChatRequest(model="m", messages=ARRAY[:2])

    async def ask(headers: dict[str, str]) -> None:
        await proxy.prepare("acme", body, {"x-mnemoflow-session": "s1", **headers})

    asyncio.run(ask({}))
    asyncio.run(ask({"x-mnemoflow-agent": "coder", "x-mnemoflow-team": "eng"}))
    asyncio.run(ask({"x-mnemoflow-agent": "coder", "x-mnemoflow-team": "eng"}))  # the same agent's tool step
    assert memory.viewers == [Viewer(), Viewer(agent="coder", team="eng")]
