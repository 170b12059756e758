"""Display names: the speaker's name on a user's own L0 turns, looked up once and then caught up."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from mnemoflow.events import TurnEvent, TurnIn
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.ports.files import Tail
from mnemoflow.profiles import DisplayNames
from mnemoflow.replay import from_locomo, safe_id
from mnemoflow.storage import Layout, LocalFileStore

T0 = datetime(2026, 5, 4, 9, 0, tzinfo=UTC)
DIALOGUE = {  # LoCoMo's shape, our own words: each turn is stored for both speakers
    "sample_id": "d-1",
    "conversation": {
        "speaker_a": "Maya",
        "speaker_b": "王芳",
        "session_1_date_time": "9:00 am on 4 May, 2026",
        "session_1": [
            {"speaker": "Maya", "dia_id": "D1:1", "text": "I just adopted a greyhound called Biscuit."},
            {"speaker": "王芳", "dia_id": "D1:2", "text": "太好了！我下个月要去杭州出差。"},
            {"speaker": "Maya", "dia_id": "D1:3", "text": "Bring me some Longjing tea, please."},
        ],
    },
}


class CountingStore(LocalFileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.reads: list[tuple[str, int]] = []

    def read_tail(self, path: str, offset: int) -> Tail | None:
        self.reads.append((path.rsplit("/", 1)[-1], offset))
        return super().read_tail(path, offset)


def turn(
    i: int, ts: datetime, role: Literal["user", "assistant"] = "user", name: str | None = None, user: str = "u"
) -> TurnEvent:
    return TurnEvent(
        tenant="t", message_id=f"m{i}", user=user, session="s", role=role, content=f"said {i}", ts=ts, name=name
    )


def test_each_speaker_of_a_replayed_dialogue_is_named_by_their_own_turns(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    items = [i for i in from_locomo(DIALOGUE).items if isinstance(i, TurnIn)]
    L0Writer(files).write(TurnEvent.from_input("t", item, T0) for item in items)
    maya, wang = safe_id("d-1-Maya"), safe_id("d-1-王芳")
    assert {i.user for i in items} == {maya, wang} and wang.startswith("d-1--")  # an id that tells nobody anything
    assert DisplayNames(files).of_many("t", [maya, wang, "nobody"]) == {maya: "Maya", wang: "王芳"}


def test_the_latest_own_name_wins_and_a_later_one_is_read_from_where_the_last_lookup_stopped(tmp_path: Path) -> None:
    files = CountingStore(tmp_path)
    writer = L0Writer(files)
    writer.write([turn(0, T0 - timedelta(days=1), name="Sam"), turn(1, T0, name="Sam Lee"), turn(2, T0)])
    writer.write([turn(3, T0 + timedelta(minutes=1), role="assistant", name="Helper")])  # another speaker
    names = DisplayNames(files)
    assert names.of("t", "u") == "Sam Lee"
    assert files.reads == [("2026-05-04.jsonl", 0)]  # the newest day named the user: no older file opened
    assert names.of("t", "u") == "Sam Lee" and len(files.reads) == 1  # nothing changed: nothing read
    day = Layout.conversation_day("t", "u", T0.date())
    size = len(files.read_bytes(day) or b"")
    writer.write([turn(4, T0 + timedelta(minutes=2), name="Samantha")])
    assert names.of("t", "u") == "Samantha" and files.reads[-1] == ("2026-05-04.jsonl", size)


def test_unnamed_turns_fall_back_to_an_older_day_within_the_bound(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    old, unnamed = turn(0, T0 - timedelta(days=3), name="Old Name"), turn(1, T0 - timedelta(days=1))
    L0Writer(files).write([old, unnamed, turn(2, T0), turn(3, T0, role="assistant", name="Helper")])
    assert DisplayNames(files).of("t", "u") == "Old Name"
    assert DisplayNames(files, days=2).of("t", "u") is None  # two day files looked through, not three
    assert DisplayNames(files).of("t", "never-seen") is None


def test_a_replaced_day_is_read_again_and_an_erased_user_has_no_name(tmp_path: Path) -> None:
    files = LocalFileStore(tmp_path, fsync=False)
    L0Writer(files).write([turn(0, T0, name="Ana")])
    names = DisplayNames(files)
    assert names.of("t", "u") == "Ana"
    day = Layout.conversation_day("t", "u", T0.date())
    line: dict[str, Any] = {"id": "m9", "session": "s", "role": "user", "content": "hi", "ts": T0.isoformat()}
    files.write_atomic(day, (json.dumps(line | {"name": "Ana Sousa"}) + "\n").encode())
    assert names.of("t", "u") == "Ana Sousa"  # an import or a rewrite: a new file, read from its start
    files.remove(Layout.user_dir("t", "u"))
    assert names.of("t", "u") is None
