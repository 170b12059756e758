"""The dashboard's skill pages: the tenant's shared and agents' skills, a skill with its drill-down links and
history, edit (a broken file comes back with the reason) and delete, and another tenant's skill out of reach."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mnemoflow.skills.model import NodeRef, Pitfall, Skill, SkillStep, render_skill
from mnemoflow.skills.store import SkillStore
from mnemoflow.storage import LocalFileStore
from tests.dashboard_data import OTHER_KEY, SESSION, T0, XSS, build
from tests.unit.test_ui import ESCAPED, logged_in

NAME = "fix-parser-quotes"


def _skill(name: str, when: str) -> Skill:
    node = NodeRef(session=SESSION, node_id="001-N1")
    return Skill(
        name=name,
        when_to_use=when,
        area="parser",
        steps=(SkillStep(text="view a.py", source=node), SkillStep(text="edit a.py", source=node)),
        pitfalls=(Pitfall(text="bash: FAILED 3 tests", source=node),),
        sources=(f"{SESSION}#001",),
        created=T0,
        updated=T0,
    )


@pytest.fixture
def app(tmp_path: Path):  # type: ignore[no-untyped-def]
    dashboard = build(tmp_path)
    files = LocalFileStore(tmp_path)
    SkillStore(files, "acme").put(_skill(NAME, f"a request like: fix the tokenizer {XSS}"))
    SkillStore(files, "acme", "coder").put(_skill("cache-http-client", "add a cache to the HTTP client"))
    return dashboard.app


def test_the_list_shows_shared_and_each_agents_skills(app) -> None:  # type: ignore[no-untyped-def]
    page = logged_in(app).get("/ui/skills")
    assert page.status_code == 200 and 'href="/ui/skills"' in page.text
    sections = dict(re.findall(r'data-scope="([^"]+)">(.*?)</section>', page.text, re.S))
    assert set(sections) == {"shared", "agent:coder"}
    assert f'href="/ui/skills/{NAME}?scope=shared"' in sections["shared"]
    assert 'href="/ui/skills/cache-http-client?scope=agent%3Acoder"' in sections["agent:coder"]
    row = re.sub(r"\s+", "", sections["shared"].split(NAME, 2)[2])
    assert "<td>parser</td><td>1</td><td>0</td><td>2</td><td>1</td>" in row  # area, version, uses, steps, pitfalls
    assert ESCAPED in page.text and XSS not in page.text
    assert "No skills yet." in logged_in(app, OTHER_KEY).get("/ui/skills").text


def test_a_skill_page_drills_down_to_its_canvas_nodes(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    page = client.get(f"/ui/skills/{NAME}")
    assert page.status_code == 200 and ESCAPED in page.text and XSS not in page.text
    links = re.findall(r'<a class="ref" href="([^"]+)">\[from ([^\]]+)\]</a>', page.text)
    assert links == [(f"/ui/sessions/{SESSION}/nodes/001-N1", f"{SESSION}#001-N1")] * 3  # two steps, one pitfall
    assert client.get(links[0][0]).status_code == 200
    assert 'id="history">no earlier version' in page.text
    private = client.get("/ui/skills/cache-http-client", params={"scope": "agent:coder"})
    assert private.status_code == 200 and "agent:coder · version 1" in private.text
    assert client.get("/ui/skills/cache-http-client").status_code == 404  # not a shared skill
    assert client.get(f"/ui/skills/{NAME}", params={"scope": "team:eng"}).status_code == 404


def test_edit_raises_the_version_and_keeps_the_old_one(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    text = render_skill(_skill(NAME, "fix the tokenizer")).replace("\n", "\r\n")  # as a browser posts a textarea
    edited = text.replace("## Pitfalls", "## Pitfalls\r\n- quote the glob [from run-1#002-N1]")
    r = client.post(f"/ui/skills/{NAME}/edit?scope=shared", data={"text": edited}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/ui/skills/{NAME}?scope=shared"
    page = client.get(r.headers["location"]).text
    assert "shared · version 2" in page and 'id="history">v1</dd>' in page and "quote the glob" in page
    assert f'href="/ui/sessions/{SESSION}/nodes/002-N1"' in page


def test_a_broken_edit_comes_back_with_the_reason(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    bad = client.post(f"/ui/skills/{NAME}/edit", data={"text": "just prose <b>"})
    assert bad.status_code == 422 and 'id="edit-error">not a skill file: no META header' in bad.text
    assert "just prose &lt;b&gt;</textarea>" in bad.text  # what was posted, to fix it
    other = render_skill(_skill("another-name", "x"))
    renamed = client.post(f"/ui/skills/{NAME}/edit", data={"text": other})
    assert renamed.status_code == 422 and "names skill &#39;another-name&#39;" in renamed.text
    assert "shared · version 1" in client.get(f"/ui/skills/{NAME}").text


def test_delete_goes_back_to_the_list(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    r = client.post(f"/ui/skills/{NAME}/delete", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/skills"
    assert client.get(f"/ui/skills/{NAME}").status_code == 404
    assert client.post(f"/ui/skills/{NAME}/delete").status_code == 404


def test_another_tenants_skill_is_not_found(app) -> None:  # type: ignore[no-untyped-def]
    other = logged_in(app, OTHER_KEY)
    text = render_skill(_skill(NAME, "x"))
    assert other.get(f"/ui/skills/{NAME}").status_code == 404
    assert other.get("/ui/skills/cache-http-client", params={"scope": "agent:coder"}).status_code == 404
    assert other.post(f"/ui/skills/{NAME}/edit", data={"text": text}).status_code == 404
    assert other.post(f"/ui/skills/{NAME}/delete").status_code == 404
    assert "shared · version 1" in logged_in(app).get(f"/ui/skills/{NAME}").text  # untouched
