"""The dashboard's pages without a browser: login, tenant isolation, escaping, filters, drill-downs.
(tests/integration/test_dashboard_browser.py walks the same pages in headless Chromium.)"""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from mnemoflow.events import TurnEvent
from mnemoflow.memory.l0 import L0Writer
from mnemoflow.storage import LocalFileStore
from tests.dashboard_data import KEY, OTHER_KEY, SESSION, T0, USER, XSS, build

ESCAPED = "&lt;script&gt;window.__xss = 1&lt;/script&gt;&lt;img src=x onerror=&#34;window.__xss = 2&#34;&gt;"


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return build(tmp_path_factory.mktemp("dashboard")).app


def logged_in(app, key: str = KEY) -> TestClient:  # type: ignore[no-untyped-def]
    client = TestClient(app)
    assert client.post("/ui/login", data={"key": key}, follow_redirects=False).status_code == 303
    return client


def test_no_key_redirects_to_the_login_which_brings_the_person_back(app) -> None:  # type: ignore[no-untyped-def]
    client = TestClient(app)
    r = client.get(f"/ui/users/{USER}?type=persona", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fusers%2Fana%3Ftype%3Dpersona"
    assert client.post("/ui/login", data={"key": "nope", "next": "/ui"}).status_code == 401
    r = client.post("/ui/login", data={"key": KEY, "next": f"/ui/users/{USER}?type=persona"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/ui/users/{USER}?type=persona"
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    for elsewhere in ("https://evil.example/", "//evil.example", "/v1/whoami", "/ui\\@evil"):
        r = client.post("/ui/login", data={"key": KEY, "next": elsewhere}, follow_redirects=False)
        assert r.headers["location"] == "/ui"
    r = client.post("/ui/logout", follow_redirects=False)
    assert r.headers["location"] == "/ui/login" and 'mnemoflow_key=""' in r.headers["set-cookie"]


def test_the_cookie_opens_no_json_route(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    assert client.get(f"/v1/users/{USER}/atoms").status_code == 401


def test_a_tenant_sees_only_its_own_memory(app) -> None:  # type: ignore[no-untyped-def]
    acme, other = logged_in(app), logged_in(app, OTHER_KEY)
    assert f'href="/ui/users/{USER}"' in acme.get("/ui").text
    home = other.get("/ui").text
    assert 'href="/ui/users/bob"' in home and USER not in re.sub(r"<[^>]+>", "", home).split()
    atom = re.search(r"/ui/users/ana/atoms/([\w-]+)", acme.get(f"/ui/users/{USER}").text)
    assert atom is not None
    for path in (
        f"/ui/users/{USER}",
        f"/ui/users/{USER}/atoms/{atom[1]}",
        f"/ui/sessions/{SESSION}",
        f"/ui/sessions/{SESSION}/nodes/001-N1",
        f"/ui/sessions/{SESSION}/refs/Fix_0",
    ):
        assert acme.get(path).status_code == 200, path
        assert other.get(path).status_code == 404, path


def test_user_data_is_escaped_on_every_page_and_no_inline_script_may_run(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    user = client.get(f"/ui/users/{USER}")
    atom = re.search(
        r'/ui/users/ana/atoms/([\w-]+)">[\w-]+</a></td>\s*<td>\w+</td><td class="scope">shared</td><td>\d+</td>'
        r'<td class="text">My',
        user.text,
    )
    assert atom is not None
    pages = [
        user,
        client.get(f"/ui/users/{USER}/atoms/{atom[1]}"),
        client.get(f"/ui/sessions/{SESSION}"),
        client.get(f"/ui/sessions/{SESSION}/nodes/001-N1"),
        client.get(f"/ui/sessions/{SESSION}/refs/Fix_0"),
    ]
    for page in pages:
        assert page.status_code == 200 and ESCAPED in page.text and XSS not in page.text, page.url
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"


def test_atom_filters_and_drill_down_to_l0(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    rows = re.findall(
        r'class="atom" href="(/ui/users/ana/atoms/[\w-]+)"',
        client.get(f"/ui/users/{USER}", params={"type": "instruction"}).text,
    )
    assert len(rows) == 1
    drilled = client.get(rows[0]).text
    assert "Please always answer in French." in drilled and 'data-id="m3"' in drilled
    none = client.get(f"/ui/users/{USER}", params={"created_after": "2030-01-01", "text": "porto"}).text
    assert "No atoms match." in none
    bad = client.get(f"/ui/users/{USER}", params={"min_priority": "500"}).text
    assert 'class="error"' in bad and "min_priority" in bad


def test_each_atom_shows_its_scope_and_the_list_filters_by_one(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    scopes = re.findall(
        r'<td class="scope">([^<]+)</td><td>\d+</td><td class="text">([^<]*)</td>', client.get(f"/ui/users/{USER}").text
    )
    assert ("agent:coder", "Please always answer in French.") in scopes and {s for s, _ in scopes} == {
        "shared",
        "agent:coder",
    }
    private = client.get(f"/ui/users/{USER}", params={"scope": "agent:coder"}).text
    [atom] = re.findall(r'class="atom" href="(/ui/users/ana/atoms/[\w-]+)"', private)
    page = client.get(atom).text
    assert '<dd class="scope">agent:coder</dd>' in page and "agent coder, team eng" in page
    bad = client.get(f"/ui/users/{USER}", params={"scope": "agents:coder"}).text
    assert 'class="error"' in bad and "scope" in bad


def test_each_atom_names_the_scene_that_holds_it(app) -> None:  # type: ignore[no-untyped-def]
    page = logged_in(app).get(f"/ui/users/{USER}").text
    scenes = set(re.findall(r"<summary><b>([^<]+)\.md</b>", page))
    cells = re.findall(r'<td class="text">[^<]*</td><td>([^<]*)</td>', page)
    assert scenes and cells
    assert {cell for cell in cells if cell} <= scenes and any(cells), cells


def test_health_page_and_static_assets(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    page = client.get("/ui/health").text
    assert 'id="health-status">degraded' in page and "no broker in this test" in page and "5 rows" in page
    assert client.get("/ui/static/ui.js").status_code == 200


def test_ranked_search_orders_atoms_like_recall(app) -> None:  # type: ignore[no-untyped-def]
    client = logged_in(app)
    query = {"text": "french language"}
    assert "No atoms match." in client.get(f"/ui/users/{USER}", params=query).text  # not every word occurs
    ranked = client.get(f"/ui/users/{USER}", params={**query, "ranked": "true"}).text
    texts = re.findall(r'<td class="text">([^<]*)</td>', ranked)
    assert texts[0] == "Please always answer in French." and "<th>score</th>" in ranked


def test_users_are_shown_by_the_name_their_own_turns_carry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    app = build(tmp_path).app
    wang, odd = "zh-1--f749b19b1a", "odd-1"
    said = [(wang, "user", "王芳"), (wang, "assistant", "李雷"), (odd, "user", XSS[:100])]  # 李雷 is the other speaker
    L0Writer(LocalFileStore(tmp_path)).write(
        TurnEvent(tenant="acme", message_id=f"n{i}", user=u, session="s", role=r, content="你好", ts=T0, name=n)  # type: ignore[arg-type]
        for i, (u, r, n) in enumerate(said)
    )
    client = logged_in(app)
    home = client.get("/ui").text
    assert f'<span class="who">王芳</span>\n  <span class="id">{wang}</span>' in home
    assert f'<span class="id">{USER}</span></a>' in home and "李雷" not in home  # ana's turns carry no name
    assert XSS[:20] not in home and ESCAPED[:30] in home  # a name is user data: escaped
    page = client.get(f"/ui/users/{wang}").text
    assert "<title>王芳 · mnemoflow</title>" in page and 'id="user-name">王芳</span>' in page
    assert f'id="user-id">{wang}</span>' in page
