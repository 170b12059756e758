"""``mnemoflow skill``: list, show, edit, delete, distil, export and import skills on the data directory.

Like ``export``, these act on the files directly (a read is safe at any time; run writes with the stack stopped or
use the API, ``/v1/skills``, whose writes are serialised).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from mnemoflow.cli.docs import see
from mnemoflow.config import Settings
from mnemoflow.errors import NotFound

if TYPE_CHECKING:
    from mnemoflow.skills.store import SkillStore
    from mnemoflow.storage import LocalFileStore

app = typer.Typer(
    help="Skills distilled from finished tasks (procedural memory).",
    epilog=see("concepts/skills.md"),
    no_args_is_help=True,
)
console = Console()
DataDir = Annotated[Path | None, typer.Option(help="Where the layers are stored.")]
TenantOpt = Annotated[str, typer.Option(help="The tenant the skills belong to.")]
AgentOpt = Annotated[str | None, typer.Option(help="An agent's private skills instead of the shared ones.")]


def _files(data_dir: Path | None) -> LocalFileStore:
    from mnemoflow.storage import LocalFileStore

    return LocalFileStore((Settings(data_dir=data_dir) if data_dir else Settings()).data_dir)


def _store(tenant: str, agent: str | None, data_dir: Path | None) -> SkillStore:
    from mnemoflow.skills.store import SkillStore

    return SkillStore(_files(data_dir), tenant, agent)


@app.command("list", epilog=see("concepts/skills.md"))
def list_(tenant: TenantOpt = "default", agent: AgentOpt = None, data_dir: DataDir = None) -> None:
    """The skills, by name: what each is for, its area, version and the tasks it came from."""
    store = _store(tenant, agent, data_dir)
    table = Table("name", "when to use", "area", "version", "sources")
    for skill in store.all():
        table.add_row(skill.name, skill.when_to_use, skill.area, str(skill.version), str(len(skill.sources)))
    console.print(table)


@app.command(epilog=see("concepts/skills.md"))
def show(name: str, tenant: TenantOpt = "default", agent: AgentOpt = None, data_dir: DataDir = None) -> None:
    """Print one skill file (Markdown with its META header)."""
    from mnemoflow.skills.model import render_skill

    store = _store(tenant, agent, data_dir)
    try:
        typer.echo(render_skill(store.get(name)), nl=False)
    except NotFound as exc:
        raise typer.BadParameter(str(exc)) from exc


@app.command(epilog=see("concepts/skills.md"))
def edit(
    name: str,
    source: Annotated[Path, typer.Argument(help="The edited skill file (as `show` prints it).")],
    tenant: TenantOpt = "default",
    agent: AgentOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Replace a skill with an edited file; the old version is kept in its history."""
    from mnemoflow.skills.model import parse_edit

    try:
        edited = parse_edit(source.read_text(encoding="utf-8"), name)
    except ValueError as exc:
        raise typer.BadParameter(f"{source}: {exc}") from exc
    try:
        new = _store(tenant, agent, data_dir).edit(edited, datetime.now(UTC))
    except NotFound as exc:
        raise typer.BadParameter(str(exc)) from exc
    console.print(f"{name}: version {new.version} (version {new.version - 1} kept in its history)")


@app.command(epilog=see("concepts/skills.md"))
def delete(name: str, tenant: TenantOpt = "default", agent: AgentOpt = None, data_dir: DataDir = None) -> None:
    """Delete a skill and its history."""
    store = _store(tenant, agent, data_dir)
    if not store.delete(name):
        raise typer.BadParameter(f"no skill named {name!r}")
    console.print(f"deleted {name}")


@app.command(epilog=see("concepts/skills.md"))
def distil(
    sessions: Annotated[list[str], typer.Argument(help="Sessions whose long tasks to distil.")],
    tenant: TenantOpt = "default",
    agent: AgentOpt = None,
    data_dir: DataDir = None,
) -> None:
    """Distil sessions' finished long tasks into skills (a task already distilled is skipped)."""
    from mnemoflow.skills.learn import learn_session

    files = _files(data_dir)
    table = Table("task", "action", "skill", "why")
    for session in sessions:
        for item in learn_session(files, tenant, session, datetime.now(UTC), agent=agent):
            table.add_row(item.task, item.action, item.skill or "", item.reason)
    console.print(table)


@app.command("export", epilog=see("concepts/skills.md"))
def export_(
    out: Annotated[Path, typer.Argument(help="Bundle file; '-' writes to stdout.")],
    tenant: TenantOpt = "default",
    scope: Annotated[
        list[str] | None, typer.Option(help="Only this scope: shared or agent:<agent> (repeat for more).")
    ] = None,
    history: Annotated[bool, typer.Option(help="With the versions edits replaced.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Write the tenant's skills as a bundle (mnemoflow-skills-bundle v1: skill files, manifest with checksums)."""
    from mnemoflow.skills.bundle import export_skills

    files = _files(data_dir)
    stream = sys.stdout.buffer if str(out) == "-" else out.open("wb")
    try:
        manifest = export_skills(files, tenant, stream, at=datetime.now(UTC), scopes=scope, history=history)
    finally:
        if stream is not sys.stdout.buffer:
            stream.close()
    Console(stderr=True).print(f"exported the skills of {tenant}, files: {len(manifest.files)}")


@app.command("import", epilog=see("concepts/skills.md"))
def import_(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `mnemoflow skill export` or the export route.")],
    tenant: TenantOpt = "default",
    data_dir: DataDir = None,
) -> None:
    """Fold a skills bundle into the tenant's skills, each scope into the same scope: a skill whose tasks are
    known is skipped, a close one merges, another is stored (importing twice adds nothing)."""
    from mnemoflow.errors import InvalidInput
    from mnemoflow.skills.bundle import import_skills, read_skills_bundle

    files = _files(data_dir)
    try:
        with bundle.open("rb") as fh:
            read = read_skills_bundle(fh)
    except InvalidInput as exc:
        raise typer.BadParameter(f"{bundle}: {exc}") from exc
    table = Table("member", "action", "skill", "why")
    for item in import_skills(files, tenant, read, datetime.now(UTC)):
        table.add_row(item.task, item.action, item.skill or "", item.reason)
    console.print(table)
