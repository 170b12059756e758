"""Shared fixtures. Real services come from tests/services.py and are started only by integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from mnemoflow.llm.models import installed_model
from streams.broker_kafka import EmbeddedKafka
from tests.services import TEST_MODEL, apache_kafka_session

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_worker_niceness", "0")
os.environ.setdefault("RAY_gcs_server_port_wait_time_s", "120")  # a GCS start on a busy machine (see cli/stack.py)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # one-machine Ray on loopback (see cli/stack.py)


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedKafka:
    """A single-node Apache Kafka 4.x broker (KRaft) from its Maven jars, for the whole test session."""
    yield from apache_kafka_session(tmp_path_factory)


@pytest.fixture(scope="session")
def test_model_gguf() -> Path:
    """The verified GGUF of :data:`~tests.services.TEST_MODEL`, with llama-cpp-python installed. Missing: skipped
    with how to fetch it, except in CI, where `make test` fetches it before the tests run, so a missing file there
    is a failure."""
    pytest.importorskip("llama_cpp", reason="needs the llama extra: pip install 'mnemoflow[llama]'")
    try:
        return installed_model(TEST_MODEL, Settings().models_dir)
    except ConfigError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the test model is not there (`make test` fetches it): {exc}")
        pytest.skip(str(exc))
