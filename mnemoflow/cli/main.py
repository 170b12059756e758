"""Typer commands. Runtimes are imported inside the commands, never at import time."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console
from rich.table import Table

from mnemoflow.cli import governance, models, skills
from mnemoflow.cli.docs import see
from mnemoflow.cli.stack import Stack, StackInfo
from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError, ServiceUnavailable
from mnemoflow.llm.factory import check_llm
from mnemoflow.llm.models import MODELS

app = typer.Typer(help="mnemoflow: memory for fleets of LLM agents.", epilog=see("index.md"), no_args_is_help=True)
console = Console()
app.command(epilog=see("operations/data.md"))(governance.export)
app.command("import", epilog=see("operations/data.md"))(governance.import_)
app.command(epilog=see("operations/embeddings.md"))(governance.reindex)
app.add_typer(models.app, name="model")
app.add_typer(skills.app, name="skill")


def _settings(data_dir: Path | None) -> Settings:
    return Settings(data_dir=data_dir) if data_dir else Settings()


def _api_key(settings: Settings, key: str | None) -> str:
    if key:
        return key
    if settings.api_keys:  # the first tenant's newest key (keys are listed oldest first)
        return next(iter(settings.api_keys.values()))[-1].get_secret_value()
    path = settings.data_dir / "api-key"
    if path.exists():
        return path.read_text().strip()
    raise typer.BadParameter("no API key: pass --key, set MNEMOFLOW_API_KEYS, or run `mnemoflow up` first")


@app.command(epilog=see("quickstart.md"))
def up(
    data_dir: Annotated[Path | None, typer.Option(help="Where the layers are stored.")] = None,
    port: Annotated[int | None, typer.Option(help="API port (default from settings, 8000).")] = None,
    llm: Annotated[
        str | None, typer.Option(help="Engine: heuristic (no model), openai (OpenAI-compatible URL), llama-cpp, vllm.")
    ] = None,
    llm_url: Annotated[str | None, typer.Option(help="Base URL of the OpenAI-compatible server (--llm openai).")] = (
        None
    ),
    model: Annotated[
        str | None,
        typer.Option(
            help=f"--llm llama-cpp: a fetched model ({', '.join(MODELS)}) or a GGUF file; "
            "--llm openai or vllm: the model name."
        ),
    ] = None,
) -> None:
    """Start the stack (embedded broker unless Kafka is configured), print where each part runs, run until Ctrl-C."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    update: dict[str, object] = {}
    if port is not None:
        update["api_port"] = port
    if llm is not None:
        engine = llm.replace("-", "_")
        if engine not in ("heuristic", "openai", "llama_cpp", "vllm"):
            raise typer.BadParameter(f"unknown engine {llm!r}", param_hint="--llm")
        update["llm_engine"] = engine
        if engine != "llama_cpp":
            update["llm"] = None  # the command line's engine wins over MNEMOFLOW_LLM
    if llm_url is not None:
        update["llm_url"] = llm_url
    try:
        settings = _settings(data_dir)
        if model is not None:
            if model in MODELS and update.get("llm_engine", "llama_cpp") == "llama_cpp":
                update |= {"llm": model, "llm_engine": "llama_cpp", "llm_model_path": None}
            elif update.get("llm_engine", settings.llm_engine) == "llama_cpp":
                update |= {"llm": None, "llm_model_path": Path(model)}
            else:
                update["llm_model"] = model
        settings = Settings.model_validate({**settings.model_dump(), **update})
        check_llm(settings)  # a missing model or URL stops here, before anything has started
        stack = Stack(settings)  # and so does another program on the API's port
    except (ValueError, ConfigError, ServiceUnavailable) as exc:  # pydantic's ValidationError is a ValueError
        console.print(f"[red]not started[/]: {exc}", highlight=False)
        raise typer.Exit(2) from exc
    if settings.llm_engine == "heuristic":
        console.print("[yellow]No model configured: using the deterministic heuristic engine.[/]")
    elif not settings.model_stages:
        console.print(
            f"[yellow]{settings.llm_engine}: no stage runs on the model unless MNEMOFLOW_LLM_STAGES lists it "
            "(on the packaged CPU models every stage measured worse than its heuristic; see the limitations "
            "page).[/]"
        )
    else:
        console.print(f"Stages on the model ({settings.llm_engine}): {', '.join(sorted(settings.model_stages))}.")
    stopping = threading.Event()
    started = False

    def _on_signal(signum: int, frame: object) -> None:
        # Before the stack is up, unwind the start (Stack.start stops what it began); after, leave the loop.
        console.print(f"{signal.Signals(signum).name} received: stopping every part in order")
        if not started:
            raise KeyboardInterrupt
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    failure: str | None = None
    try:
        with console.status("starting broker, Ray, session shards, API and Faust worker..."):
            info = stack.start()
        started = True
        _print_up(stack, info)
        while not stopping.wait(1.0):
            stack.supervise()  # logs what it restarted and why
    except ServiceUnavailable as exc:
        failure = str(exc)
    except KeyboardInterrupt:
        pass
    finally:
        with console.status("stopping..."):
            stack.stop()
    if failure:
        console.print(f"[red]stopped[/]: {failure}")
        raise typer.Exit(1)
    console.print("stopped cleanly")


def _print_up(stack: Stack, info: StackInfo) -> None:
    table = Table(title="mnemoflow is up", show_header=False)
    table.add_row("Kafka", f"{info.bootstrap} ({info.broker})")
    table.add_row("Ray", info.ray_address)
    table.add_row("API", f"{info.api_url}  (docs: {info.api_url}/docs)")
    if info.serve_url != info.api_url:
        table.add_row("API through Serve's HTTP proxy", info.serve_url)
    table.add_row("Faust worker", f"pid {info.worker_pid}, log {stack.log_dir / 'worker.log'}")
    for plane, url in stack.metrics_urls():
        table.add_row(f"Metrics: {plane}", url)
    table.add_row("Data", str(info.data_dir))
    key_file = info.data_dir / "api-key"
    table.add_row("API key", str(key_file) if key_file.exists() else "from settings")
    console.print(table)
    console.print(f"READY {info.api_url}", highlight=False)


@app.command(epilog=see("quickstart.md"))
def replay(
    path: Annotated[Path, typer.Argument(exists=True, help="A JSON file or folder of trajectories / LoCoMo data.")],
    api: Annotated[str, typer.Option(help="API base URL.")] = "http://127.0.0.1:8000",
    key: Annotated[str | None, typer.Option(help="API key (default: settings or <data_dir>/api-key).")] = None,
    data_dir: Annotated[Path | None, typer.Option()] = None,
    user: Annotated[str, typer.Option(help="User id for trajectories (LoCoMo uses its speakers).")] = "replay",
    limit: Annotated[int | None, typer.Option(help="Replay at most this many sources.")] = None,
    batch: Annotated[int, typer.Option(min=1, max=500)] = 200,
) -> None:
    """Feed recorded conversations through the API, with a progress bar."""
    from mnemoflow.cli.replaying import run_replay

    settings = _settings(data_dir)
    totals = run_replay(path, api, _api_key(settings, key), user=user, limit=limit, batch=batch, console=console)
    console.print(f"replayed {totals.sources} sources: {totals.turns} turns, {totals.tool_results} tool results")


@app.command(epilog=see("operations/embeddings.md"))
def reembed(data_dir: Annotated[Path | None, typer.Option(help="Where the layers are stored.")] = None) -> None:
    """Recompute every atom vector with the configured embedding model (after changing it); atoms keep their ids."""
    from rich.progress import Progress

    from mnemoflow.embedding.factory import build_embedder
    from mnemoflow.index.factory import open_store

    settings = _settings(data_dir)
    embedder = build_embedder(settings)
    store = open_store(settings, dim=embedder.dim, embedding_model=embedder.model_id)
    with Progress(console=console) as bar:
        task = bar.add_task(f"re-embedding with {embedder.model_id}", total=None)  # the index spans tenants

        def embed(texts: Sequence[str]) -> Sequence[Sequence[float]]:
            vectors = embedder.embed(list(texts))
            bar.advance(task, len(texts))
            return vectors

        done = store.reembed(embed)
    store.close()
    console.print(f"re-embedded {done} atoms with {embedder.model_id}")


@app.command(epilog=see("agents/mcp.md"))
def mcp(
    transport: Annotated[str, typer.Option(help="stdio (the host starts this process) or http (streamable HTTP).")] = (
        "stdio"
    ),
    api: Annotated[str, typer.Option(help="API base URL.")] = "http://127.0.0.1:8000",
    key: Annotated[
        str | None, typer.Option(help="stdio: the tenant's API key (default: settings or <data_dir>/api-key).")
    ] = None,
    data_dir: Annotated[Path | None, typer.Option()] = None,
    host: Annotated[str, typer.Option(help="http: where to listen.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: port; the endpoint is /mcp.")] = 8765,
) -> None:
    """Serve the agent tools over MCP. Over http every request authenticates with its own tenant's API key."""
    from mnemoflow.mcp.server import build_server, run

    if transport not in ("stdio", "http"):
        raise typer.BadParameter(f"unknown transport {transport!r}", param_hint="--transport")
    if transport == "stdio":
        run(build_server(api, _api_key(_settings(data_dir), key)), "stdio")
    else:
        run(build_server(api, public_url=f"http://{host}:{port}"), "http", host=host, port=port)


@app.command(epilog=see("operations/observability.md"))
def status(
    api: Annotated[str, typer.Option(help="API base URL.")] = "http://127.0.0.1:8000",
) -> None:
    """The API's readiness report, one row per dependency. Exit code 1 when degraded or down."""
    from rich.markup import escape

    from mnemoflow.health import HealthReport

    try:
        response = httpx.get(f"{api}/health", timeout=5)
        report = HealthReport.model_validate({"checks": response.json()["checks"]})
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:  # no answer, or not a health report
        console.print(f"[red]down[/]: {api} ({escape(str(exc))})")
        raise typer.Exit(1) from exc
    ok = report.ok and response.status_code == 200
    table = Table(title=f"{api}: {'[green]ok[/]' if ok else '[red]degraded[/]'}")
    for column in ("check", "state", "detail"):
        table.add_column(column)
    table.add_column("latency", justify="right")
    for check in report.checks:
        state = "[green]ok[/]" if check.ok else "[red]failing[/]"
        table.add_row(check.name, state, escape(check.detail), f"{check.latency_ms:.0f} ms")
    console.print(table)
    if not ok:
        raise typer.Exit(1)
