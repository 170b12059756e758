"""Keep pandas out of Ray Serve's processes: ~32 MB in each of them (controller, HTTP proxy, every replica, the
driver), about 150 MB of the embedded stack's RSS.

Ray Serve 2.60 imports pandas when it is installed (``ray/serve/_private/utils.py``: ``try: import pandas``), only
to register a JSON encoder for DataFrames, which no mnemoflow route returns; pandas is installed because pymilvus
requires it. :func:`serve_without_pandas` puts a finder first on ``sys.meta_path`` that refuses pandas to that one
module, so Serve binds ``pd = None``; any other importer (pymilvus, when the Milvus adapter loads) gets pandas as
usual, and a process that never imports Serve is not touched.

It runs in the driver before Serve is imported and, as Ray's ``worker_process_setup_hook``, in every worker process
of the stack's job: :func:`lean_runtime_env` does the first and returns the runtime env for the second, which
:func:`mnemoflow.cli.stack.start_local_ray` and the cluster connect pass to ``ray.init``. A Ray that moves
that module makes it a no-op (``bench/ingest.py`` measures the stack's RSS; a unit test checks the effect).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import FrameType, ModuleType
from typing import Any

SERVE_UTILS = "ray.serve._private.utils"
HOOK = "serving.lean.serve_without_pandas"
"""The import path Ray's ``worker_process_setup_hook`` is given."""


class _NoPandasForServe(MetaPathFinder):
    """Refuses ``pandas`` while Serve's utils module is the one importing it; says nothing otherwise."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas":
            frame: FrameType | None = sys._getframe(1)
            while frame is not None:
                if frame.f_globals.get("__name__") == SERVE_UTILS:
                    raise ModuleNotFoundError("pandas is not loaded for Ray Serve (serving/lean.py)", name=fullname)
                frame = frame.f_back
        return None


def serve_without_pandas() -> None:
    if SERVE_UTILS in sys.modules or any(isinstance(f, _NoPandasForServe) for f in sys.meta_path):
        return  # too late, or done already
    sys.meta_path.insert(0, _NoPandasForServe())


def lean_runtime_env() -> dict[str, Any]:
    """Call before ``ray.init``: this process skips pandas now, and the returned runtime env has every worker of
    the job do so at its start."""
    serve_without_pandas()
    return {"worker_process_setup_hook": HOOK}
