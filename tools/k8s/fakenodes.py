"""Fake nodes for the local control plane: kube-controller-manager, kube-scheduler and kwok beside the API server.

With them a Deployment really rolls out (ReplicaSets, scheduling, pods that kwok marks Running and Ready) and
``kubectl drain`` really goes through the Eviction API, which refuses an eviction that would break a
PodDisruptionBudget. No container runs: kwok plays the kubelet of nodes annotated ``kwok.x-k8s.io/node=fake``.
"""

from __future__ import annotations

import json
import time

from apiserver import ControlPlane

FAKE = "kwok.x-k8s.io/node"


def start(cp: ControlPlane) -> None:
    """Start the controllers, the scheduler and kwok against ``cp`` (they stop with it)."""
    kc = str(cp.kubeconfig)
    cp.spawn(
        "kube-controller-manager",
        [
            str(cp.bin / "kube-controller-manager"),
            "--kubeconfig",
            kc,
            "--leader-elect=false",
            "--service-account-private-key-file",
            str(cp.dir / "sa.key"),
            "--use-service-account-credentials=false",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "--controllers",
            "*",
            "-v",
            "0",
        ],
    )
    cp.spawn(
        "kube-scheduler",
        [
            str(cp.bin / "kube-scheduler"),
            "--kubeconfig",
            kc,
            "--leader-elect=false",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            "0",
            "-v",
            "0",
        ],
    )
    stages = [a for f in sorted((cp.bin / "kwok-stages").glob("*.yaml")) for a in ("--config", str(f))]
    cp.spawn(
        "kwok",
        [
            str(cp.bin / "kwok"),
            "--kubeconfig",
            kc,
            "--manage-all-nodes=false",
            *stages,
            f"--manage-nodes-with-annotation-selector={FAKE}=fake",
            "--cidr",
            "10.0.0.1/24",
            "--node-ip",
            "10.0.0.1",
            "--server-address",
            "127.0.0.1:0",
        ],
    )


def add_nodes(cp: ControlPlane, names: list[str]) -> None:
    """Nodes with room for everything (32 CPUs, 256 GiB) and no taints, handled by kwok."""
    for name in names:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {FAKE: "fake"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok"},
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        }
        cp.kubectl("apply", "--server-side", "-f", "-", stdin=json.dumps(node), check=True)
    wait(cp, lambda: all(_ready(cp, "node", n) for n in names), 120, f"nodes {names} Ready")


def _ready(cp: ControlPlane, kind: str, name: str, namespace: str | None = None) -> bool:
    args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
    proc = cp.kubectl(*args)
    if proc.returncode != 0:
        return False
    conditions = json.loads(proc.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def pods(cp: ControlPlane, namespace: str, selector: str) -> list[dict]:
    proc = cp.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json", check=True)
    return json.loads(proc.stdout)["items"]


def wait(cp: ControlPlane, condition, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s\n{cp.logs()}")
        time.sleep(0.5)
