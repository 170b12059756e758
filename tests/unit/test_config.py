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
    assert [k.get_secret_value() for k in settings.api_keys["acme"]] == ["k1"]  # one key: a list of one


def test_to_env_round_trips_through_a_child_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Settings(kafka_bootstrap="a:1,b:2", api_keys={"acme": "k1"}, session_shards=3, data_dir=Path("/x"))
    for name, value in original.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings() == original


@pytest.mark.parametrize(
    "bad",
    [
        {"session_shards": 0},
        {"api_keys": {"../t": "k"}},
        {"unknown_field": 1},
        {"api_door": "haproxy"},
    ],
)
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Settings(**bad)


def test_a_tenant_may_hold_several_keys_from_env_or_toml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "mf.toml"
    config.write_text('[api_keys]\nacme = ["old", "new"]\nsolo = "only"\n')
    monkeypatch.setenv("MNEMOFLOW_CONFIG", str(config))
    from_toml = Settings()
    assert {t: [k.get_secret_value() for k in keys] for t, keys in from_toml.api_keys.items()} == {
        "acme": ["old", "new"],
        "solo": ["only"],
    }
    monkeypatch.setenv("MNEMOFLOW_CONFIG", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", '{"acme": ["k1", "k2"], "b": "k3"}')
    from_env = Settings()
    assert {t: [k.get_secret_value() for k in keys] for t, keys in from_env.api_keys.items()} == {
        "acme": ["k1", "k2"],
        "b": ["k3"],
    }


def test_to_env_round_trips_several_keys_and_rate_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Settings(
        api_keys={"acme": ["old", "new"], "b": "k"},
        rate_limit_per_second=40,
        rate_limits={"acme": {"per_second": 2.5, "burst": 3}},
    )
    for name, value in original.to_env().items():
        monkeypatch.setenv(name, value)
    assert Settings() == original
    assert Settings().rate_limit_for("acme").burst == 3 and Settings().rate_limit_for("b").per_second == 40


@pytest.mark.parametrize(
    ("keys", "reason"),
    [
        ({"acme": "s3cret-a", "other": ["s3cret-b", "s3cret-a"]}, "tenants 'acme' and 'other' share an API key"),
        ({"acme": []}, "tenant 'acme' has no API key"),
        ({"acme": ["s3cret-a", ""]}, "tenant 'acme' has an empty API key"),
    ],
)
def test_bad_key_rings_are_refused_without_printing_the_keys(keys: dict, reason: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(api_keys=keys)
    assert reason in str(refused.value) and "s3cret" not in str(refused.value)


def test_rate_limits_name_tenants_by_id() -> None:
    with pytest.raises(ValidationError):
        Settings(rate_limits={"../x": {"per_second": 1, "burst": 1}})
    with pytest.raises(ValidationError):
        Settings(rate_limits={"acme": {"per_second": 0, "burst": 1}})


def test_a_tenant_cannot_take_the_name_of_a_service_folder() -> None:
    with pytest.raises(ValidationError, match="stack itself"):
        Settings(api_keys={"kafka": "k1"})


def test_the_model_stages_are_a_json_list_of_known_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    every = {"l1", "boundary", "summaries", "canvas", "scenes", "persona", "skills"}
    assert Settings(llm_engine="openai").model_stages == every  # by default: all on a served model
    assert Settings(llm_engine="llama_cpp").model_stages == set()  # none on a CPU model unless listed
    monkeypatch.setenv("MNEMOFLOW_LLM_STAGES", '["scenes", "persona", "canvas"]')
    assert Settings(llm_engine="llama_cpp").model_stages == {"scenes", "persona", "canvas"}
    monkeypatch.setenv("MNEMOFLOW_LLM_STAGES", '["scenes", "extraction"]')  # a stage that does not exist
    with pytest.raises(ValidationError, match="llm_stages"):
        Settings()
