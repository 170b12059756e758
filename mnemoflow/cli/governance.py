"""``mnemoflow export``, ``import`` and ``reindex``: whole-user and whole-index work on the data directory.

They act on the files and the index directly, as ``reembed`` does, so run ``import`` and ``reindex`` with the
stack stopped (the running stack's path for an import is ``POST /v1/users/{user}/import``). ``export`` only
reads and is safe at any time.
"""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from mnemoflow.config import Settings

console = Console(stderr=True)
DataDir = Annotated[Path | None, typer.Option(help="Where the layers are stored.")]
TenantOpt = Annotated[str, typer.Option(help="The tenant the user belongs to.")]


def _settings(data_dir: Path | None) -> Settings:
    return Settings(data_dir=data_dir) if data_dir else Settings()


def export(
    user: Annotated[str, typer.Argument(help="The user to export.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Bundle file; '-' writes to stdout.")] = Path("-"),
    tenant: TenantOpt = "default",
    sessions: Annotated[bool, typer.Option(help="Include the user's sessions (refs, offload, canvases).")] = False,
    data_dir: DataDir = None,
) -> None:
    """Write a user's memory as a bundle (mnemoflow-user-bundle v1: L0, records, scenes, persona, manifest)."""
    from mnemoflow.embedding.factory import build_embedder
    from mnemoflow.governance.bundle import export_user
    from mnemoflow.storage import LocalFileStore

    settings = _settings(data_dir)
    files = LocalFileStore(settings.data_dir)
    model = build_embedder(settings).model_id
    stream = sys.stdout.buffer if str(out) == "-" else out.open("wb")
    try:
        manifest = export_user(
            files, tenant, user, stream, embedding_model=model, at=datetime.now(UTC), sessions=sessions
        )
    finally:
        if stream is not sys.stdout.buffer:
            stream.close()
    size = sum(f.bytes for f in manifest.files)
    console.print(f"exported {tenant}/{user}: {len(manifest.files)} files, {size} bytes")


def import_(
    bundle: Annotated[Path, typer.Argument(help="A bundle written by `mnemoflow export` or the export route.")],
    user: Annotated[str, typer.Option(help="The user id to import as (may differ from the source).")],
    tenant: TenantOpt = "default",
    data_dir: DataDir = None,
) -> None:
    """Load a bundle as (tenant, user) and index its atoms with this stack's embedder. Stack stopped."""
    from mnemoflow.governance.bundle import BundleImporter
    from mnemoflow.index.factory import open_index
    from mnemoflow.storage import LocalFileStore

    settings = _settings(data_dir)
    embedder, store = open_index(settings)
    try:
        with bundle.open("rb") as fh:
            result = BundleImporter(LocalFileStore(settings.data_dir), store, embedder).import_bundle(fh, tenant, user)
    finally:
        store.close()
    console.print(f"imported {result['files']} files as {tenant}/{user}; {result['atoms_indexed']} atoms indexed")


def reindex(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: all).")] = None,
    data_dir: DataDir = None,
) -> None:
    """Rebuild the atom index from records/ alone (built beside the old file, then swapped in). Stack stopped."""
    from mnemoflow.embedding.factory import build_embedder
    from mnemoflow.governance.reindex import count_live, reindex_user
    from mnemoflow.index.factory import index_path, open_store
    from mnemoflow.storage import LocalFileStore
    from mnemoflow.storage.layout import users

    settings = _settings(data_dir)
    files, embedder = LocalFileStore(settings.data_dir), build_embedder(settings)
    final = index_path(settings)
    if settings.milvus_uri:
        store = open_store(settings, dim=embedder.dim, embedding_model=embedder.model_id)
    else:
        from mnemoflow.index.sqlite import SqliteVectorStore

        Path(final).parent.mkdir(parents=True, exist_ok=True)
        building = final + ".rebuild"
        for suffix in ("", "-wal", "-shm"):
            Path(building + suffix).unlink(missing_ok=True)
        store = SqliteVectorStore.open(building, dim=embedder.dim, embedding_model=embedder.model_id)
    everyone = list(users(files, tenant))
    done = 0
    with Progress(console=console) as bar:
        task = bar.add_task("reindexing", total=sum(count_live(files, t, u) for t, u in everyone))
        for t, u in everyone:
            done += reindex_user(files, store, embedder, t, u, progress=lambda n: bar.advance(task, n))
    store.close()
    if not settings.milvus_uri:
        for suffix in ("-wal", "-shm"):
            Path(final + suffix).unlink(missing_ok=True)
        os.replace(building, final)
    console.print(f"reindexed {done} atoms of {len(everyone)} users with {embedder.model_id}")
