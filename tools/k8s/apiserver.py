"""A real Kubernetes control plane on loopback for checks: etcd + kube-apiserver, no nodes, no controllers.

Why the real server and not only schemas: it runs the API's own validation (a PodDisruptionBudget with both
``minAvailable`` and ``maxUnavailable``, immutable and cross-field rules, CRD CEL rules), knows which API versions
are served, and refuses unknown fields with ``fieldValidation=Strict`` (kubectl's default). ``kubectl apply
--server-side --dry-run=server`` takes an object through all of it and stores nothing.

Everything listens on 127.0.0.1 on free ports, authentication is one static token in a file only this process
can read, and the state lives in a temporary folder removed on exit. Start to ready takes about 3 s.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ControlPlane:
    """``with ControlPlane(bin_dir) as cp: cp.kubectl("apply", ...)``; ``cp.kubeconfig`` for other tools."""

    def __init__(self, bin_dir: Path, ready_timeout: float = 90.0) -> None:
        self.bin = Path(bin_dir)
        self.ready_timeout = ready_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="mnemoflow-k8s-"))
        self.kubeconfig = self.dir / "kubeconfig"
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self.spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--data-dir",
                str(self.dir / "etcd"),
                "--name",
                "check",
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"check=http://127.0.0.1:{peer_port}",
                "--log-level",
                "warn",
                "--unsafe-no-fsync",  # a throwaway store: durability costs time and buys nothing here
            ],
        )
        token = secrets.token_hex(16)
        tokens = self.dir / "tokens.csv"
        tokens.write_text(f"{token},check-admin,check-admin,system:masters\n")
        tokens.chmod(0o600)
        sa_key = self.dir / "sa.key"
        subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True, capture_output=True)
        self.spawn(
            "kube-apiserver",
            [
                str(self.bin / "kube-apiserver"),
                "--etcd-servers",
                etcd_url,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(api_port),
                "--cert-dir",
                str(self.dir / "certs"),
                "--token-auth-file",
                str(tokens),
                "--authorization-mode",
                "RBAC",
                "--service-cluster-ip-range",
                "10.96.0.0/16",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(sa_key),
                "--service-account-signing-key-file",
                str(sa_key),
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                "-v",
                "0",
                "--endpoint-reconciler-type",
                "none",  # no `kubernetes` Service endpoints: 127.0.0.1 is refused there
            ],
        )
        url = f"https://127.0.0.1:{api_port}"
        self.kubeconfig.write_text(_kubeconfig(url, token))
        self.kubeconfig.chmod(0o600)
        self._wait_ready(url, token)

    def spawn(self, name: str, cmd: list[str]) -> None:
        """Run ``cmd`` beside the control plane, logged to ``<name>.log``, stopped (newest first) with it."""
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process's folder
        self._procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_ready(self, url: str, token: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = ""
        while time.monotonic() < deadline:
            for proc in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}:\n{self.logs()}")
            try:
                r = httpx.get(f"{url}/readyz", headers={"Authorization": f"Bearer {token}"}, verify=False, timeout=2)
                if r.status_code == 200:
                    return
                last = r.text[-500:]
            except httpx.HTTPError as exc:
                last = str(exc)
            time.sleep(0.3)
        raise RuntimeError(f"kube-apiserver not ready within {self.ready_timeout:.0f} s: {last}\n{self.logs()}")

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}" for p in self.dir.glob("*.log"))

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        proc = subprocess.run(
            [str(self.bin / "kubectl"), *args], input=stdin, text=True, capture_output=True, env=env, timeout=300
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
        return proc

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)


def _kubeconfig(url: str, token: str) -> str:
    # The serving certificate is self-signed by the server at start; the connection never leaves loopback.
    return f"""apiVersion: v1
kind: Config
clusters:
  - name: check
    cluster: {{server: "{url}", insecure-skip-tls-verify: true}}
users:
  - name: check-admin
    user: {{token: "{token}"}}
contexts:
  - name: check
    context: {{cluster: check, user: check-admin}}
current-context: check
"""
