import subprocess
import sys

import mnemoflow

RUNTIMES = ("faust", "ray", "aiokafka", "pymilvus", "fastapi", "mode")


def test_public_names_are_sorted_and_exist() -> None:
    assert mnemoflow.__all__ == sorted(mnemoflow.__all__)
    assert all(hasattr(mnemoflow, name) for name in mnemoflow.__all__)


def test_the_core_imports_no_runtime() -> None:
    core = [
        "mnemoflow", "mnemoflow.memory.l0", "mnemoflow.offload.entries", "mnemoflow.offload.session_state",
        "mnemoflow.offload.canvas", "mnemoflow.replay", "mnemoflow.storage", "mnemoflow.capture", "mnemoflow.cli",
        "mnemoflow.client", "mnemoflow.proxy.pipeline", "mnemoflow.proxy.answer",
    ]  # fmt: skip
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in core)
        + f"print(sorted(r for r in {RUNTIMES!r} if r in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
