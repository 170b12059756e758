"""Property tests of compaction over random valid chat arrays and windows, with a real LocalFileStore.

Checked for every example: the output is a valid chat array (each result after its call, no orphans), the last
user message is kept, the token budget is respected, and every tool output that left the prompt is recoverable
byte-exact through drill-down (tool_call_id -> entry -> ref, and node_id -> entries -> refs).
"""

from __future__ import annotations

import asyncio
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemoflow.offload.annotations import annotated_entries, drill_down
from mnemoflow.offload.entries import OffloadWriter, read_ref
from mnemoflow.offload.messages import is_injected, last_user, validate
from mnemoflow.offload.session import compact_session
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock
from mnemoflow.tokens import messages_tokens

_WORDS = st.sampled_from(["error", "ok", "def", "x = 1", "Traceback", "path/to/file.py", "é", "日本", "]", '"', "\n"])
_text = st.lists(_WORDS, min_size=1, max_size=60).map(" ".join)
_big = st.lists(_WORDS, min_size=0, max_size=1500).map(" ".join)


@st.composite
def chats(draw: st.DrawFn) -> list[dict]:
    msgs: list[dict] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(_text)})
    n = 0
    for _ in range(draw(st.integers(1, 6))):
        msgs.append({"role": "user", "content": draw(_text)})
        for _ in range(draw(st.integers(0, 4))):
            k = draw(st.integers(1, 3))
            ids = [f"call_{n + j}" for j in range(k)]
            n += k
            msgs.append(
                {
                    "role": "assistant",
                    "content": draw(st.one_of(st.none(), _text)),
                    "tool_calls": [
                        {
                            "id": i,
                            "type": "function",
                            "function": {
                                "name": draw(st.sampled_from(["bash", "view", "edit"])),
                                "arguments": '{"x": 1}',
                            },
                        }
                        for i in ids
                    ],
                }
            )
            msgs.extend({"role": "tool", "tool_call_id": i, "content": draw(_big)} for i in ids)
        if draw(st.booleans()):
            msgs.append({"role": "assistant", "content": draw(_text)})
    return msgs


def _check(files, before: list[dict], window: int, result) -> None:
    out = result.messages
    validate(out)  # raises on an orphan, an unknown role or a missing result
    user = last_user(before)
    if user is not None:
        kept = [m for m in out if m.get("role") == "user" and not is_injected(m)]
        assert kept and kept[-1] == before[user]
    assert messages_tokens(out) <= window
    originals = {m["tool_call_id"]: m["content"] for m in before if m["role"] == "tool"}
    entries = {e.tool_call_id: e for e in annotated_entries(files, "t", "s")}
    for removed in result.removed:
        raw = originals[removed.tool_call_id].encode()
        assert removed.ref == entries[removed.tool_call_id].ref
        assert read_ref(files, "t", "s", removed.tool_call_id) == raw
        node = entries[removed.tool_call_id].node_id
        if node is not None:
            assert raw in [r for e, r in drill_down(files, "t", "s", node) if e.tool_call_id == removed.tool_call_id]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chats(), st.floats(0.02, 1.5), st.integers(1, 3))
def test_compaction_properties(messages: list[dict], fraction: float, turns: int) -> None:
    total = messages_tokens(messages)
    with tempfile.TemporaryDirectory() as root:
        files = LocalFileStore(root)
        writer, clock = OffloadWriter(files), ManualClock()
        cut = len(messages)
        # replay a growing prefix, as an agent calls compact turn after turn
        for step in range(turns, 0, -1):
            prefix = messages[: max(1, cut - 2 * (step - 1))]
            while prefix and prefix[-1]["role"] == "assistant" and prefix[-1].get("tool_calls"):
                prefix = prefix[:-1]
            if not prefix or validate_quiet(prefix) is False:
                continue
            user = last_user(prefix)
            floor = sum(1 for m in prefix if m["role"] == "system" and prefix.index(m) == 0)
            need = messages_tokens(prefix[:floor]) + (messages_tokens([prefix[user]]) if user is not None else 0)
            window = max(need, int(total * fraction))
            result = asyncio.run(compact_session(files, "t", "s", prefix, window, clock=clock, writer=writer))
            _check(files, prefix, window, result)
            clock.advance(5)


def validate_quiet(messages: list[dict]) -> bool:
    try:
        validate(messages)
    except ValueError:
        return False
    return True


def test_properties_exercise_every_level() -> None:
    """The strategy reaches mild, aggressive and emergency compaction (guards against a vacuous property)."""
    levels: set[str] = set()

    # Derandomized: the same examples every run, so this guard cannot flake on an unlucky draw (a clean-clone run
    # once drew 60 examples without an aggressive one).
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(chats(), st.floats(0.02, 2.0))
    def run(messages: list[dict], fraction: float) -> None:
        user = last_user(messages)
        floor = 1 if messages[0]["role"] == "system" else 0
        need = messages_tokens(messages[:floor]) + (messages_tokens([messages[user]]) if user is not None else 0)
        window = max(need, int(messages_tokens(messages) * fraction))
        with tempfile.TemporaryDirectory() as root:
            files = LocalFileStore(root)
            result = asyncio.run(
                compact_session(files, "t", "s", messages, window, clock=ManualClock(), writer=OffloadWriter(files))
            )
            _check(files, messages, window, result)
            levels.add(result.level)

    run()
    assert {"mild", "aggressive", "emergency"} <= levels, levels
