"""The documentation pages generated from the code, so that they cannot drift from it: every setting from the
settings model, the HTTP API from the OpenAPI schema the app itself produces, the command line from its help, and
the benchmark tables from the result files committed under ``bench/results/``.

They are committed under ``docs/``, so that they read in the repository as on the site and a change of the API or
of a setting shows in review. ``make docs-pages`` (``python tools/docs/pages.py``) writes them; ``make docs``
(part of ``make lint``) and ``tests/unit/test_docs.py`` fail while one differs from what the code generates.
"""

from __future__ import annotations

import json
import tempfile
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

import mnemoflow.config
from mnemoflow.config import AgentKey, RateLimit, Retention, Settings

ENV_PREFIX = "MNEMOFLOW_"
ROOT = Path(__file__).resolve().parents[2]


def env_var(name: str) -> str:
    return f"{ENV_PREFIX}{name.upper()}"


def type_name(annotation: Any) -> str:
    """How a reader writes the value: ``int``, ``str or unset``, ``"kafka" / "tansu"``, ``{tenant: Retention}``."""
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:  # a constrained type (SafeId) reads as the type it constrains
        return type_name(args[0])
    if origin is Literal:
        return " / ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or unset" if type(None) in args else "")
    if origin is dict:
        return f"{{{type_name(args[0])}: {type_name(args[1])}}}" if args else "object"
    if origin in (list, set, frozenset):
        return f"[{type_name(args[0])}]" if args else "list"
    if annotation is SecretStr:
        return "secret str"
    return getattr(annotation, "__name__", str(annotation))


def default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, Path):  # a default under the home folder reads the same on every machine
        home = Path.home()
        return f"`~/{value.relative_to(home)}`" if value.is_relative_to(home) else f"`{value}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (set, frozenset)):  # as the environment takes it, in a stable order
        return f"`{json.dumps(sorted(value))}`"
    if isinstance(value, (dict, list)):
        return f"`{json.dumps(value)}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _rows(model: type[BaseModel], key: Callable[[str], str]) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        if not field.description:
            raise ValueError(f"{model.__name__}.{name} has no description: say what the setting does in its Field")
        cells = [key(name), type_name(field.annotation), default_text(field), field.description]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def _table(header: Sequence[str], rows: list[str]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows]


def settings_page() -> str:
    """Every field of :class:`Settings`, with its environment variable, type, default and description."""
    intro = (mnemoflow.config.__doc__ or "").strip()
    lines = [
        "# Configuration",
        "",
        "Generated from the settings model (`mnemoflow/config.py`) by `make docs-pages`; the build fails while it",
        "differs from the model, so a setting cannot be added without appearing here with what its `description`",
        "says.",
        "",
        intro,
        "",
        'In a TOML file each setting is its name in lower case without the prefix (`data_dir = "/srv/memory"`).',
        "",
        "## Settings",
        "",
        *_table(
            ("environment variable", "type", "default", "what it does"),
            _rows(Settings, lambda name: f"`{env_var(name)}`"),
        ),
        "",
    ]
    for model, setting in ((Retention, "retention"), (RateLimit, "rate_limits"), (AgentKey, "agent_keys")):
        lines += [
            f"## {model.__name__}",
            "",
            f"A value of `{env_var(setting)}`, by tenant. {' '.join((model.__doc__ or '').split())}",
            "",
            *_table(("field", "type", "default", "what it does"), _rows(model, lambda name: f"`{name}`")),
            "",
        ]
    return "\n".join(lines)


class _NoBus:
    """The app only has to describe its routes: nothing is published while the schema is built."""

    async def publish(self, topic: str, records: Sequence[tuple[str, bytes, int | None]], headers: Any = None) -> None:
        raise RuntimeError("the docs build publishes nothing")

    async def close(self) -> None:
        return None


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI document of the API as the running app serves it at ``/openapi.json``."""
    from serving.api import create_api

    with tempfile.TemporaryDirectory() as data_dir:
        app = create_api(Settings(data_dir=Path(data_dir)), _NoBus())
        return app.openapi()


def http_api_page() -> str:
    from openapidocs.mk.v3 import OpenAPIV3DocumentationHandler

    schema = openapi_schema()
    body = OpenAPIV3DocumentationHandler(schema, style="MARKDOWN").write()
    return "\n".join(
        [
            "# HTTP API",
            "",
            "Generated by `make docs-pages` from the OpenAPI schema the app itself produces (the one a running",
            "stack serves at `/openapi.json`, browsable at `/docs`); the build fails while it differs. Every route",
            "but `/health`, `/health/live`, `/metrics` and the docs needs `Authorization: Bearer <key>`; a key sees",
            "only its tenant. What the routes do together is in [Concepts](../concepts/memory.md) and",
            "[Data and governance](../operations/data.md).",
            "",
            "Bad input gets a 4xx with the reason and writes nothing: missing or mistyped fields and ids with path",
            "characters (422), a malformed chat array or a window too small for the last user message (400, naming",
            "the problem), a body over the limit (413), a missing or unknown key (401), a tenant over its rate limit",
            "(429 with `Retry-After`). Submitting the same ids again is harmless: every sink is idempotent by id. The",
            "memory routes answer 404 for an atom, user, session or operation this tenant does not have (another",
            "tenant's ids included), 422 for a patch that breaks the schema or sets nothing, and 409 for an",
            "`Idempotency-Key` reused with another body.",
            "",
            _nest_headings(body),
        ]
    )


def _nest_headings(markdown: str) -> str:
    """The generated document opens with its own title (``# mnemoflow 0.1.0``), which the page's replaces, and
    puts each response at its route's level: a response goes one level under its route, so the table of contents
    lists the routes alone (headings only, not lines of a fenced example)."""
    out, fenced = [], False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("# "):
            continue
        out.append("#" + line if not fenced and line.startswith("### Response ") else line)
    return "\n".join(out)


def cli_commands() -> list[tuple[str, ...]]:
    """Every command of ``mnemoflow``, as the words a user types (``("model", "fetch")``)."""
    import typer

    from mnemoflow.cli.main import app

    out: list[tuple[str, ...]] = [()]

    def walk(group: Any, prefix: tuple[str, ...]) -> None:  # a group (typer vendors click's types)
        for name, command in sorted(group.commands.items()):
            out.append((*prefix, name))
            if hasattr(command, "commands"):
                walk(command, (*prefix, name))

    walk(typer.main.get_command(app), ())
    return out


def cli_help(words: tuple[str, ...]) -> str:
    """What ``mnemoflow WORDS --help`` prints, at 100 columns and without colour."""
    from typer.testing import CliRunner

    from mnemoflow.cli.main import app

    env = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}
    result = CliRunner().invoke(app, [*words, "--help"], env=env, prog_name="mnemoflow")
    if result.exit_code != 0:
        raise RuntimeError(f"mnemoflow {' '.join(words)} --help failed: {result.output}")
    return "\n".join(line.rstrip() for line in result.output.strip("\n").splitlines())


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Generated by `make docs-pages` from the commands' own `--help`; the build fails while it differs.",
        "",
    ]
    for words in cli_commands():
        lines += [f"## mnemoflow {' '.join(words)}".rstrip(), "", "```text", cli_help(words), "```", ""]
    return "\n".join(lines)


def benchmark_modules() -> dict[str, str]:
    """Every benchmark script of ``bench/`` and the first paragraph of its docstring (what it measures)."""
    import ast

    out = {}
    for path in sorted((ROOT / "bench").glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if doc and "__main__" in path.read_text():
            out[path.stem] = doc.split("\n\n")[0].replace("\n", " ")
    return out


def published_reports() -> list[tuple[str, dict[str, Any]]]:
    """The committed result files that carry a report (``bench/report.py``), by file name."""
    out = []
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "report" in data:
            out.append((path.name, data["report"]))
    return out


def _report_section(file: str, report: dict[str, Any], about: str) -> list[str]:
    m, load = report["machine"], report["load"]
    lines = [
        f"## {report['title']}",
        "",
        about,
        "",
        f"`{report['command']}` at commit `{report['commit']}`, finished {report['finished']} after"
        f" {report['seconds']:.0f} s, on {m['cpus']} cores ({m['cpu_model']}), {m['memory_gib']} GiB, Python"
        f" {m['python']}; load average {load['start']} at the start, {load['end']} at the end, {load['peak']} at"
        f" most. Result file: `bench/results/{file}`.",
        "",
    ]
    for table in report["tables"]:
        rows = [[_cell(c) for c in row] for row in table["rows"]]
        lines += [f"**{table['title']}**", "", *_table(table["columns"], ["| " + " | ".join(r) + " |" for r in rows])]
        lines.append("")
    lines += [f"- {note}" for note in report.get("notes", [])]
    return lines


def benchmarks_page() -> str:
    about = benchmark_modules()
    reports = published_reports()
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make docs-pages` from the result files committed under `bench/results/` (the build fails",
        "while it differs): each benchmark prints these tables and writes them with its command, commit, machine",
        "and load (`bench/report.py`). Our machines have 2 cores and no GPU and are shared, so read every rate",
        "with the load beside it. Figures measured before the result files were committed, and how each figure",
        "moved, are in the [benchmark history](history/benchmarks-2026-12.md).",
        "",
    ]
    for file, report in reports:
        lines += _report_section(file, report, about.get(report["benchmark"], ""))
    shown = {report["benchmark"] for _, report in reports}
    waiting = [name for name in about if name not in shown]
    if waiting:
        lines += [
            "## Not yet published",
            "",
            "These benchmarks have no committed result file with a report yet; their last figures are in the",
            "[benchmark history](history/benchmarks-2026-12.md).",
            "",
            *[f"- `bench/{name}.py`: {about[name]}" for name in waiting],
            "",
        ]
    return "\n".join(lines)


GENERATED: dict[str, Callable[[], str]] = {
    "benchmarks.md": benchmarks_page,
    "reference/configuration.md": settings_page,
    "reference/http-api.md": http_api_page,
    "reference/cli.md": cli_page,
}
"""Every generated page, by its path in the site, and what writes it."""


DOCS = ROOT / "docs"


def stale() -> list[str]:
    """The generated pages whose committed text differs from what the code generates now."""
    return [path for path, write in GENERATED.items() if (DOCS / path).read_text() != write() + "\n"]


def main(argv: list[str]) -> int:
    """``--check``: name the stale pages and fail; otherwise write every page."""
    if "--check" in argv:
        if behind := stale():
            print(f"generated pages out of date: {', '.join(behind)}; run `make docs-pages` and commit them")
            return 1
        return 0
    for path, write in GENERATED.items():
        (DOCS / path).parent.mkdir(parents=True, exist_ok=True)
        (DOCS / path).write_text(write() + "\n")
    print(f"wrote {', '.join(GENERATED)} under docs/")
    return 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
