"""Ray Serve's processes do without pandas, which pymilvus still finds (serving/lean.py)."""

import subprocess
import sys

import pytest

pytest.importorskip("pandas")


def test_serve_binds_no_pandas_and_pandas_stays_importable() -> None:
    code = (
        "import sys\n"
        "from serving.lean import serve_without_pandas\n"
        "serve_without_pandas()\n"
        "from ray import serve\n"
        "from ray.serve._private import utils\n"
        "print(utils.pd is None, 'pandas' in sys.modules)\n"
        "import pandas\n"
        "print(pandas.DataFrame is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False", "True"]


def test_it_does_nothing_once_serve_is_loaded() -> None:
    code = (
        "from ray.serve._private import utils\n"
        "from serving.lean import serve_without_pandas\n"
        "serve_without_pandas()\n"
        "print(utils.pd is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True"]
