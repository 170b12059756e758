"""The dashboard in a real browser: Debian's headless Chromium driven by Selenium through the system chromedriver.

A person's path: log in with a key, open a user, search the atoms, drill down to the L0 messages, open a session,
see each canvas drawn by Mermaid as an SVG with the canvas's nodes, follow a node to its raw output. The data holds
``<script>`` and an ``onerror`` image in a turn and in a tool output: no page may run them. Screenshots of every
step land in ``tests/artifacts/ui/`` (CI keeps that folder). Waits are on conditions, generous for a loaded
2-core machine.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mnemoflow.offload.canvas import from_mermaid
from mnemoflow.offload.canvas_update import canvas_names, canvas_path
from mnemoflow.offload.entries import read_ref
from mnemoflow.storage import LocalFileStore
from serving.ui.templating import MERMAID_JS
from tests.dashboard_data import KEY, RAW, SESSION, USER, XSS, build
from tests.services import REPO_ROOT, asgi_server

pytestmark = pytest.mark.integration

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SHOTS = REPO_ROOT / "tests" / "artifacts" / "ui"
WAIT = 90  # seconds; every wait ends as soon as its condition holds

if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "Debian's chromium and chromium-driver are not installed (tools/install.sh installs them)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebDriver]:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never fetch a driver or a browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # type: ignore[assignment]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,2000",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: WebDriver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def wait_for(driver: WebDriver, by: str, what: str):  # type: ignore[no-untyped-def]
    return WebDriverWait(driver, WAIT).until(ec.presence_of_element_located((by, what)))


def no_script_ran(driver: WebDriver) -> None:
    assert driver.execute_script("return window.__xss === undefined"), "user data ran as script"


@pytest.mark.skipif(not MERMAID_JS.exists(), reason="Mermaid's bundle is not installed (make install)")
def test_a_person_browses_memory_and_canvases(browser: WebDriver, tmp_path: Path) -> None:
    data = build(tmp_path)
    files = LocalFileStore(tmp_path)
    expected = {
        name: {n.id for n in from_mermaid((files.read_bytes(canvas_path("acme", SESSION, name)) or b"").decode()).nodes}
        for name in canvas_names(files, "acme", SESSION)
    }
    assert len(expected) == data.canvases and all(expected.values())
    with asgi_server(data.app) as url:
        b = browser
        b.get(f"{url}/ui/users/{USER}")  # no key yet: the login page, which brings us back here
        wait_for(b, By.ID, "key").send_keys(KEY)
        shot(b, "01-login")
        b.find_element(By.ID, "login").click()
        WebDriverWait(b, WAIT).until(ec.url_to_be(f"{url}/ui/users/{USER}"))
        b.find_element(By.LINK_TEXT, "users & sessions").click()
        wait_for(b, By.ID, "users")
        assert b.find_element(By.ID, "tenant").text == "acme"
        assert [a.text for a in b.find_elements(By.CSS_SELECTOR, "#users a")] == [USER]  # not tenant other's bob
        shot(b, "02-home")

        b.find_element(By.LINK_TEXT, USER).click()
        wait_for(b, By.ID, "persona")
        assert "oat milk" in b.find_element(By.ID, "persona").text and b.find_elements(By.CSS_SELECTOR, ".scene")
        shot(b, "03-user")
        b.find_element(By.ID, "atom-text").send_keys("french language")
        b.find_element(By.ID, "atom-ranked").click()
        b.find_element(By.ID, "atom-search").click()
        WebDriverWait(b, WAIT).until(lambda d: "ranked=true" in d.current_url)
        first = b.find_element(By.CSS_SELECTOR, "#atom-list tbody tr")
        assert "Please always answer in French." in first.text  # ranked by hybrid search, as recall ranks
        shot(b, "04-atom-search-ranked")
        b.find_element(By.ID, "atom-ranked").click()
        b.find_element(By.ID, "atom-text").clear()
        b.find_element(By.ID, "atom-text").send_keys("lisbon moved")
        b.find_element(By.ID, "atom-search").click()
        WebDriverWait(b, WAIT).until(lambda d: "text=lisbon" in d.current_url and "ranked" not in d.current_url)
        rows = b.find_elements(By.CSS_SELECTOR, "#atom-list tbody tr")
        assert len(rows) == 1 and XSS in rows[0].text  # shown as text, never run
        no_script_ran(b)
        shot(b, "04-atom-search")

        rows[0].find_element(By.CSS_SELECTOR, "a.atom").click()
        message = wait_for(b, By.CSS_SELECTOR, "#l0 li.message")
        assert message.get_attribute("data-id") == "m2" and XSS in message.text
        no_script_ran(b)
        shot(b, "05-atom-l0")

        message.find_element(By.LINK_TEXT, SESSION).click()
        WebDriverWait(b, WAIT).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-canvases"))
        assert b.find_element(By.TAG_NAME, "body").get_attribute("data-canvases") == "rendered"
        articles = b.find_elements(By.CSS_SELECTOR, "article.canvas")
        assert [a.get_attribute("data-canvas") for a in articles] == list(expected)
        for article in articles:
            svg = article.find_element(By.CSS_SELECTOR, ".drawing svg")
            drawn = {g.get_attribute("data-node") for g in svg.find_elements(By.CSS_SELECTOR, "g.node")}
            assert drawn == expected[article.get_attribute("data-canvas") or ""]
        no_script_ran(b)
        shot(b, "06-session")
        for i, article in enumerate(articles, 1):
            article.screenshot(str(SHOTS / f"06-canvas-{i}.png"))

        first = sorted(expected)[0]
        node_id = sorted(expected[first])[0]
        b.find_element(By.CSS_SELECTOR, f'article.canvas svg g.node[data-node="{node_id}"]').click()
        entry = wait_for(b, By.CSS_SELECTOR, "article.entry")
        tool_call = entry.get_attribute("data-tool-call") or ""
        assert b.current_url.endswith(f"/nodes/{node_id}") and XSS in entry.text
        no_script_ran(b)
        shot(b, "07-node")

        entry.find_element(By.CSS_SELECTOR, "a.raw").click()
        raw = wait_for(b, By.ID, "raw")
        stored = (read_ref(files, "acme", SESSION, tool_call) or b"").decode()
        assert stored.endswith(RAW) and raw.get_attribute("textContent") == stored
        no_script_ran(b)
        shot(b, "08-raw-output")

        b.find_element(By.LINK_TEXT, "health").click()
        wait_for(b, By.ID, "figures")
        shot(b, "09-health")
        logged = b.get_log("browser")  # a CSP violation or a script error would be here
        assert [e["message"] for e in logged if e["level"] == "SEVERE" and "favicon" not in e["message"]] == []

        b.find_element(By.CSS_SELECTOR, ".logout button").click()
        wait_for(b, By.ID, "key")
        b.get(f"{url}/ui/users/{USER}")
        wait_for(b, By.ID, "key")  # the cookie is gone: back to the login
