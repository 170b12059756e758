"""The stack under test for ``bench/chaos.py``: ``mnemoflow up`` as a child process, its parts found by walking
its process tree, signals sent to one part at a time, and a sweep that leaves nothing running.

Parts are recognised by what ``ps`` shows (verified on a running stack): the Faust worker's command line holds
``streams.worker``; the broker is ``java ... kafka.Kafka`` (or the tansu binary); Ray names its worker processes
after what they run: ``ray::SessionShard``, ``ray::ServeReplica:extractor:extractor``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PARTS = ("worker", "broker", "shard", "extractor")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def part_of(cmdline: list[str]) -> str | None:
    """Which part of the stack a process is, from its command line (None: not one we inject faults into)."""
    text = " ".join(cmdline)
    head = cmdline[0] if cmdline else ""
    if "streams.worker" in text:
        return "worker"
    if "kafka.Kafka" in text or os.path.basename(head).startswith("tansu") or " broker --listener-url " in text:
        return "broker"
    if head.startswith("ray::SessionShard"):
        return "shard"
    if head.startswith("ray::ServeReplica:extractor"):
        return "extractor"
    return None


@dataclass
class UpProcess:
    """``mnemoflow up`` in its own process group, with every process it ever had below it remembered (so that
    an orphan left by a crash can still be swept)."""

    cmd: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path
    proc: subprocess.Popen[bytes] | None = None
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    ray_session: str | None = None

    def start(self, timeout: float) -> str:
        """Start it and wait for ``READY <url>``; returns the URL."""
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.cmd, env=self.env, cwd=self.cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.tree()
            for line in self.output().splitlines():
                if line.startswith("READY "):
                    return line.split()[1]
            if self.proc.poll() is not None:
                raise RuntimeError(f"mnemoflow up exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"mnemoflow up not READY within {timeout:.0f}s:\n{self.output()[-3000:]}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tree(self) -> list[psutil.Process]:
        """``up`` and its descendants now; remembers each (and the Ray session they belong to)."""
        if self.proc is None:
            return []
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for p in procs:
            self.seen.setdefault(p.pid, p)
            if self.ray_session is None:
                try:
                    for arg in p.cmdline():
                        if arg.startswith("--session-name=") or arg.startswith("--session_name="):
                            self.ray_session = arg.split("=", 1)[1]
                except psutil.Error:
                    pass
        return procs

    def parts(self, name: str) -> list[psutil.Process]:
        """Live processes of one part, oldest first."""
        found = []
        for p in self.tree():
            try:
                if part_of(p.cmdline()) == name and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.Error:
                continue
        return sorted(found, key=lambda p: p.create_time())

    def strays(self) -> list[psutil.Process]:
        """Processes of this stack still running: seen below ``up`` earlier, or Ray processes of its session."""
        out: dict[int, psutil.Process] = {}
        for pid, p in self.seen.items():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # is_running checks the creation time
                    out[pid] = p
            except psutil.Error:
                continue
        if self.ray_session:
            for p in psutil.process_iter(["cmdline"]):
                try:
                    if any(self.ray_session in arg for arg in p.info["cmdline"] or []):
                        out.setdefault(p.pid, p)
                except psutil.Error:
                    continue
        out.pop(os.getpid(), None)
        return list(out.values())

    def stop(self, timeout: float) -> dict[str, object]:
        """SIGTERM to ``up`` alone (what a service manager or ``kill`` does); how it went, and what it left."""
        if self.proc is None:
            return {"exit_code": None}
        self.tree()
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - t0
        time.sleep(1.0)  # children that are exiting on their own get a moment
        left = []
        for p in self.strays():
            try:
                left.append({"pid": p.pid, "cmd": " ".join(p.cmdline())[:160]})
            except psutil.Error:
                continue
        return {
            "exit_code": code,
            "stop_s": round(took, 1),
            "timed_out": code is None,
            "leftover": left,
            "said_stopped_cleanly": "stopped cleanly" in self.output(),
        }

    def sweep(self) -> int:
        """SIGCONT then SIGKILL everything of this stack that is still running (the process group included)."""
        killed = 0
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self.strays():
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
                killed += 1
            except psutil.Error:
                continue
        if self.proc is not None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        psutil.wait_procs([p for p in self.seen.values()], timeout=5)
        return killed
