"""The front door: `mnemoflow up` on the embedded default (Apache Kafka), as a user runs it.

One stack for the module, in a subprocess: every listener of its process tree is on loopback, a trajectory
replays through it, a SIGKILLed broker and worker are restarted by the supervisor with no acknowledged event
lost, and SIGTERM (what Kubernetes and systemd send) stops every process of the tree. Then one stack per model
engine, started from the command line the same way, gets ready with its ``llm`` Serve deployment healthy: llama.cpp
in process on the packaged Qwen2.5-Coder-0.5B (``make test`` fetches it), and the ``openai`` engine against
llama.cpp's own OpenAI-compatible server on the same file (issue 28: both used to stop within seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from mnemoflow.memory.l0 import read_l0
from mnemoflow.replay import load_replays
from mnemoflow.storage import LocalFileStore
from streams.broker import free_port
from tests.services import TEST_MODEL, llama_cpp_server

pytestmark = pytest.mark.integration

EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval" / "trajectories" / "openhands_swebench_verified"
TRAJECTORY = EVAL / "trajs" / "django__django-11095"
LOOPBACK = ("127.", "::1", "::ffff:127.")


@dataclass
class Up:
    proc: subprocess.Popen[str]
    log: Path
    data_dir: Path
    port: int
    tree: set[int]  # every pid seen below `mnemoflow up`, for the orphan check after the stop

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {(self.data_dir / 'api-key').read_text().strip()}"}

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def descendants(self) -> list[psutil.Process]:
        procs = psutil.Process(self.proc.pid).children(recursive=True)
        self.tree.update(p.pid for p in procs)
        return procs


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOFLOW_")}
    return {
        **env,
        "MNEMOFLOW_DATA_DIR": str(data_dir),
        "MNEMOFLOW_CONFIG": str(data_dir / "none.toml"),
        "MNEMOFLOW_WORKER_SESSION_TIMEOUT": "8",
    }


def _wait(predicate: object, timeout: float, what: str, up: Up) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert up.proc.poll() is None, f"`mnemoflow up` exited while waiting for {what}:\n{up.output()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{up.output()[-3000:]}"
        time.sleep(0.5)


@contextlib.contextmanager
def _mnemoflow_up(tmp: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Up]:
    """`mnemoflow up --port P *args` in ``tmp`` until it prints READY; stopped (and its whole tree) on exit."""
    data_dir, port = tmp / "data", free_port()
    log = tmp / "up.log"
    cmd = [sys.executable, "-m", "mnemoflow.cli", "up", "--port", str(port), *args]
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env={**_env(data_dir), **(env or {})}, stdout=out, stderr=subprocess.STDOUT, cwd=tmp, text=True
        )
    stack = Up(proc, log, data_dir, port, set())
    try:
        _wait(lambda: "READY" in stack.output(), 240, "READY", stack)
        yield stack
    finally:
        if proc.poll() is None:
            stack.descendants()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in stack.tree:  # never leave a broker or a raylet behind, whatever the test found
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with _mnemoflow_up(tmp_path_factory.mktemp("up")) as stack:
        yield stack


def test_every_listener_is_on_loopback(up: Up) -> None:
    assert "Apache Kafka" in up.output(), up.output()[-3000:]
    listeners = []
    for proc in [psutil.Process(up.proc.pid), *up.descendants()]:
        try:
            conns = proc.net_connections(kind="inet")
            name = " ".join(proc.cmdline())[:100]
        except psutil.Error:
            continue
        listeners += [(name, c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    assert any(port == up.port for _, _, port in listeners), listeners
    assert len(listeners) >= 5, listeners  # API, broker, GCS, raylet, workers: the walk did see the stack
    exposed = [item for item in listeners if not item[1].startswith(LOOPBACK)]
    assert not exposed, f"listening beyond loopback: {exposed}"


@pytest.mark.skipif(not TRAJECTORY.exists(), reason=f"evaluation data not found at {TRAJECTORY}")
def test_replay_lands(up: Up) -> None:
    replay = subprocess.run(
        [sys.executable, "-m", "mnemoflow.cli", "replay", str(TRAJECTORY), "--api", up.base],
        env=_env(up.data_dir),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    [source] = load_replays(TRAJECTORY, user="replay")
    calls = [i.tool_call_id for i in source.items if hasattr(i, "tool_call_id")]
    n_turns = len(source.items) - len(calls)
    assert f"{n_turns} turns, {len(calls)} tool results" in replay.stdout
    entries: list = []

    def landed() -> bool:
        nonlocal entries
        entries = httpx.get(f"{up.base}/v1/sessions/{source.name}/offload", headers=up.headers).json()
        return len(entries) >= len(calls)

    _wait(landed, 120, "the offload entries", up)
    assert [e["tool_call_id"] for e in entries] == calls
    first = next(i for i in source.items if hasattr(i, "tool_call_id"))
    ref = up.data_dir / "default" / "sessions" / source.name / "refs" / f"{first.tool_call_id}.md"
    assert ref.read_bytes() == first.content.encode()
    turns = httpx.get(f"{up.base}/v1/users/replay/conversations", headers=up.headers).json()
    assert len(turns) == n_turns


def _post_turns(up: Up, tag: str, n: int) -> list[str]:
    ids = [f"{tag}-{i}" for i in range(n)]
    body = {
        "turns": [
            {"message_id": m, "user": f"chaos-{tag}", "session": "s", "role": "user", "content": f"turn {m}"}
            for m in ids
        ]
    }
    deadline = time.monotonic() + 120
    while True:  # a client retries until acknowledged: the API is idempotent by message id
        try:
            if httpx.post(f"{up.base}/v1/turns", json=body, headers=up.headers, timeout=30).status_code == 202:
                return ids
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"turns {tag} never acknowledged:\n{up.output()[-3000:]}"
        time.sleep(1)


def _landed(up: Up, user: str) -> list[str]:
    return [m.id for m in read_l0(LocalFileStore(up.data_dir), "default", user)]


@pytest.mark.parametrize("part", ["kafka.Kafka", "streams.worker"])
def test_a_killed_part_is_restarted_and_loses_nothing(up: Up, part: str) -> None:
    [victim] = [p for p in up.descendants() if part in " ".join(p.cmdline())]
    tag = part.split(".")[-1].lower()
    before = _post_turns(up, f"{tag}-before", 50)  # acknowledged, maybe not yet consumed
    victim.kill()
    pattern = rf"supervisor.*restarted the {'broker' if tag == 'kafka' else 'worker'}"
    _wait(lambda: re.search(pattern, up.output()) is not None, 120, f"the {tag} restart", up)
    after = _post_turns(up, f"{tag}-after", 50)
    _wait(lambda: len(_landed(up, f"chaos-{tag}-before")) >= 50, 120, "the turns from before the kill", up)
    _wait(lambda: len(_landed(up, f"chaos-{tag}-after")) >= 50, 120, "the turns from after the kill", up)
    assert _landed(up, f"chaos-{tag}-before") == before  # exactly once, in order
    assert _landed(up, f"chaos-{tag}-after") == after


def test_sigterm_stops_every_process(up: Up) -> None:
    up.descendants()
    assert len(up.tree) >= 5
    up.proc.send_signal(signal.SIGTERM)
    code = up.proc.wait(120)
    output = up.output()
    assert code == 0 and "stopped cleanly" in output, output[-3000:]
    deadline = time.monotonic() + 30  # Ray's agents notice their raylet is gone within a few seconds
    left = up.tree
    while left and time.monotonic() < deadline:
        left = {pid for pid in left if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE}
        time.sleep(0.5)
    names = {pid: " ".join(psutil.Process(pid).cmdline())[:120] for pid in left if psutil.pid_exists(pid)}
    assert not left, f"left running after SIGTERM: {names}"


def _model_env(gguf: Path) -> dict[str, str]:
    """Small context, one thread: the llm replica shares 2 cores with the rest of the stack (and the tests)."""
    return {
        "MNEMOFLOW_MODELS_DIR": str(gguf.parent),
        "MNEMOFLOW_LLM_CONTEXT_TOKENS": "2048",
        "MNEMOFLOW_LLM_THREADS": "1",
    }


def _ready_with_llm(up: Up) -> str:
    """Until ``/health`` is 200 (every check, the llm deployment's included); returns the llm check's detail."""
    report: dict[str, object] = {}

    def ready() -> bool:
        nonlocal report
        try:
            response = httpx.get(f"{up.base}/health", timeout=10)
        except httpx.HTTPError:
            return False
        report = response.json()
        return response.status_code == 200

    _wait(ready, 180, "/health ok", up)
    checks = {c["name"]: c for c in report["checks"]}  # type: ignore[attr-defined]
    assert checks["llm"]["ok"], report
    return str(checks["llm"]["detail"])


def test_up_with_llama_cpp_in_process_gets_ready(tmp_path: Path, test_model_gguf: Path) -> None:
    """The one setting of issue 28 (``MNEMOFLOW_LLM``); ``--llm llama-cpp --model NAME`` maps onto it."""
    with _mnemoflow_up(tmp_path, env={**_model_env(test_model_gguf), "MNEMOFLOW_LLM": TEST_MODEL}) as up:
        assert _ready_with_llm(up) == "LlamaCppEngine loaded"


def test_up_with_openai_against_llama_cpp_server_gets_ready(tmp_path: Path, test_model_gguf: Path) -> None:
    pytest.importorskip("llama_cpp.server", reason="needs the llama extra: pip install 'mnemoflow[llama]'")
    with llama_cpp_server(test_model_gguf, tmp_path / "llama.log", n_ctx=2048) as url:
        env = {"MNEMOFLOW_LLM_SCHEMA_FORMAT": "json_object"}  # llama.cpp's server takes a schema this way
        with _mnemoflow_up(tmp_path, "--llm", "openai", "--llm-url", url, env=env) as up:
            assert _ready_with_llm(up) == f"{url}/v1/models answered 200"
