from pathlib import Path

import pytest
from pydantic import ValidationError

from mnemoflow.config import Settings


def test_defaults_are_the_embedded_shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.kafka_bootstrap is None and settings.ray_address is None and settings.milvus_uri is None
    assert settings.shard_partitions == settings.session_shards


def test_env_beats_toml_and_toml_beats_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "mf.toml"
    config.write_text('kafka_bootstrap = "kafka:9092"\nsession_shards = 16\n[api_keys]\nacme = "k1"\n')
    monkeypatch.setenv("MNEMOFLOW_CONFIG", str(config))
    monkeypatch.setenv("MNEMOFLOW_SESSION_SHARDS", "32")
    settings = Settings()
    assert settings.kafka_bootstrap == "kafka:9092" and settings.session_shards == 32
    assert settings.api_keys["acme"].get_secret_value() == "k1"


def test_to_env_round_trips_through_a_child_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Settings(kafka_bootstrap="a:1,b:2", api_keys={"acme": "k1"}, session_shards=3, data_dir=Path("/x"))
    for name, value in original.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings() == original


@pytest.mark.parametrize("bad", [{"session_shards": 0}, {"api_keys": {"../t": "k"}}, {"unknown_field": 1}])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)
