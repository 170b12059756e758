"""Skills: distilled from a task the offload pipeline drew, stored with history, folded without duplicates, indexed
within budget; English, Chinese and mixed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from mnemoflow.errors import NotFound
from mnemoflow.governance.erase import Eraser
from mnemoflow.index import InMemoryVectorStore
from mnemoflow.offload.entries import read_ref
from mnemoflow.prompts.skills import Rewritten, SkillReply
from mnemoflow.skills.distil import TaskTrace, code_area, distil, project_root
from mnemoflow.skills.forget import forget_session
from mnemoflow.skills.index import rank_skills, skills_index
from mnemoflow.skills.learn import learn_session, learn_session_with_model
from mnemoflow.skills.merge import fold, lexical_similarity
from mnemoflow.skills.model import NodeRef, Pitfall, Skill, SkillStep, parse_skill, render_skill, within_budget
from mnemoflow.skills.store import SkillStore
from mnemoflow.skills.tasks import task_traces
from mnemoflow.skills.writer import written_by_model
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ScriptedLLM
from mnemoflow.tokens import count_tokens
from tests.skill_tasks import EN, NOW, ROOT, ZH, replay, replayed, trajectory


def only_trace(files: LocalFileStore, session: str) -> TaskTrace:
    traces = task_traces(files, "t", session)
    assert len(traces) == 1
    return traces[0]


@pytest.mark.parametrize("request_text", [EN, ZH], ids=["english", "chinese"])
def test_a_verified_task_becomes_a_skill_that_drills_down(tmp_path: Path, request_text: str) -> None:
    files = replayed(tmp_path, "s1", request_text)
    trace = only_trace(files, "s1")
    found = distil(trace, NOW)
    assert found.succeeded, found.reason
    skill = found.skill
    assert skill is not None
    assert skill.area == "dateparse"
    assert skill.sources == ("s1#001",)
    text = render_skill(skill)
    assert "dateparse/core.py (str_replace)" in text  # the changed file, relative to the project root
    assert "python -m pytest tests/test_core.py" in text  # the passing check
    assert "pip install" in text and ROOT not in text
    pitfall = next(p for p in skill.pitfalls if "ValueError" in p.text)
    assert "python reproduce.py" in pitfall.text
    # Drill-down: every step and pitfall names a node of the canvas whose calls' refs hold the raw outputs.
    outputs = {m["tool_call_id"]: m["content"] for m in trajectory(request_text) if m["role"] == "tool"}
    for ref in [s.source for s in skill.steps] + [p.source for p in skill.pitfalls]:
        node = trace.canvas.node(ref.node_id)
        assert node is not None and node.tool_call_ids
        assert all(read_ref(files, "t", "s1", c) == outputs[c].encode() for c in node.tool_call_ids)
    if request_text == ZH:
        assert "## 步骤" in text and "## 适用场景" in text and "## 坑与教训" in text
        assert skill.name.startswith("dateparse")
    else:
        assert "## Steps" in text and skill.name.startswith("dateparse")
    assert parse_skill(text) == skill


def test_an_unverified_task_is_not_a_skill_but_keeps_its_pitfalls(tmp_path: Path) -> None:
    files = replayed(tmp_path, "s1", EN, fixed=False)
    found = distil(only_trace(files, "s1"), NOW)
    assert not found.succeeded and "last check failed" in found.reason
    assert found.skill is not None and any("ValueError" in p.text for p in found.skill.pitfalls)


def test_learning_twice_adds_nothing_and_a_similar_task_merges(tmp_path: Path) -> None:
    files = replayed(tmp_path, "s1", EN)
    asyncio.run(replay(files, "s2", trajectory(EN.replace("+05:30", "-08:00"))))
    asyncio.run(replay(files, "s3", trajectory(EN, fixed=False)))
    first = learn_session(files, "t", "s1", NOW)
    assert [x.action for x in first] == ["store"]
    assert [x.action for x in learn_session(files, "t", "s1", NOW)] == ["skip"]
    merged = learn_session(files, "t", "s2", NOW + timedelta(days=1))
    assert [x.action for x in merged] == ["merge"]
    store = SkillStore(files, "t")
    (skill,) = store.all()
    assert skill.version == 2 and skill.sources == ("s1#001", "s2#001")
    assert store.history(skill.name) == [1]
    # A failed similar task may only add pitfalls it has that the skill lacks (here none): never a new skill.
    assert [x.action for x in learn_session(files, "t", "s3", NOW)] in (["merge"], ["skip"])
    assert len(store.names()) == 1
    # Agent-private skills are their own set.
    assert [x.action for x in learn_session(files, "t", "s1", NOW, agent="coder")] == ["store"]
    assert SkillStore(files, "t", "coder").names() == store.names()


def _skill(name: str, when: str, area: str = "", session: str = "s") -> Skill:
    ref = NodeRef(session=session, node_id="001-N1")
    return Skill(
        name=name,
        when_to_use=when,
        area=area,
        steps=(SkillStep(text="Edit: a.py (str_replace)", source=ref),),
        pitfalls=(Pitfall(text="pytest → exit 1: ImportError", source=ref),),
        sources=(f"{session}#001",),
        created=NOW,
        updated=NOW,
    )


def test_fold_stores_merges_and_never_duplicates() -> None:
    a = _skill(
        "django-admin-inlines", "add a ModelAdmin hook for inlines (django/contrib/admin)", "django/contrib/admin"
    )
    same_kind = _skill("django-admin-inlines", "add a ModelAdmin hook for inline forms", "django/contrib/admin", "s2")
    other = _skill("sympy-simplify", "simplify trig expressions (sympy/simplify)", "sympy/simplify", "s3")
    assert fold([a], a, NOW).action == "skip"
    assert fold([a], same_kind, NOW).action == "merge"
    stored = fold([a], other, NOW)
    assert stored.action == "store" and stored.write is not None
    clash = fold([a], _skill("django-admin-inlines", "sort the changelist by date", "django/contrib/admin", "s4"), NOW)
    assert clash.action == "store" and clash.write is not None and clash.write.name == "django-admin-inlines-2"
    assert fold([a], other, NOW, succeeded=False).action == "skip"
    assert lexical_similarity(a, a) == 1.0


def test_store_keeps_history_and_deletes(tmp_path: Path) -> None:
    store = SkillStore(LocalFileStore(tmp_path), "t")
    skill = _skill("x-skill", "when x")
    store.put(skill)
    store.put(skill.model_copy(update={"version": 2, "when_to_use": "when x, better"}))
    assert store.get("x-skill").when_to_use == "when x, better"
    assert store.history("x-skill") == [1]
    assert store.delete("x-skill") == 2
    with pytest.raises(NotFound):
        store.get("x-skill")
    with pytest.raises(NotFound):
        store.get("../../etc/passwd")


def test_index_fits_its_budget_and_is_stable() -> None:
    skills = [
        _skill(
            f"proj{i % 7}-fix-{w}-handling",
            f"Fix the {w} handling bug in module {i} of the project",
            f"proj{i % 7}/mod",
        )
        for i, w in enumerate(["timezone", "unicode", "overflow", "sorting", "caching"] * 10)
    ]
    index = skills_index(skills)
    assert count_tokens(index) <= 300
    assert index == skills_index(list(reversed(skills)))  # the order of the input does not matter: byte-stable
    small = skills_index(skills[:3])
    assert "Fix the timezone handling" in small  # few skills: names with when-to-use
    assert skills_index([]) == ""


def test_rank_finds_the_skill_of_the_request() -> None:
    skills = [
        _skill(
            "django-admin-inlines", "add a ModelAdmin get_inlines hook (django/contrib/admin)", "django/contrib/admin"
        ),
        _skill("sympy-trig", "simplify trigonometric expressions (sympy/simplify)", "sympy/simplify"),
        _skill("dateparse-时区", "修复日期解析的时区问题 (dateparse)", "dateparse"),
    ]
    assert rank_skills("ModelAdmin inlines depend on the request", skills, 1)[0].name == "django-admin-inlines"
    assert rank_skills("日期解析 时区 崩溃", skills, 1)[0].name == "dateparse-时区"


def test_a_skill_file_stays_within_its_token_budget() -> None:
    long_line = "Edit: " + " ".join(f"pkg/module_{i}/file_{i}.py" for i in range(12))
    ref = NodeRef(session="s", node_id="001-N1")
    big = _skill("big", "when x").model_copy(
        update={
            "steps": tuple(SkillStep(text=long_line, source=ref) for _ in range(8)),
            "pitfalls": tuple(Pitfall(text=long_line, source=ref) for _ in range(6)),
        }
    )
    assert count_tokens(render_skill(big)) > 800
    fitted = within_budget(big)
    assert count_tokens(render_skill(fitted)) <= 800 and fitted.steps[0] == big.steps[0]


def test_project_root_and_area() -> None:
    checkout = "/workspace/django__django__3.0"
    code = f"{checkout}/django/contrib/admin/options.py"
    assert project_root([code, "/workspace/test_inlines.py"], [code]) == checkout  # loose scratch beside it
    assert project_root([code, f"{checkout}/tests/admin/t.py"], [code]) == checkout  # a checkout's own folders
    assert project_root([code], [code], [f"{checkout}/"]) == checkout  # where the agent cd-ed
    assert project_root(["/r/reproduce.py", "/r/pkg/a.py"], ["/r/pkg/a.py"]) == "/r"  # a package is not a checkout
    assert code_area(["django/contrib/admin/options.py", "django/contrib/admin/checks.py"]) == "django/contrib/admin"
    assert code_area([]) == ""


def test_the_model_rewrites_the_draft_by_number_and_code_keeps_every_reference(tmp_path: Path) -> None:
    files = replayed(tmp_path, "s1", EN)
    draft = distil(only_trace(files, "s1"), NOW).skill
    assert draft is not None and 4 <= len(draft.steps) < 7 and draft.pitfalls
    reply = SkillReply(
        name="Fix timezone parsing!",
        when_to_use="A date parser crashes on inputs with a UTC offset",
        steps=[
            Rewritten(n=3, text="Patch dateparse/core.py to accept +HH:MM offsets"),
            Rewritten(n=7, text="An invented step"),  # no such draft step: dropped
            Rewritten(n=4, text="Run python -m pytest tests/test_core.py until it passes"),
        ],
        pitfalls=[Rewritten(n=1, text="reproduce.py fails with ValueError on '+05:30' until the parser is fixed")],
    )
    skill = asyncio.run(written_by_model(draft, ScriptedLLM([reply])))
    assert skill.engine == "llm" and skill.name == "fix-timezone-parsing"
    assert skill.when_to_use == "A date parser crashes on inputs with a UTC offset (dateparse)"
    assert [s.source for s in skill.steps] == [draft.steps[2].source, draft.steps[3].source]
    assert skill.pitfalls[0].source == draft.pitfalls[0].source and skill.sources == draft.sources
    # No valid reply (twice invalid JSON), or a reply keeping no step of the draft: the draft stands.
    assert asyncio.run(written_by_model(draft, ScriptedLLM(["not json", "still not json"]))) == draft
    # Generic advice in place of the task's failure, an invented command: the draft's text stays.
    invented = reply.model_copy(
        update={
            "steps": [Rewritten(n=4, text="Run the whole test suite with tox to be safe")],
            "pitfalls": [Rewritten(n=1, text="Make sure the fix is tested thoroughly")],
        }
    )
    kept = asyncio.run(written_by_model(draft, ScriptedLLM([invented])))
    assert kept.steps[0].text == draft.steps[3].text and kept.pitfalls[0].text == draft.pitfalls[0].text
    vague = asyncio.run(written_by_model(draft, ScriptedLLM([reply.model_copy(update={"when_to_use": "general"})])))
    assert vague.when_to_use == draft.when_to_use  # "general" describes nothing: the task's goal stays
    none_kept = reply.model_copy(update={"steps": [Rewritten(n=8, text="x")]})
    assert asyncio.run(written_by_model(draft, ScriptedLLM([none_kept]))) == draft


def test_with_a_model_the_pass_rewrites_new_tasks_only(tmp_path: Path) -> None:
    files = replayed(tmp_path, "s1", EN)
    reply = SkillReply(
        name="utc-offsets", when_to_use="Parsing dates with offsets", steps=[Rewritten(n=1, text="Look")]
    )
    llm = ScriptedLLM([reply])
    (first,) = asyncio.run(learn_session_with_model(files, "t", "s1", NOW, llm))
    assert (first.action, first.skill) == ("store", "utc-offsets")
    (again,) = asyncio.run(learn_session_with_model(files, "t", "s1", NOW, llm))
    assert again.action == "skip" and len(llm.calls) == 1  # a task already distilled is not sent to the model


def test_erasing_a_session_takes_what_skills_learnt_from_it(tmp_path: Path) -> None:
    files = replayed(tmp_path, "s1", EN)
    asyncio.run(replay(files, "s2", trajectory(EN.replace("+05:30", "-08:00"))))
    asyncio.run(replay(files, "s3", trajectory("Fix the unicode crash in slugify.make_slug for emoji titles, please.")))
    for session in ("s1", "s2", "s3"):
        learn_session(files, "t", session, NOW)
    store = SkillStore(files, "t")
    merged = next(s for s in store.all() if len(s.sources) == 2)
    assert store.history(merged.name) == [1]
    eraser = Eraser(files, InMemoryVectorStore(dim=8, embedding_model="x"))
    eraser.erase_session("t", "s1", NOW, "op-1")
    # Every step was s1's (s2 brought the same ones): nothing of the skill is left, so it goes with its history...
    assert merged.name not in store.names() and store.history(merged.name) == []
    assert len(store.names()) == 1  # ...and the skill from s3 is untouched
    # s2's task is in no skill any more: the next pass distils it again, from s2 alone.
    (again,) = learn_session(files, "t", "s2", NOW)
    assert again.action == "store" and store.get(again.skill or "").sources == ("s2#001",)
    # A skill that keeps steps of another session loses only the erased one's.
    mixed = store.get(again.skill or "")
    step = mixed.steps[0].model_copy(update={"source": NodeRef(session="s3", node_id="001-N1")})
    store.put(mixed.model_copy(update={"steps": (*mixed.steps, step), "sources": ("s2#001", "s3#001")}))
    eraser.erase_session("t", "s2", NOW, "op-2")
    left = store.get(mixed.name)
    assert left.sources == ("s3#001",) and [s.source.session for s in left.steps] == ["s3"]
    assert store.history(mixed.name) == []  # no version holds s2's text
    assert forget_session(files, "t", "s2", NOW) == 0  # a second run finds nothing of the session
