"""Scene names, summaries and the templated persona come from salient terms, never from filler, and are dated by
the events they remember, not by the day a pass ran."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemoflow.embedding import HashingEmbedder
from mnemoflow.memory.persona.generate import PersonaContext
from mnemoflow.memory.persona.heuristic import HeuristicPersonaEngine
from mnemoflow.memory.salience import STOPWORDS, STOPWORDS_ZH, content_words, salient_terms, terms
from mnemoflow.memory.scenes.heuristic import HeuristicSceneEngine
from mnemoflow.memory.scenes.model import SAFE_SCENE_NAME, SceneBlock, SceneInput
from mnemoflow.memory.scenes.passes import run_scene_passes
from mnemoflow.memory.scenes.plan import ScenePolicy
from mnemoflow.memory.scenes.store import SceneStore
from mnemoflow.storage import LocalFileStore

SAID = datetime(2023, 5, 8, 14, 0, tzinfo=UTC)
PROCESSED = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
FILLER = sorted(
    {
        "thanks",
        "wow",
        "hear",
        "yeah",
        "definitely",
        "every",
        "always",
        "really",
        "awesome",
        "hard",
        "means",
        "yea",
        "great",
        "answer",
        "please",
        "sounds",
        "glad",
    }
)
ENGLISH = [
    "I live in Porto with my cat Miso",
    "I am a chemist and I drink oat milk every morning",
    "Please always answer in French",
    "I go hiking in the mountains every weekend",
]
CHINESE = [
    "我住在杭州，养了一只猫叫小美",
    "我是一名化学家，每天早上喝燕麦奶",
    "请总是用法语回答",
    "我每个周末都去山里徒步",
]
MIXED = ["我在Google做机器学习研究", "周末和Anna一起去Lisbon冲浪", "I love surfing in Lisbon with Anna"]


def atoms(texts: list[str], said: datetime = SAID) -> list[SceneInput]:
    """Atoms stored on the processing day (a replay) but said on ``said``."""
    return [
        SceneInput(
            id=f"a{i}",
            type="episodic",
            content=t,
            created_at=PROCESSED + timedelta(seconds=i),
            said_at=said + timedelta(days=i),
        )
        for i, t in enumerate(texts)
    ]


def scenes_and_persona(tmp_path: Path, inputs: list[SceneInput]) -> tuple[list[SceneBlock], str]:
    store = SceneStore(LocalFileStore(tmp_path), "acme", "alice")
    engine = HeuristicSceneEngine(HashingEmbedder(dim=256))
    report = asyncio.run(
        run_scene_passes(store, engine, inputs, now=lambda: PROCESSED, policy=ScenePolicy(max_creates=3))
    )
    assert report.error is None
    scenes = sorted(store.load().values(), key=lambda b: (-b.heat, b.filename))
    ctx = PersonaContext(
        scenes=scenes,
        changed=scenes,
        current="",
        mode="first",
        reason="test",
        total_memories=len(inputs),
        now=PROCESSED,
    )
    return scenes, HeuristicPersonaEngine().render(ctx)


def name_words(scene: SceneBlock) -> list[str]:
    return scene.filename.removesuffix(".md").split("-")


def archetype(persona: str) -> str:
    """The archetype line's terms (``> Archetype: a · b`` or ``> 画像：a · b``)."""
    line = persona.splitlines()[1]
    return line.replace("：", ":").split(":", 1)[1].strip()


def test_filler_never_names_a_scene_or_the_archetype(tmp_path: Path) -> None:
    """The issue's example: these atoms were named ``every-always-answer``."""
    scenes, persona = scenes_and_persona(tmp_path, atoms(ENGLISH))
    names = [w for s in scenes for w in name_words(s)]
    assert names and not set(names) & set(FILLER)
    assert set(names) & {"porto", "miso", "french", "oat", "milk", "chemist", "hiking", "mountains"}
    arch = archetype(persona).lower()
    assert not set(arch.replace("·", " ").replace(",", " ").split()) & set(FILLER)
    assert any(w in arch for w in ("porto", "miso", "french", "oat milk"))


@pytest.mark.parametrize(
    ("texts", "expected"),
    [
        (ENGLISH, {"Porto", "Miso", "French", "oat milk", "chemist"}),
        (CHINESE, {"杭州", "小美", "化学家", "燕麦", "法语", "山里", "徒步"}),
        (MIXED, {"Google", "Anna", "Lisbon", "冲浪", "机器", "学习"}),
    ],
)
def test_salient_terms_name_people_places_and_things(texts: list[str], expected: set[str]) -> None:
    got = salient_terms(texts, texts)
    assert len(got) == 3 and set(got) <= expected | {t.text for text in texts for t in terms(text)}
    assert set(got) & expected
    assert not {w.lower() for g in got for w in g.split()} & (STOPWORDS | STOPWORDS_ZH)


@pytest.mark.parametrize("texts", [CHINESE, MIXED])
def test_chinese_and_mixed_users_get_meaningful_valid_names(tmp_path: Path, texts: list[str]) -> None:
    scenes, persona = scenes_and_persona(tmp_path, atoms(texts))
    for scene in scenes:
        assert SAFE_SCENE_NAME.fullmatch(scene.filename), scene.filename
        parts = name_words(scene)
        assert parts != ["scene"] and not set(parts) & STOPWORDS_ZH
        assert any(p in "".join(texts).lower() for p in parts)
    assert archetype(persona) not in ("nothing known yet", "暂无已知信息")


def test_the_users_own_name_names_no_scene() -> None:
    texts = [
        f"Caroline {t}"
        for t in (
            "went to a pottery class",
            "adopted a dog named Rex",
            "visited Lisbon",
            "joined a choir",
            "paints landscapes",
        )
    ]
    assert "Caroline" not in salient_terms(texts[:2], texts) and "caroline" not in salient_terms(texts[:2], texts)


def test_scenes_and_arcs_carry_event_dates_not_the_processing_day(tmp_path: Path) -> None:
    inputs = atoms(ENGLISH)
    inputs.append(
        SceneInput(
            id="ev",
            type="episodic",
            content="I ran the Porto half marathon (event: 2023-05-07)",
            created_at=PROCESSED + timedelta(minutes=5),
            said_at=SAID,
        )
    )
    scenes, persona = scenes_and_persona(tmp_path, inputs)
    bodies = "\n".join(s.body + s.summary for s in scenes)
    assert PROCESSED.date().isoformat() not in bodies + persona
    assert "[2023-05-07]" in bodies and SAID.date().isoformat() in bodies
    arcs = persona.split("## 4. Current arcs", 1)[1]
    assert "[2023-05" in arcs and PROCESSED.date().isoformat() not in arcs


@pytest.mark.parametrize(
    ("content", "said", "day"),
    [
        ("I ran a race (event: 2023-05-07)", SAID, "2023-05-07"),
        ("I ran a race", SAID, "2023-05-08"),
        ("I ran a race", None, PROCESSED.date().isoformat()),
        ("I ran a race (event: week of 2023-05-01)", SAID, "2023-05-08"),  # not a day: the day it was said
    ],
)
def test_event_day(content: str, said: datetime | None, day: str) -> None:
    assert SceneInput(id="a", type="episodic", content=content, created_at=PROCESSED, said_at=said).event_day == day


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.lists(st.sampled_from(FILLER + ["I", "you", "the", "it", "so", "!", ","]), min_size=1, max_size=12).map(
            " ".join
        ),
        min_size=1,
        max_size=5,
    ),
    st.lists(st.sampled_from(["Porto", "pottery class", "Lisbon", "sourdough", "杭州", "徒步"]), max_size=3),
)
def test_filler_is_never_salient(fillers: list[str], topics: list[str]) -> None:
    texts = [f"{f} {' '.join(topics)}" for f in fillers]
    got = salient_terms(texts, texts)
    assert not {w.lower() for g in got for w in g.split()} & set(FILLER)
    assert all(w not in FILLER for t in texts for w in content_words(t))
