"""serving.builder: the args a RayService passes, and the applications the embedded stack deploys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mnemoflow.config import Settings
from mnemoflow.errors import ConfigError
from serving import builder


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for name in ("MNEMOFLOW_KAFKA_BOOTSTRAP", "MNEMOFLOW_LLM_ENGINE", "MNEMOFLOW_SESSION_SHARDS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MNEMOFLOW_CONFIG", str(tmp_path / "none.toml"))


def test_no_args_reads_the_pods_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOFLOW_KAFKA_BOOTSTRAP", "kafka:9092")
    monkeypatch.setenv("MNEMOFLOW_SESSION_SHARDS", "48")
    parsed, settings = builder.parse_args(None)
    assert parsed.actors and parsed.detached and parsed.extractor_replicas == 1
    assert settings.kafka_bootstrap == "kafka:9092" and settings.session_shards == 48


def test_args_settings_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOFLOW_SESSION_SHARDS", "48")
    parsed, settings = builder.parse_args({"settings": {"session_shards": 8}, "max_batch_size": "32"})
    assert settings.session_shards == 8
    assert parsed.max_batch_size == 32  # YAML or JSON strings coerce


@pytest.mark.parametrize(
    "args",
    [
        {"detatched": True},  # a typo in args
        {"settings": {"sesion_shards": 8}},  # a typo in a setting
        {"settings": {"session_shards": 0}},  # out of range
        {"max_batch_size": 0},
        {"wait_for_llm_seconds": 600},  # gone: the actors look the llm app up at their first model call
    ],
)
def test_bad_args_are_refused(args: dict) -> None:
    with pytest.raises(ValidationError):
        builder.parse_args(args)


def test_api_app_needs_a_kafka_bootstrap() -> None:
    with pytest.raises(ConfigError, match="KAFKA_BOOTSTRAP"):
        builder.api_app({"actors": False})


def test_llm_app_needs_a_model_engine() -> None:
    with pytest.raises(ConfigError, match="model engine"):
        builder.llm_app({})


def test_embedded_applications_in_deploy_order() -> None:
    apps = builder.applications(Settings(), "127.0.0.1:9092")
    assert [(name, prefix) for name, (_, prefix) in apps.items()] == [("extractor", None), ("mnemoflow", "/")]
    with_model = builder.applications(Settings(llm_engine="openai", llm_url="http://m:8080/v1"), "b:9092")
    assert list(with_model) == ["llm", "extractor", "mnemoflow"]


def test_builders_return_bound_applications(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray.serve import Application

    monkeypatch.setenv("MNEMOFLOW_KAFKA_BOOTSTRAP", "kafka:9092")
    assert isinstance(builder.api_app({"actors": False}), Application)
    assert isinstance(builder.extractor_app({"extractor_replicas": 2}), Application)
    assert isinstance(builder.embedder_app({}), Application)
    assert isinstance(builder.llm_app({"settings": {"llm_engine": "openai", "llm_url": "http://m/v1"}}), Application)
