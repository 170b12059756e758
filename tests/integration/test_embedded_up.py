"""The front door: `mnemoflow up` on the embedded default (tansu), a replay of one trajectory, a clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mnemoflow.replay import load_replays
from streams.broker import free_port

pytestmark = pytest.mark.integration

EVAL = Path(__file__).resolve().parents[3] / "shared" / "eval" / "trajectories" / "openhands_swebench_verified"
TRAJECTORY = EVAL / "trajs" / "django__django-11095"


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOFLOW_")}
    return {**env, "MNEMOFLOW_DATA_DIR": str(data_dir), "MNEMOFLOW_CONFIG": str(data_dir / "none.toml")}


@pytest.mark.skipif(not TRAJECTORY.exists(), reason=f"evaluation data not found at {TRAJECTORY}")
def test_up_replay_and_clean_stop(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    cmd = [sys.executable, "-m", "mnemoflow.cli", "up", "--port", str(port)]
    log = (tmp_path / "up.log").open("w+")
    proc = subprocess.Popen(cmd, env=_env(data_dir), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while "READY" not in Path(log.name).read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            time.sleep(0.5)
        output = Path(log.name).read_text()
        assert "READY" in output and "embedded tansu" in output, output[-3000:]

        replay = subprocess.run(
            [sys.executable, "-m", "mnemoflow.cli", "replay", str(TRAJECTORY), "--api", f"http://127.0.0.1:{port}"],
            env=_env(data_dir), capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        assert replay.returncode == 0, replay.stdout + replay.stderr
        [source] = load_replays(TRAJECTORY, user="replay")
        n_results = sum(1 for item in source.items if hasattr(item, "tool_call_id"))
        n_turns = len(source.items) - n_results
        assert f"{n_turns} turns, {n_results} tool results" in replay.stdout

        key = (data_dir / "api-key").read_text().strip()
        headers = {"Authorization": f"Bearer {key}"}
        base = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        entries: list = []
        while len(entries) < n_results and time.monotonic() < deadline:
            time.sleep(0.5)
            entries = httpx.get(f"{base}/sessions/{source.name}/offload", headers=headers).json()
        calls = [i.tool_call_id for i in source.items if hasattr(i, "tool_call_id")]
        assert [e["tool_call_id"] for e in entries] == calls
        first = next(i for i in source.items if hasattr(i, "tool_call_id"))
        ref = data_dir / "default" / "sessions" / source.name / "refs" / f"{first.tool_call_id}.md"
        assert ref.read_bytes() == first.content.encode()
        turns = httpx.get(f"{base}/users/replay/conversations", headers=headers).json()
        assert len(turns) == n_turns
        state = httpx.get(f"{base}/sessions/{source.name}/state", headers=headers).json()
        assert state["count"] == n_results
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(90)
        finally:
            if proc.poll() is None:
                proc.kill()
    output = Path(log.name).read_text()
    assert code == 0 and "stopped cleanly" in output, output[-3000:]
    pids = [int(p) for p in re.findall(r"tansu pid=(\d+)|Faust worker\s*\S\s*pid (\d+)", output) for p in p if p]
    assert len(pids) == 2, output[-3000:]
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], "broker or worker still running"
