"""Check the manifests under k8s/ in tiers that can each fail, with tools built by tools/k8s/build.sh.

1. render:  ``kubectl kustomize k8s/overlays/<name>`` (kubectl carries kustomize).
2. schema:  kubeconform -strict against built-in schemas (kubernetes-validate) and schemas made from the operators'
            CRDs in /work/shared/k8s-crds (schemas.py): unknown kinds, versions and fields are refused.
3. server:  a real kube-apiserver + etcd on loopback (apiserver.py) with the CRDs installed; every rendered object
            goes through ``kubectl apply --server-side --dry-run=server`` (API validation, strict fields).
4. nodes:   the same with controllers, a scheduler and kwok fake nodes (fakenodes.py): the small overlay applied
            for real, the worker Deployment rolls out and over, a drain honours the disruption budgets (rollout.py).

``python tools/k8s/k8scheck.py [overlay ...]`` runs all three and the negative cases (negative/*.yaml), which each
name in a comment the tiers that must refuse them. The tests in tests/k8s/ drive the same functions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import fakenodes  # noqa: E402
import rollout  # noqa: E402
from apiserver import ControlPlane  # noqa: E402
from schemas import BUILTIN_TEMPLATE, CRD_TEMPLATE, builtin, crds  # noqa: E402

CRD_DIR = Path(os.environ.get("MNEMOFLOW_K8S_CRDS", "/work/shared/k8s-crds"))
OVERLAYS = ("small", "production")
NEGATIVE = HERE / "negative"
KUBE_MINOR = "1.37"  # the kube-apiserver build.sh makes; the built-in schemas are of the same minor


@dataclass
class Result:
    ok: bool
    output: str


def tools() -> Path:
    """Build or find the tools (cached by version); raises with build.sh's own words if that fails."""
    env = {**os.environ, "PYTHON": sys.executable}  # build.sh fetches a wheel with this interpreter's pip
    proc = subprocess.run(["bash", str(HERE / "build.sh")], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"tools/k8s/build.sh failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def render(bin_dir: Path, overlay: str) -> str:
    proc = subprocess.run(
        [str(bin_dir / "kubectl"), "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kustomize of {overlay} failed:\n{proc.stderr}")
    return proc.stdout


def objects(rendered: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(rendered) if d]


def schema_dir(bin_dir: Path) -> Path:
    """Built-in and CRD schemas next to the tools (made once per tools build and CRD set)."""
    out = bin_dir.parent / "schemas"
    marker = out / ".complete"
    converter = (HERE / "schemas.py").stat().st_mtime_ns
    stamp = ",".join(sorted(f"{p.name}:{p.stat().st_size}" for p in CRD_DIR.glob("*.yaml"))) + f";{converter}"
    if marker.exists() and marker.read_text() == stamp:
        return out
    wheel = next(bin_dir.glob("kubernetes_validate-*.whl"), None)
    if wheel is None:
        raise RuntimeError(f"no kubernetes-validate wheel in {bin_dir} (build.sh downloads it)")
    prefix = f"kubernetes_validate/kubernetes-json-schema/v{KUBE_MINOR}.0-local-strict/"
    extracted = bin_dir.parent / "kubernetes-validate"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(extracted, [n for n in z.namelist() if n.startswith(prefix)])
    if builtin(extracted / prefix, out / "builtin") < 100:
        raise RuntimeError(f"kubernetes-validate has no schemas for Kubernetes {KUBE_MINOR}")
    crds(sorted(CRD_DIR.glob("*.yaml")), out / "crds")
    marker.write_text(stamp)
    return out


def schema_check(bin_dir: Path, rendered: str) -> Result:
    schemas = schema_dir(bin_dir)
    proc = subprocess.run(
        [
            str(bin_dir / "kubeconform"),
            "-strict",
            "-summary",
            "-output",
            "text",
            "-schema-location",
            f"{schemas}/builtin/{BUILTIN_TEMPLATE}",
            "-schema-location",
            f"{schemas}/crds/{CRD_TEMPLATE}",
            "-",
        ],
        input=rendered,
        capture_output=True,
        text=True,
    )
    return Result(proc.returncode == 0, proc.stdout + proc.stderr)


def install_crds(cp: ControlPlane) -> None:
    files = sorted(CRD_DIR.glob("*.yaml"))
    for crd in files:
        # Server-side: the biggest CRDs are too large for the last-applied annotation of a client-side apply.
        cp.kubectl("apply", "--server-side", "--field-manager=k8scheck", "-f", str(crd), check=True)
    for crd in files:  # ours only: kwok, when running, may add CRDs of its own
        cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(crd), check=True)


def server_check(cp: ControlPlane, rendered: str) -> Result:
    """Create the namespaces for real (a dry-run cannot hold namespaced objects), then dry-run everything."""
    for doc in objects(rendered):
        if doc.get("kind") == "Namespace":
            ns = doc["metadata"]["name"]
            if cp.kubectl("get", "namespace", ns).returncode != 0:
                cp.kubectl("create", "namespace", ns, check=True)
    proc = cp.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--field-manager=k8scheck",
        "--validate=strict",
        "-f",
        "-",
        stdin=rendered,
    )
    return Result(proc.returncode == 0, proc.stdout + proc.stderr)


def negative_cases() -> dict[str, tuple[str, set[str]]]:
    """name -> (manifest, tiers that must refuse it); the tiers are listed in the file's ``# refused-by:`` line."""
    cases = {}
    for path in sorted(NEGATIVE.glob("*.yaml")):
        text = path.read_text()
        line = next(ln for ln in text.splitlines() if ln.startswith("# refused-by:"))
        cases[path.stem] = (text, {t.strip() for t in line.split(":", 1)[1].split(",")})
    return cases


def main(argv: list[str]) -> int:
    overlays = argv or list(OVERLAYS)
    started = time.monotonic()
    bin_dir = tools()
    print(f"tools: {bin_dir} ({time.monotonic() - started:.1f} s)")
    failed = False
    rendered = {name: render(bin_dir, name) for name in overlays}
    for name, text in rendered.items():
        res = schema_check(bin_dir, text)
        failed |= not res.ok
        print(f"schema {name}: {'ok' if res.ok else 'FAILED'} ({len(objects(text))} objects)\n{res.output.strip()}")
    negatives = negative_cases()
    for case, (text, refused_by) in negatives.items():
        res = schema_check(bin_dir, text)
        ok = res.ok != ("schema" in refused_by)
        failed |= not ok
        print(f"negative {case} schema: {'refused' if not res.ok else 'accepted'} ({'as expected' if ok else 'WRONG'})")
    t = time.monotonic()
    with ControlPlane(bin_dir) as cp:
        print(f"api server ready in {time.monotonic() - t:.1f} s")
        install_crds(cp)
        for name, text in rendered.items():
            t = time.monotonic()
            res = server_check(cp, text)
            failed |= not res.ok
            took = time.monotonic() - t
            print(f"server {name}: {'ok' if res.ok else 'FAILED'} in {took:.1f} s\n{res.output.strip()}")
        for case, (text, refused_by) in negatives.items():
            res = server_check(cp, text)
            ok = res.ok != ("server" in refused_by)
            failed |= not ok
            verdict = "refused" if not res.ok else "accepted"
            print(f"negative {case} server: {verdict} ({'as expected' if ok else 'WRONG'}): {res.output.strip()[:300]}")
    t = time.monotonic()
    with ControlPlane(bin_dir) as cp:
        fakenodes.start(cp)
        install_crds(cp)
        try:
            for line in rollout.run(cp, rendered.get("small") or next(iter(rendered.values()))):
                print(f"fake nodes: {line}")
        except (AssertionError, TimeoutError, RuntimeError) as exc:
            failed = True
            print(f"fake nodes: FAILED: {exc}")
    print(f"fake nodes: {time.monotonic() - t:.1f} s")
    print(f"total {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
