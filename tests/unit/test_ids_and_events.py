from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from mnemoflow.events import ToolResultEvent, ToolResultIn, TurnEvent, TurnIn
from mnemoflow.ids import WireId, check_id
from mnemoflow.storage import Layout


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "a\\b", "..", ".hidden", "a..b", "x\x00", "é", "a" * 129, " a"])
def test_ids_with_path_characters_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid id"):
        check_id(bad)


@given(st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=40))
def test_any_accepted_id_stays_inside_its_folder(raw: str) -> None:
    try:
        safe = check_id(raw)
    except ValueError:
        return
    path = Layout.ref("t", "s", safe)
    assert path.startswith("t/sessions/s/refs/") and path.count("/") == 4 and ".." not in path


_WIRE = TypeAdapter(WireId)


@given(st.text(alphabet="ab._:/@-\\\x00é ", max_size=8) | st.text(alphabet="a.", min_size=126, max_size=130))
def test_an_id_on_a_topic_is_held_to_the_callers_rule(raw: str) -> None:
    """WireId (checked in Rust, for the worker) and check_id (in Python, for the API) accept the same ids."""
    try:
        check_id(raw)
        ok = True
    except ValueError:
        ok = False
    try:
        _WIRE.validate_python(raw)
        assert ok, raw
    except ValidationError:
        assert not ok, raw


def test_turn_event_takes_tenant_from_caller_and_time_from_server_when_absent() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = TurnIn(message_id="m1", user="u1", session="s1", role="user", content="hi")
    event = TurnEvent.from_input("acme", body, now)
    assert (event.tenant, event.ts, event.key) == ("acme", now, "acme/u1")


def test_event_times_are_normalised_to_utc() -> None:
    local = datetime(2026, 1, 2, 1, 0, tzinfo=timezone(timedelta(hours=8)))
    body = TurnIn(message_id="m1", user="u1", session="s1", role="user", content="x", ts=local)
    event = TurnEvent.from_input("t", body, datetime.now(UTC))
    assert event.ts.tzinfo == UTC and event.ts.date().isoformat() == "2026-01-01"


def test_tool_result_object_arguments_become_canonical_json() -> None:
    body = ToolResultIn(tool_call_id="c1", session="s", tool_name="grep", arguments={"b": 1, "a": "x"}, content="")
    event = ToolResultEvent.from_input("t", body, datetime.now(UTC))
    assert event.arguments == '{"a": "x", "b": 1}' and event.key == "t/s"


@pytest.mark.parametrize(
    "body",
    [
        {"message_id": "m", "user": "u", "session": "s", "role": "robot", "content": "x"},
        {"message_id": "m", "user": "u", "session": "s", "role": "user", "content": 3},
        {"message_id": "m", "user": "u", "session": "s", "role": "user"},
        {"message_id": "m", "user": "u", "session": "s", "role": "user", "content": "x", "extra": 1},
        {"message_id": "m", "user": "u", "session": "s", "role": "user", "content": "x", "ts": "2026-01-01T00:00"},
    ],
)
def test_malformed_turns_are_refused(body: dict) -> None:
    with pytest.raises(ValidationError):
        TurnIn.model_validate(body)


def test_agent_and_team_ride_on_the_events_and_default_to_none() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    plain = TurnEvent.from_input("t", TurnIn(message_id="m", user="u", session="s", role="user", content="x"), now)
    assert (plain.agent, plain.team, plain.visibility) == (None, None, None)
    body = TurnIn(
        message_id="m", user="u", session="s", role="user", content="x", agent="coder", team="eng", visibility="team"
    )
    event = TurnEvent.from_input("t", body, now)
    assert (event.agent, event.team, event.visibility, event.key) == ("coder", "eng", "team", "t/u")
    assert TurnEvent.model_validate_json(event.model_dump_json()) == event
    tool = ToolResultIn(tool_call_id="c", session="s", tool_name="ls", content="", agent="coder", team="eng")
    assert ToolResultEvent.from_input("t", tool, now).agent == "coder"


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        ({"visibility": "team", "agent": "coder"}, "visibility 'team' needs a team"),
        ({"visibility": "agent", "team": "eng"}, "visibility 'agent' needs an agent"),
        ({"visibility": "everyone"}, "visibility"),
        ({"agent": "../x"}, "invalid id"),
    ],
)
def test_a_visibility_without_its_owner_is_refused_with_the_reason(who: dict, reason: str) -> None:
    """The API checks the owner once the key's agent and team are in (tests/unit/test_api_scopes.py); the wire
    event is checked whatever wrote it: a forged event on the topic is refused (dead letter)."""
    body = {"message_id": "m", "user": "u", "session": "s", "role": "user", "content": "x", **who}
    owner_missing = "needs" in reason  # a bound key may supply the owner: the API body itself is accepted
    if owner_missing:
        TurnIn.model_validate(body)
    else:
        with pytest.raises(ValidationError, match=reason):
            TurnIn.model_validate(body)
    event = {**body, "tenant": "t", "ts": "2026-01-01T00:00:00Z"}
    with pytest.raises(ValidationError, match=reason if owner_missing else None):
        TurnEvent.model_validate(event)
