import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.errors import ServiceUnavailable
from mnemoflow.events import TurnEvent
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.memory.l0 import L0Message, L0Writer, read_l0
from mnemoflow.memory.l1.dedup import LLMDedupJudge
from mnemoflow.memory.l1.extract import LLMExtractor, narrow_sources
from mnemoflow.memory.l1.heuristic import HeuristicExtractor, HeuristicJudge
from mnemoflow.memory.l1.pipeline import L1Pipeline, L1Settings
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.memory.l1.state import load_cursor
from mnemoflow.prompts.l1_extraction import ExtractionOut, MemoryOut, SceneOut
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ManualClock, ScriptedLLM

T0 = datetime(2026, 2, 1, 12, tzinfo=UTC)
FACTS = [
    "I adopted a grey cat named Pixel last spring.",
    "Sure, tell me more.",
    "I work as a paramedic on night shifts in Leeds.",
    "That must be tiring.",
    "From now on always answer me in short bullet points.",
    "Got it.",
    "My sister Dana is getting married in June in Porto.",
    "Congratulations!",
]


def write_turns(files: LocalFileStore, texts: list[str], user: str = "u", start: int = 0) -> None:
    """User and assistant turns in turn (even ids are the user's), in session ``s``."""
    roles = ["user" if (start + i) % 2 == 0 else "assistant" for i in range(len(texts))]
    write_named(files, [("s", role, None, text) for role, text in zip(roles, texts, strict=True)], user, start)


def write_named(
    files: LocalFileStore, turns: list[tuple[str, str, str | None, str]], user: str = "u", start: int = 0
) -> None:
    """Turns given as (session, role, speaker name, text), a minute apart, ids m<start>, m<start + 1>, ..."""
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id=f"m{start + i}",
                user=user,
                session=session,
                role=role,
                name=name,
                content=text,
                ts=T0 + timedelta(minutes=start + i),
            )
            for i, (session, role, name, text) in enumerate(turns)
        ]
    )


def pipeline(files: LocalFileStore, store: InMemoryVectorStore, extractor=None, judge=None, **kw) -> L1Pipeline:
    emb = HashingEmbedder(64)
    return L1Pipeline(
        files=files,
        store=store,
        embedder=emb,
        extractor=extractor or HeuristicExtractor(),
        judge=judge or HeuristicJudge(),
        clock=ManualClock(T0 + timedelta(days=1)),
        **kw,
    )


@pytest.fixture
def files(tmp_path: Path) -> LocalFileStore:
    return LocalFileStore(tmp_path)


@pytest.fixture
def store() -> InMemoryVectorStore:
    return InMemoryVectorStore(dim=64, embedding_model=HashingEmbedder(64).model_id)


def test_heuristic_pass_stores_typed_atoms_whose_provenance_resolves_to_l0(files, store) -> None:
    write_turns(files, FACTS)
    result = asyncio.run(pipeline(files, store).run("t", "u"))
    records = RecordLog(files, "t", "u").read()
    assert result.stored == len(records) == 4
    assert {r.type for r in records} == {"persona", "episodic", "instruction"}
    l0 = {m.id: m for m in read_l0(files, "t", "u")}
    for rec in records:
        assert rec.source_message_ids and all(s in l0 and l0[s].role == "user" for s in rec.source_message_ids)
        assert rec.timestamps == [l0[rec.source_message_ids[0]].ts]
    assert store.count("t", "u") == 4 and result.llm_calls == 0


def test_re_running_the_same_turns_adds_no_atom(files, store) -> None:
    write_turns(files, FACTS)
    p = pipeline(files, store)
    asyncio.run(p.run("t", "u"))
    before = (store.count("t", "u"), len(RecordLog(files, "t", "u").read(live_only=False)))
    # a lost cursor (crash after the index write) replays the window: nothing is added twice
    files.write_atomic("t/users/u/state/l1_cursor.json", b"{}")
    again = asyncio.run(p.run("t", "u"))
    assert again.stored == 0 and again.skipped == 4
    assert (store.count("t", "u"), len(RecordLog(files, "t", "u").read(live_only=False))) == before


def test_the_whole_backlog_is_processed_in_windows(files, store) -> None:
    texts = [f"I visited museum number {i} in Vienna with my uncle Karl." if i % 2 == 0 else "ok" for i in range(50)]
    write_turns(files, texts)
    result = asyncio.run(pipeline(files, store).run("t", "u"))
    assert result.windows == 5 and result.messages == 50
    assert result.drafts == 25  # every user message was read (near-identical ones are then deduplicated)
    assert result.stored + result.skipped == 25


def test_max_windows_leaves_the_rest_pending(files, store) -> None:
    write_turns(files, FACTS * 3)
    p = pipeline(files, store, settings=L1Settings(new_size=4, max_windows=2))
    assert asyncio.run(p.run("t", "u")).windows == 2
    assert len(p.pending("t", "u")) == 4


def memories(ids: list[str], n: int) -> list[MemoryOut]:
    return [
        MemoryOut(content=f"w{i}a w{i}b w{i}c w{i}d", type="persona", priority=70 - i, source_message_ids=ids)
        for i in range(n)
    ]


def scripted_memories(ids: list[str], n: int = 1) -> ExtractionOut:
    return ExtractionOut(scenes=[SceneOut(scene_name="Talking about hobbies", memories=memories(ids, n))])


def test_model_source_ids_outside_the_window_are_dropped_and_at_most_20_kept(files, store) -> None:
    write_turns(files, FACTS[:2])
    mems = memories(["m0", "ghost"], 22)
    out = ExtractionOut(
        scenes=[
            SceneOut(
                scene_name="s1",
                memories=[
                    MemoryOut(content="invented", type="persona", priority=90, source_message_ids=["nope"]),
                    *mems[:10],
                ],
            ),
            SceneOut(scene_name="s2", memories=mems[10:]),
        ]
    )
    llm = ScriptedLLM([out])
    p = pipeline(files, store, extractor=LLMExtractor(llm), judge=LLMDedupJudge(ScriptedLLM()))
    result = asyncio.run(p.run("t", "u"))
    records = RecordLog(files, "t", "u").read()
    assert result.llm_calls == 1 and len(records) == 20
    assert all(r.source_message_ids == ["m0"] for r in records) and "invented" not in {r.content for r in records}
    assert {r.priority for r in records} == set(range(70, 50, -1))  # the lowest priorities were cut
    assert (
        llm.calls[0].stage == "l1-extraction" and "[#1] [user]" in llm.calls[0].messages[1].content
    )  # m0, by its label


def test_a_failing_model_keeps_the_cursor_and_the_next_run_catches_up(files, store) -> None:
    write_turns(files, FACTS[:4])
    llm = ScriptedLLM([ServiceUnavailable("down")])
    p = pipeline(files, store, extractor=LLMExtractor(llm), judge=HeuristicJudge())
    with pytest.raises(ServiceUnavailable):
        asyncio.run(p.run("t", "u"))
    assert load_cursor(files, "t", "u").done == {} and store.count("t", "u") == 0
    write_turns(files, FACTS[4:6], start=4)  # more turns arrive meanwhile
    llm.push(scripted_memories(["m0", "m4"]))
    result = asyncio.run(p.run("t", "u"))
    assert result.stored == 1 and result.messages == 6
    assert load_cursor(files, "t", "u").done == {T0.date().isoformat(): 6}
    assert RecordLog(files, "t", "u").read()[0].source_message_ids == ["m0", "m4"]


def test_users_are_separate(files, store) -> None:
    write_turns(files, FACTS, user="a")
    write_turns(files, FACTS[:2], user="b")
    p = pipeline(files, store)
    asyncio.run(p.run("t", "a"))
    assert store.count("t", "b") == 0 and RecordLog(files, "t", "b").read() == []
    asyncio.run(p.run("t", "b"))
    assert store.count("t", "b") == 1


ZH = [
    "我喜欢在山里徒步旅行，我的女儿叫小美，她在北京上大学。",
    "听起来很棒！她学什么专业？",
    "她学计算机。以后请用中文回答我。",
    "好的。",
    "你好",
    "嗯嗯",
    "昨天我去了 Costco 买了很多水果，还见到了老同学 Tom。",
    "Nice!",
    "你周末有空吗",
]


def test_chinese_and_mixed_turns_become_typed_atoms(files, store) -> None:
    """The issue's example: two Chinese sentences made no atom (one \\w+ run each, under the four-word minimum)."""
    write_turns(files, ZH)
    asyncio.run(pipeline(files, store).run("t", "u"))
    records = {r.source_message_ids[0]: r for r in RecordLog(files, "t", "u").read()}
    assert sorted(records) == ["m0", "m2", "m6"]  # a greeting (m4), an unpunctuated question (m8) drop
    assert records["m0"].type == "persona"
    assert records["m2"].type == "instruction" and "(answering:" in records["m2"].content
    assert records["m6"].type == "episodic"


def test_heuristic_sentences_split_on_chinese_punctuation() -> None:
    from mnemoflow.memory.l1.heuristic import classify, statement

    assert statement("我现在住在上海浦东。你住在哪里？你喜欢上海吗") == "我现在住在上海浦东。"
    assert statement("你好！") == "" and statement("谢谢你，太好了") == ""
    assert statement("Sure. I moved to Lisbon last May? No, in June.") == "Sure. No, in June."
    assert classify("从现在开始，回答时不要用表情符号")[0] == "instruction"
    assert classify("我对花生过敏")[0] == "persona"
    assert classify("我的猫叫咪咪，今年三岁了")[0] == "persona"
    assert classify("I love hiking, 尤其是在山里")[0] == "persona"
    assert classify("昨天下雨了，我们在家看电影")[0] == "episodic"


def test_atoms_name_their_speaker_when_the_turn_carries_a_name(files, store) -> None:
    L0Writer(files).write(
        [
            TurnEvent(
                tenant="t",
                message_id="q",
                user="u",
                session="s",
                role="assistant",
                name="Mel",
                content="Where did you go last weekend?",
                ts=T0,
            ),
            TurnEvent(
                tenant="t",
                message_id="a",
                user="u",
                session="s",
                role="user",
                name="Caroline",
                content="I went to an LGBTQ support group.",
                ts=T0 + timedelta(minutes=1),
            ),
        ]
    )
    asyncio.run(pipeline(files, store).run("t", "u"))
    (record,) = RecordLog(files, "t", "u").read()
    assert record.content.startswith("Caroline: I went to an LGBTQ support group.")
    assert "(answering Mel: Where did you go" in record.content


def test_atoms_carry_the_resolved_time_of_relative_expressions(files, store) -> None:
    write_turns(
        files,
        [
            "Yesterday I finally finished restoring the old motorbike.",
            "Nice!",
            "下周六我们全家要去杭州看西湖。",
            "好的",
        ],
    )
    asyncio.run(pipeline(files, store).run("t", "u"))
    records = sorted(RecordLog(files, "t", "u").read(), key=lambda r: r.content)
    assert [r.content for r in records] == [
        "Yesterday I finally finished restoring the old motorbike. (event: 2026-01-31)",
        "下周六我们全家要去杭州看西湖。 (event: 2026-02-07)",
    ]
    # the event time is also data: the record's activity span, and the day the index dates the atom by
    assert [(r.activity_start, r.activity_end) for r in records] == [
        (datetime(2026, 1, 31, tzinfo=UTC), datetime(2026, 1, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        (datetime(2026, 2, 7, tzinfo=UTC), datetime(2026, 2, 7, 23, 59, 59, 999999, tzinfo=UTC)),
    ]
    rows = store.get("t", "u", [r.id for r in records])
    assert sorted(r.created for r in rows) == [datetime(2026, 1, 31, tzinfo=UTC), datetime(2026, 2, 7, tzinfo=UTC)]


def test_heuristic_atoms_are_searched_with_the_two_turns_before_them_in_their_session(files, store) -> None:
    """AtomDraft.context: the two previous turns of the session, whoever said them, oldest first, never shown; a
    short answer keeps the question in its text and the turn before the question as context."""
    turns = [
        ("s1", "user", "Ana", "I trained for the Lisbon marathon all spring."),
        ("s2", "user", "Ana", "I finally bought the red road bike I wanted."),
        ("s2", "assistant", "Bo", "Nice, what made you pick that one over the others?"),
        ("s2", "user", "Ana", "It was the lightest frame in the shop, and the only one left in my size."),
        ("s2", "assistant", "Bo", "Did you ride it to work?"),
        ("s2", "user", "Ana", "Yes, twice this week already."),
    ]
    write_named(files, turns)
    asyncio.run(pipeline(files, store).run("t", "u"))
    records = {r.source_message_ids[0]: r for r in RecordLog(files, "t", "u").read()}
    assert records["m0"].context == ""
    assert records["m1"].context == ""  # the turn before is another session's
    assert records["m3"].context == (
        "Ana: I finally bought the red road bike I wanted.\nBo: Nice, what made you pick that one over the others?"
    )
    assert "(answering Bo: Did you ride it to work?)" in records["m5"].content
    assert records["m5"].context == "Ana: It was the lightest frame in the shop, and the only one left in my size."
    assert all("\n" not in r.content and r.content.startswith("Ana: ") for r in records.values())


def test_the_assistants_answer_to_a_request_is_remembered_with_the_request_as_context(files, store) -> None:
    """What the AI told the user ("remind me of the trail you recommended") is an episodic atom with the assistant
    as subject, below the user's own statements; a reply to no request, and a named speaker's turn (another person,
    with a memory of their own), are not."""
    turns = [
        ("user", None, "Can you recommend a hiking trail in the Moncayo park?"),
        ("assistant", None, "The GR-90 trail crosses the park's best views. It takes about six hours. Enjoy!"),
        ("user", None, "I walked the whole GR-90 last Sunday with my brother."),
        ("assistant", None, "That sounds like a wonderful day out with family."),
        ("user", None, "请推荐一家杭州的素食餐厅"),
        ("assistant", None, "灵隐寺旁边的法云安缦素斋很有名，建议提前预订。"),
        ("user", None, "Could you tell me what you did on Saturday?"),
        ("assistant", "Mel", "I painted a sunrise over the lake with my kids."),
        ("user", None, "What 5 bottles should I buy for gin cocktails"),  # a question without its mark
        ("assistant", None, "Buy a London dry gin, sweet vermouth, Campari, Cointreau and absinthe."),
    ]
    write_named(files, [("s", role, name, text) for role, name, text in turns])
    asyncio.run(pipeline(files, store).run("t", "u"))
    records = {r.source_message_ids[0]: r for r in RecordLog(files, "t", "u").read()}
    # m4 and m8: a request without a question mark is also a statement of the user's
    assert set(records) == {"m1", "m2", "m4", "m5", "m8", "m9"}
    trail = records["m1"]
    assert trail.content == "Assistant: The GR-90 trail crosses the park's best views. It takes about six hours. Enjoy!"
    assert (trail.type, trail.priority) == ("episodic", 50)
    assert trail.context.endswith("Can you recommend a hiking trail in the Moncayo park?")
    assert records["m2"].priority > trail.priority
    assert records["m5"].content == "Assistant: 灵隐寺旁边的法云安缦素斋很有名，建议提前预订。"
    assert records["m9"].content.startswith("Assistant: Buy a London dry gin")


def test_a_request_that_says_something_about_the_user_is_an_atom_and_a_statements_questions_its_context(
    files, store
) -> None:
    """LongMemEval's preference questions: the evidence is often a request ("... my living room ... a cat that sheds
    a lot?") that had no statement to keep, or a preference said beside a question that alone says what it is about.
    A bare request, in either language, stays out."""
    write_turns(
        files,
        [
            "What are some simple ways to keep my living room dust-free, especially with a cat that sheds a lot?",
            "Vacuum twice a week.",
            "What else can I do for the later part of the day? I prefer winding down by 9:30 pm.",
            "Reading works well.",
            "Can you recommend a hiking trail in the Moncayo park?",
            "Try the GR-90.",
            "你能告诉我明天的天气怎么样吗？",
            "晴天。",
            "我家的猫掉毛很厉害，怎么办？",
        ],
    )
    asyncio.run(pipeline(files, store).run("t", "u"))
    atoms = RecordLog(files, "t", "u").read()
    records = {r.source_message_ids[0]: r for r in atoms if not r.content.startswith("Assistant:")}
    assert set(records) == {"m0", "m2", "m8"}
    assert records["m0"].content.startswith("What are some simple ways to keep my living room dust-free")
    assert records["m2"].content == "I prefer winding down by 9:30 pm."
    assert records["m2"].context.endswith("What else can I do for the later part of the day?")
    assert records["m8"].content == "我家的猫掉毛很厉害，怎么办？"


@pytest.mark.parametrize(
    ("text", "answers", "kept"),
    [
        ("I like cats.", False, True),  # speaks of its speaker and names something
        ("I'm vegan.", False, True),
        ("我喜欢猫。", False, True),
        ("我家狗叫豆豆", False, True),
        ("下周去成都", False, True),  # Chinese drops the subject; the date makes it a plan
        ("Mostly spicy food.", True, True),  # an answer: its question is folded in
        ("喜欢辣的", True, True),
        ("Mostly spicy food.", False, False),  # the same words, answering nothing, say nothing of the speaker
        ("Yes!", True, False),
        ("好的", True, False),
        ("Sounds good", True, False),
        ("真不错", True, False),  # an idiom, not a noun
        ("Wow, that's so cool to hear", False, False),
        ("Good luck with the interview tomorrow!", False, False),  # a wish is about the other person
        ("太棒了，祝你玩得开心！", False, False),
    ],
)
def test_short_statements_are_kept_when_they_say_something_of_their_speaker(text, answers, kept) -> None:
    from mnemoflow.memory.l1.heuristic import statement

    assert bool(statement(text, answers=answers, said_at=T0)) is kept


def test_a_greeting_sentence_drops_and_the_fact_after_it_stays() -> None:
    from mnemoflow.memory.l1.heuristic import statement

    assert statement("Thanks! I'm allergic to nuts.") == "I'm allergic to nuts."
    assert statement("Wow, I ran my first marathon") == "Wow, I ran my first marathon"
    assert statement("谢谢！我对花生过敏。") == "我对花生过敏。"


def test_a_reply_invalid_after_the_repair_try_falls_back_to_the_heuristic_extractor(files, store) -> None:
    """Issue 28: the window is not lost and the cursor moves on; the fallback is counted, not hidden."""
    write_turns(files, FACTS)
    llm = ScriptedLLM(["not json", '{"scenes": "still wrong"}'])
    p = pipeline(files, store, extractor=LLMExtractor(llm, fallback=HeuristicExtractor()), judge=HeuristicJudge())
    result = asyncio.run(p.run("t", "u"))
    records = RecordLog(files, "t", "u").read()
    assert len(llm.calls) == 2 and result.stored == len(records) > 0
    assert any("Pixel" in r.content for r in records) and all(r.source_message_ids for r in records)
    assert load_cursor(files, "t", "u").done == {T0.date().isoformat(): len(FACTS)}
    totals = llm.usage.stage("l1-extraction")
    assert (totals.calls, totals.failed, totals.retries, totals.fallbacks) == (1, 1, 1, 1)


def _said(*texts: str) -> list[L0Message]:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    return [L0Message(id=f"m{i}", session="s", role="user", content=t, ts=t0) for i, t in enumerate(texts)]


@pytest.mark.parametrize(
    ("content", "texts", "kept"),
    [
        (  # the 0.5B cited every message of the window: only the one saying it stays
            "Caroline went to an LGBTQ support group",
            ["Hey Mel, good to see you!", "I went to a LGBTQ support group yesterday.", "Career options next."],
            ("m1",),
        ),
        ("李娜的女儿考上了北京大学", ["周末我打算去香山徒步。", "我女儿小美考上了北京大学。"], ("m1",)),
        (  # a memory merging two messages keeps both
            "Sam is vegetarian and runs",
            ["I am vegetarian.", "The weather is fine.", "I run every morning; vegetarian food helps."],
            ("m0", "m2"),
        ),
        ("Sam likes it", ["yes", "sure"], ("m0", "m1")),  # no word to tell them apart by: the citation stands
    ],
)
def test_a_models_citations_narrow_to_the_messages_that_say_the_memory(
    content: str, texts: list[str], kept: tuple[str, ...]
) -> None:
    assert narrow_sources(content, _said(*texts)) == kept


def test_a_model_memory_citing_only_the_assistant_is_dropped(files, store) -> None:
    """The 1.5B stored the other speaker's lines as the user's memories; a memory needs a user message behind it."""
    write_turns(files, ["I keep bees in my garden.", "Bees need a lot of care in winter."])  # m0 user, m1 assistant
    out = ExtractionOut(
        scenes=[
            SceneOut(
                scene_name="bees",
                memories=[
                    MemoryOut(content="Sam keeps bees", type="persona", priority=70, source_message_ids=["#1", "#2"]),
                    MemoryOut(
                        content="Bees need care in winter", type="persona", priority=70, source_message_ids=["#2"]
                    ),
                ],
            )
        ]
    )
    p = pipeline(files, store, extractor=LLMExtractor(ScriptedLLM([out])), judge=HeuristicJudge())
    asyncio.run(p.run("t", "u"))
    records = RecordLog(files, "t", "u").read()
    assert [(r.content, r.source_message_ids) for r in records] == [("Sam keeps bees", ["m0"])]
