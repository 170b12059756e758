"""The proxy's runtime-free parts: idempotent capture ids, recall injection, identity, the streamed answer."""

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemoflow.config import Settings
from mnemoflow.errors import InvalidInput
from mnemoflow.memory.recall import RecallResult
from mnemoflow.proxy.answer import StreamedAnswer, answer_text
from mnemoflow.proxy.capture import CaptureLog, answer_turn, plan_capture
from mnemoflow.proxy.inject import inject_recall
from mnemoflow.proxy.pipeline import ChatRequest, identify
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
        ("user", "List the files."), ("assistant", "ok"), ("user", "ok"), ("assistant", "ok")
    ]  # fmt: skip
    assert len({t.message_id for t in first.turns}) == 4  # the second "ok" of the assistant is another message
    [result] = first.results
    assert (result.tool_call_id, result.tool_name, result.arguments, result.content) == (
        "call_1", "bash", '{"cmd": "ls"}', "a.py\nb.py"
    )  # fmt: skip
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


def test_recall_goes_to_the_system_prompt_and_before_the_last_user_message() -> None:
    recall = RecallResult(prepend_context="<relevant-memories>tea</relevant-memories>", system_context="PERSONA",
                          hits=[], persona="")  # fmt: skip
    out = inject_recall(ARRAY, recall)
    assert out[0]["content"] == "You are helpful.\n\nPERSONA"
    assert out[5]["content"][0] == {"type": "text", "text": recall.prepend_context}
    assert ARRAY[0]["content"] == "You are helpful."  # the agent's array is not touched
    bare = inject_recall([{"role": "user", "content": "hi"}], recall)
    assert bare == [{"role": "system", "content": "PERSONA"},
                    {"role": "user", "content": f"{recall.prepend_context}\n\nhi"}]  # fmt: skip


def test_identity_from_headers_body_and_settings() -> None:
    settings = Settings(proxy_windows={"small": 4096})
    body = ChatRequest(model="small", messages=ARRAY, user="ana@example.com")
    ident = identify(body, {}, settings)
    assert ident.user == "ana@example.com" and ident.window == 4096 and ident.session.startswith("chat-")
    assert identify(body, {}, settings).session == ident.session  # one conversation, one session
    other = identify(body.model_copy(update={"messages": ARRAY[:1] + [{"role": "user", "content": "x"}]}), {}, settings)
    assert other.session != ident.session
    hdr = identify(body, {"x-mnemoflow-user": "bo", "x-mnemoflow-session": "run/7", "x-mnemoflow-window": "900"},
                   settings)  # fmt: skip
    assert (hdr.user, hdr.window) == ("bo", 900) and "/" not in hdr.session
    assert identify(body.model_copy(update={"model": "big"}), {}, settings).window is None
    with pytest.raises(InvalidInput, match="x-mnemoflow-window"):
        identify(body, {"x-mnemoflow-window": "lots"}, settings)


def test_streamed_answer_is_read_across_chunk_boundaries() -> None:
    stream = (b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
              b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
              b'data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}\n\ndata: [DONE]\n\n')  # fmt: skip
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

    async def recall(self, tenant: str, user: str, query: str) -> RecallResult:
        return RecallResult(prepend_context="", system_context="", hits=[], persona="")

    async def compact(self, tenant: str, session: str, messages: list, window: int) -> object:
        raise AssertionError("no window is configured: compaction must not run")


def test_a_failed_capture_does_not_fail_the_request_and_is_published_again(tmp_path: Path) -> None:
    import asyncio

    from mnemoflow.proxy.pipeline import MemoryProxy

    memory = FlakyMemory()
    proxy = MemoryProxy(memory, CaptureLog(LocalFileStore(tmp_path, fsync=False)), Settings(), clock=lambda: NOW)
    body = ChatRequest(model="m", messages=ARRAY[:2])

    async def twice() -> list[str]:
        states = []
        for _ in range(2):
            prepared = await proxy.prepare("acme", body, {"x-mnemoflow-session": "s1"})
            states.append(prepared.headers["x-mnemoflow-memory"])
            await asyncio.sleep(0.05)  # let the background capture run
        return states

    assert asyncio.run(twice()) == ["ok", "ok"]
    assert len(memory.published) == 1 and len(memory.published[0]) == 1  # the retry published the user turn
