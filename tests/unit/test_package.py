import subprocess
import sys

import mnemoflow

RUNTIMES = ("faust", "ray", "aiokafka", "pymilvus", "fastapi", "mode")


def test_public_names_are_sorted_and_exist() -> None:
    assert mnemoflow.__all__ == sorted(mnemoflow.__all__)
    assert all(hasattr(mnemoflow, name) for name in mnemoflow.__all__)


def test_the_core_imports_no_runtime() -> None:
    core = [
        "mnemoflow",
        "mnemoflow.memory.l0",
        "mnemoflow.offload.entries",
        "mnemoflow.offload.session_state",
        "mnemoflow.offload.canvas",
        "mnemoflow.replay",
        "mnemoflow.storage",
        "mnemoflow.capture",
        "mnemoflow.cli",
        "mnemoflow.client",
        "mnemoflow.proxy.pipeline",
        "mnemoflow.proxy.answer",
    ]
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in core)
        + f"print(sorted(r for r in {RUNTIMES!r} if r in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _imported_packages(folder: str) -> dict[str, set[str]]:
    """Top-level packages each module under ``folder`` imports, anywhere in the file (lazy imports included)."""
    import ast
    from pathlib import Path

    out: dict[str, set[str]] = {}
    for path in (Path(__file__).resolve().parents[2] / folder).rglob("*.py"):
        tops: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                tops.add(node.module.split(".")[0])
        out[str(path)] = tops
    return out


def test_runtime_packages_point_one_way() -> None:
    """streams/ → serving/ → actors/ → mnemoflow/: no cycle between the runtime packages (issue 13)."""
    above = {"actors": {"serving", "streams"}, "serving": {"streams"}}
    wrong = {
        path: sorted(tops & above[folder])
        for folder in above
        for path, tops in _imported_packages(folder).items()
        if tops & above[folder]
    }
    assert wrong == {}
    core = {p: sorted(t & {"actors", "serving", "streams"}) for p, t in _imported_packages("mnemoflow").items()}
    assert {p: t for p, t in core.items() if t and "/mnemoflow/cli/" not in p} == {}
