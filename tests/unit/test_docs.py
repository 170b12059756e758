"""The documentation holds to the code: every setting on the configuration page with its environment variable,
type, default and description; every route of the app on the HTTP API page; the committed generated pages equal to
what the code generates; every command's help naming a page that exists; the README short and its links alive.
(The strict site build in ``make lint`` fails on broken links and anchors inside the site.)"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mnemoflow.cli.main import app
from mnemoflow.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tools" / "docs"))

import pages  # noqa: E402  (tools/docs is not a package)


def _row(page: str, first_cell: str) -> list[str]:
    for line in page.splitlines():
        if line.startswith(f"| {first_cell} |"):
            return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
    raise AssertionError(f"no row for {first_cell}")


def test_every_setting_is_on_the_configuration_page_as_the_model_defines_it() -> None:
    page = pages.settings_page()
    for name, field in Settings.model_fields.items():
        env, type_, default, what = _row(page, f"`MNEMOFLOW_{name.upper()}`")
        assert env == f"`MNEMOFLOW_{name.upper()}`"
        assert type_ == pages.type_name(field.annotation)
        assert default == pages.default_text(field)
        assert field.description and html.unescape(what).replace("\\|", "|") == field.description.replace("\n", " ")


def test_a_setting_without_a_description_fails_the_page() -> None:
    class Undocumented(Settings):
        new_knob: int = 3

    with pytest.raises(ValueError, match="new_knob has no description"):
        pages._rows(Undocumented, pages.env_var)


def test_types_and_defaults_read_as_a_user_writes_them() -> None:
    fields = Settings.model_fields
    assert pages.type_name(fields["embedded_broker"].annotation) == '"kafka" / "tansu"'
    assert pages.type_name(fields["kafka_bootstrap"].annotation) == "str or unset"
    assert pages.type_name(fields["api_keys"].annotation) == "{str: [secret str]}"
    assert pages.default_text(fields["kafka_bootstrap"]) == "unset"
    assert pages.default_text(fields["fsync_files"]) == "`true`"
    assert pages.default_text(fields["api_port"]) == "`8000`"


def test_every_route_of_the_app_is_on_the_http_api_page() -> None:
    schema = pages.openapi_schema()
    page = pages.http_api_page()
    routes = [(method.upper(), path) for path, ops in schema["paths"].items() for method in ops]
    assert len(routes) > 30
    for method, path in routes:
        assert f"{method} {path}" in page, f"{method} {path}"


def test_every_command_help_names_a_page_that_exists() -> None:
    runner = CliRunner()
    for words in pages.cli_commands():
        out = runner.invoke(app, [*words, "--help"], env={"COLUMNS": "200"}).output
        named = re.search(r"Explained in docs/(\S+) \(", out)
        assert named, f"mnemoflow {' '.join(words)} --help names no page"
        assert (DOCS / named.group(1)).is_file(), named.group(1)


def test_every_page_of_docs_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def entries(nav: list) -> list[str]:
        out: list[str] = []
        for item in nav:
            for value in item.values():
                out += entries(value) if isinstance(value, list) else [value]
        return out

    listed = set(entries(config["nav"]))
    on_disk = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert listed == on_disk
    assert set(pages.GENERATED) <= on_disk


def test_the_committed_generated_pages_are_what_the_code_generates() -> None:
    assert pages.stale() == [], "run `make docs-pages` and commit the pages"


def test_the_readme_is_short_and_its_links_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert local, "the README links to the documentation"
    for link in local:
        assert (ROOT / link).exists(), link
