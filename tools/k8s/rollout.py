"""The worker Deployment on fake nodes: it rolls out, rolls over, and drains within its disruption budget; the
Ray head's budget (minAvailable 1 of 1) stops a drain until an operator steps in.

Runs on a ControlPlane with fakenodes started; the rendered overlay is applied for real (the custom resources
only sit there: no operators run). Returns what it saw, one line per step; raises on anything else.
"""

from __future__ import annotations

import json

import fakenodes
from apiserver import ControlPlane

NS = "mnemoflow"
WORKERS = "app.kubernetes.io/name=mnemoflow-worker"
NODES = ["kwok-0", "kwok-1", "kwok-2"]


def _pv() -> str:
    # No storage provisioner here: a volume bound ahead to the claim (nothing is mounted, kwok runs no container).
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": "mnemoflow-data-fake"},
            "spec": {
                "capacity": {"storage": "100Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": "/tmp/mnemoflow-fake-pv"},
                "claimRef": {"namespace": NS, "name": "mnemoflow-data"},
            },
        }
    )


def _head_standin(node: str) -> str:
    """A pod with the Ray head's labels (KubeRay is not here to make the real one), pinned to ``node``."""
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "ray-head-standin",
                "namespace": NS,
                "labels": {"app.kubernetes.io/name": "mnemoflow-ray", "app.kubernetes.io/component": "ray-head"},
            },
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "ray-head",
                        "image": "mnemoflow:0.1.0",
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    }
                ],
            },
        }
    )


def _ready_workers(cp: ControlPlane) -> list[dict]:
    return [
        p
        for p in fakenodes.pods(cp, NS, WORKERS)
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))
    ]


def run(cp: ControlPlane, rendered: str, replicas: int = 3) -> list[str]:
    seen: list[str] = []
    fakenodes.add_nodes(cp, NODES)
    cp.kubectl("apply", "--server-side", "--field-manager=k8scheck", "-f", "-", stdin=rendered, check=True)
    cp.kubectl("apply", "--server-side", "-f", "-", stdin=_pv(), check=True)
    cp.kubectl("scale", "-n", NS, "deployment/mnemoflow-worker", f"--replicas={replicas}", check=True)
    cp.kubectl("rollout", "status", "-n", NS, "deployment/mnemoflow-worker", "--timeout=180s", check=True)
    seen.append(f"rolled out: {len(_ready_workers(cp))}/{replicas} workers Ready")

    cp.kubectl("set", "env", "-n", NS, "deployment/mnemoflow-worker", "MNEMOFLOW_ROLLOUT_CHECK=1", check=True)
    cp.kubectl("rollout", "status", "-n", NS, "deployment/mnemoflow-worker", "--timeout=180s", check=True)
    seen.append("rolled over to a new ReplicaSet (maxSurge 1, maxUnavailable 0)")

    node = _ready_workers(cp)[0]["spec"]["nodeName"]
    drained = cp.kubectl("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
    if drained.returncode != 0:
        raise AssertionError(f"drain of {node} failed:\n{drained.stdout}{drained.stderr}")
    fakenodes.wait(cp, lambda: len(_ready_workers(cp)) == replicas, 180, f"{replicas} workers Ready after the drain")
    assert all(p["spec"]["nodeName"] != node for p in _ready_workers(cp)), "a worker is still on the drained node"
    seen.append(f"drained {node}: workers evicted within their budget (maxUnavailable 1), {replicas} Ready elsewhere")

    head_node = next(n for n in NODES if n != node)
    cp.kubectl("apply", "--server-side", "-f", "-", stdin=_head_standin(head_node), check=True)

    def head_budget_exhausted() -> bool:
        pdb = json.loads(cp.kubectl("get", "pdb", "-n", NS, "mnemoflow-ray-head", "-o", "json", check=True).stdout)
        status = pdb.get("status", {})
        return status.get("currentHealthy") == 1 and status.get("disruptionsAllowed") == 0

    fakenodes.wait(cp, head_budget_exhausted, 120, "the ray-head budget counts the head as healthy")
    blocked = cp.kubectl(
        "drain", head_node, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=20s"
    )
    out = blocked.stdout + blocked.stderr
    if blocked.returncode == 0 or "disruption budget" not in out:
        raise AssertionError(f"the drain of {head_node} was not stopped by the ray-head budget:\n{out}")
    head = json.loads(cp.kubectl("get", "pod", "-n", NS, "ray-head-standin", "-o", "json", check=True).stdout)
    assert not head["metadata"].get("deletionTimestamp"), "the head was evicted"
    seen.append(f"drain of {head_node} refused: the ray-head budget (minAvailable 1) kept the head")
    return seen
