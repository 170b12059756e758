"""The SDK against the real API app (fakes behind it), and its retry and error rules against scripted answers."""

import asyncio
import json
from typing import Any

import httpx
import pytest

from mnemoflow.client import (
    ApiUnreachable,
    AsyncClient,
    Client,
    InvalidRequest,
    NotFound,
    RateLimited,
    ToolResultIn,
    TurnIn,
    Unauthorized,
)
from mnemoflow.client import calls as api_calls
from mnemoflow.config import TOPIC_TOOL_RESULTS, TOPIC_TURNS
from mnemoflow.retry import RetryPolicy
from tests.unit.test_api_memory import setup  # noqa: F401 - the memory app with fakes, shared as a fixture

FAST = RetryPolicy(attempts=3, base_delay=0.001, max_delay=0.01)


def sdk(setup_: tuple, key: str = "key-acme") -> Client:
    return Client("", key, http=setup_[0], retry=FAST)


def test_writes_read_and_drill_down_through_the_sdk(setup: tuple) -> None:  # noqa: F811
    mf, bus = sdk(setup), setup[1]
    items = [
        TurnIn(message_id="n1", user="ana", session="s2", role="user", content="hello"),
        TurnIn(message_id="n2", user="ana", session="s2", role="assistant", content="hi"),
        ToolResultIn(tool_call_id="c1", session="s2", tool_name="bash", content="ls output"),
        TurnIn(message_id="n3", user="ana", session="s2", role="user", content="thanks"),
    ]
    assert mf.submit(items, batch=1) == 4
    assert [t for t, _ in bus.sent] == [TOPIC_TURNS, TOPIC_TURNS, TOPIC_TOOL_RESULTS, TOPIC_TURNS]
    assert mf.whoami() == "acme"
    recalled = mf.recall("ana", "what milk does she drink")
    assert "oat milk" in recalled.prepend_context and recalled.hits
    drilled = mf.atom("ana", recalled.hits[0].id)
    assert drilled.messages and drilled.messages[0].id in {"m0", "m1", "m2"}
    assert any("French" in h.text for h in mf.memory_search("ana", "French"))
    assert mf.conversation_search("ana", "oat milk")[0].message.id == "m0"
    reply = mf.compact("s", [{"role": "user", "content": "hi"}], 8000)
    assert reply.level == "mild" and reply.removed[0].tool_call_id == "c0"
    assert mf.state("s").count == 2 and mf.canvases("s") == []


def test_conversations_come_page_by_page(setup: tuple) -> None:  # noqa: F811
    mf = sdk(setup)
    seen: list[tuple[int, int]] = []
    original = mf.send

    def spy(call: api_calls.Call) -> Any:
        seen.append((call.params.get("offset"), call.params.get("limit")))
        return original(call)

    mf.send = spy  # type: ignore[method-assign]
    assert [m.id for m in mf.conversations("ana", page_size=2)] == ["m0", "m1", "m2"]
    assert seen == [(0, 2), (2, 2)]  # the short second page ends it


def test_typed_errors(setup: tuple) -> None:  # noqa: F811
    with pytest.raises(NotFound, match="no persona yet"):
        sdk(setup).persona("ana")
    with pytest.raises(Unauthorized):
        sdk(setup, key="wrong").recall("ana", "x")
    with pytest.raises(InvalidRequest) as bad:
        sdk(setup).compact("s", [{"role": "robot", "content": "x"}], 1000)
    assert bad.value.status == 400 and "unknown role" in bad.value.detail
    with pytest.raises(ValueError, match="invalid id"):
        sdk(setup).persona("../etc")  # refused before any request


def scripted(answers: list[Any]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """Each request gets the next answer: a status (with an optional Retry-After) or an exception to raise."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        status, headers = answer if isinstance(answer, tuple) else (answer, {})
        body = {"accepted": 1} if status == 202 else {"detail": f"status {status}"}
        return httpx.Response(status, json=body, headers=headers)

    return httpx.MockTransport(handle), seen


def turn() -> TurnIn:
    return TurnIn(message_id="m1", user="u", session="s", role="user", content="hi")


def test_retries_resend_the_same_idempotent_batch() -> None:
    transport, seen = scripted([httpx.ConnectError("refused"), 503, (429, {"Retry-After": "0"}), 202])
    retry = RetryPolicy(attempts=5, base_delay=0.001, max_delay=0.01)
    with Client("http://mf", "k", retry=retry, http=httpx.Client(transport=transport, base_url="http://mf")) as mf:
        assert mf.submit([turn()]) == 1
    bodies = {r.content for r in seen}
    assert len(seen) == 4 and len(bodies) == 1  # the same message id each time: the sink stores it once
    assert json.loads(seen[0].content)["turns"][0]["message_id"] == "m1"
    assert seen[0].headers["authorization"] == "Bearer k"


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        ([httpx.ConnectError("refused")] * 3, ApiUnreachable),
        ([(429, {"Retry-After": "0"})] * 3, RateLimited),
        ([400], InvalidRequest),  # not retried: the list holds a single answer
    ],
)
def test_what_is_given_up_on(answers: list, error: type[Exception]) -> None:
    transport, seen = scripted(list(answers))
    mf = Client("http://mf", "k", retry=FAST, http=httpx.Client(transport=transport, base_url="http://mf"))
    with pytest.raises(error):
        mf.submit([turn()])
    assert len(seen) == len(answers)


def test_async_client_reads_the_same_api(setup: tuple) -> None:  # noqa: F811
    app = setup[0].app

    async def run() -> tuple[str, list[str], str]:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mf")
        async with AsyncClient("http://mf", "key-acme", http=http, retry=FAST) as mf:
            recalled = await mf.recall("ana", "what milk does she drink")
            ids = [m.id async for m in mf.conversations("ana", page_size=2)]
            return recalled.prepend_context, ids, await mf.whoami()

    prepend, ids, tenant = asyncio.run(run())
    assert "oat milk" in prepend and ids == ["m0", "m1", "m2"] and tenant == "acme"


def test_remember_and_forget_are_operations_a_resend_repeats(setup: tuple) -> None:  # noqa: F811
    mf, bus = sdk(setup), setup[1]
    first = mf.remember("ana", "Ana prefers green tea", type="persona")
    again = mf.remember("ana", "Ana prefers green tea", type="persona")
    assert first.status == "pending" and again.id == first.id  # one operation: derived idempotency key
    atom = mf.memory_search("ana", "French")[0].id
    forget = mf.forget("ana", atom)
    assert forget.kind != first.kind and mf.operation(forget.id).id == forget.id
    assert {topic for topic, _ in bus.sent} == {"mnemoflow.commands"}
    with pytest.raises(NotFound):
        mf.forget("ana", "no-such-atom")


def test_memory_governance_through_the_sdk(setup: tuple) -> None:  # noqa: F811
    """Listing (page by page), history, edit, erase, export and import: each the API's answer, parsed; each write
    one operation per meaning (a resend has the same id), published on the commands topic."""
    import io

    from mnemoflow.governance.bundle import read_bundle
    from mnemoflow.governance.listing import AtomFilter

    mf, bus = sdk(setup), setup[1]
    seen: list[dict] = []
    original = mf.send

    def spy(call: api_calls.Call) -> Any:
        seen.append(dict(call.params))
        return original(call)

    mf.send = spy  # type: ignore[method-assign]
    atoms = list(mf.atoms("ana", page_size=1))
    assert len(atoms) >= 2 and len(seen) == len(atoms)  # one page per atom; the last says there is no next
    assert [p.get("cursor") is None for p in seen] == [True] + [False] * (len(atoms) - 1)
    assert len({a.id for a in atoms}) == len(atoms)
    french = [a for a in mf.atoms("ana", AtomFilter(text="french"))]
    assert [a.content for a in french] and all("French" in a.content for a in french)
    atom = french[0]
    assert [v.record.id for v in mf.history("ana", atom.id)] == [atom.id]

    edit = mf.edit("ana", atom.id, text="Please always answer in Portuguese", priority=90)
    assert (
        edit.status == "pending"
        and mf.edit("ana", atom.id, text="Please always answer in Portuguese", priority=90).id == edit.id
    )
    assert mf.edit("ana", atom.id, priority=10).id != edit.id  # another edit is another operation
    erase = mf.erase_user("ana")
    assert erase.kind == "erase_user" and mf.erase_user("ana").id == erase.id
    with pytest.raises(NotFound):
        mf.erase_session("no-such-session")

    bundle = mf.export("ana")
    manifest, members = read_bundle(io.BytesIO(bundle))
    assert manifest.user == "ana" and any(name.startswith("user/records/") for name in members)
    imported = mf.import_bundle("ana-copy", bundle)
    assert imported.kind == "import_user" and mf.import_bundle("ana-copy", bundle).id == imported.id
    with pytest.raises(InvalidRequest):
        mf.import_bundle("ana-copy", b"not a bundle")
    assert {topic for topic, _ in bus.sent} == {"mnemoflow.commands"}


def test_the_async_client_sends_the_idempotency_key_too(setup: tuple) -> None:  # noqa: F811
    app = setup[0].app

    async def run() -> tuple[str, str, int]:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://mf")
        async with AsyncClient("http://mf", "key-acme", http=http, retry=FAST) as mf:
            first = await mf.remember("ana", "Ana prefers green tea")
            again = await mf.remember("ana", "Ana prefers green tea")
            return first.id, again.id, len([a async for a in mf.atoms("ana", page_size=2)])

    first, again, n = asyncio.run(run())
    assert first == again and first.startswith("sdk-") and n >= 2


def test_a_client_of_an_agent_names_it_on_its_events_and_recalls_and_one_of_none_sends_what_it_always_did() -> None:
    """docs/concepts/scopes.md: the SDK takes the agent from its configuration."""
    plain = api_calls.submit([turn()])
    assert "agent" not in plain.json["turns"][0] and api_calls.recall("u", "q").json == {"user": "u", "query": "q"}
    coder = api_calls.Acting("coder", "eng")
    stamped = api_calls.submit([turn(), turn().model_copy(update={"agent": "sub"})], coder).json["turns"]
    assert [(t["agent"], t.get("team")) for t in stamped] == [("coder", "eng"), ("sub", None)]  # a named one stays
    assert api_calls.recall("u", "q", coder).json == {"user": "u", "query": "q", "agent": "coder", "team": "eng"}
    assert api_calls.memory_search("u", "q", acting=coder).json["agent"] == "coder"
    transport, seen = scripted([202])
    with Client("http://mf", "k", http=httpx.Client(transport=transport, base_url="http://mf"), agent="coder") as mf:
        assert mf.submit([turn()]) == 1
    assert json.loads(seen[0].content)["turns"][0]["agent"] == "coder"
