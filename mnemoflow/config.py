"""Typed settings, parsed once at the edge.

Sources, strongest first: constructor arguments, ``MNEMOFLOW_*`` environment variables, the TOML file named by
``MNEMOFLOW_CONFIG`` (or ``mnemoflow.toml`` in the working directory), defaults. Defaults give the embedded
shape: no Kafka bootstrap means "start the tansu broker from its wheel"; no Ray address means "start Ray here".
Nested values take a double underscore in the environment, for example ``MNEMOFLOW_API_KEYS='{"acme": "k1"}'``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from mnemoflow.ids import check_id

TOPIC_TURNS = "mnemoflow.turns"
TOPIC_TOOL_RESULTS = "mnemoflow.tool-results"
TOPIC_JOBS = "mnemoflow.jobs"
TOPIC_DEAD_LETTERS = "mnemoflow.dead-letters"


class Settings(BaseSettings):
    """Every endpoint and size of a mnemoflow deployment."""

    model_config = SettingsConfigDict(env_prefix="MNEMOFLOW_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Field(Path("./data"), description="Root of the human-readable layers (one folder per tenant).")

    kafka_bootstrap: str | None = Field(None, description="host:port[,host:port]; None starts the embedded broker.")
    turns_partitions: int = Field(8, ge=1, le=1024)
    tool_results_partitions: int | None = Field(
        None, ge=1, le=1024, description="Defaults to session_shards so a partition maps onto one shard."
    )
    topic_replication: int = Field(1, ge=1)
    embedded_broker_port: int = Field(0, ge=0, le=65535, description="0 picks a free loopback port.")

    ray_address: str | None = Field(None, description="Ray GCS address; None starts Ray locally.")
    ray_namespace: str = "mnemoflow"
    session_shards: int = Field(4, ge=1, le=4096)
    shard_idle_seconds: float = Field(600.0, gt=0, description="Evict a session's state after this much idleness.")
    shard_max_sessions: int = Field(10_000, ge=1, description="Bound on sessions one shard keeps in memory.")

    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=0, le=65535)
    api_keys: dict[str, SecretStr] = Field(
        default_factory=dict, description="tenant -> API key. Empty: `mnemoflow up` makes one for tenant 'default'."
    )
    max_body_bytes: int = Field(1 << 20, ge=1024)

    worker_batch_size: int = Field(1000, ge=1)
    worker_batch_seconds: float = Field(0.05, gt=0)
    worker_max_attempts: int = Field(5, ge=1, description="Tries of a batch before its events go to dead letters.")
    l1_enabled: bool = Field(True, description="Schedule L1 extraction from the turn stream.")
    curator_shards: int = Field(2, ge=1, le=1024, description="UserCurator actors (users hashed onto them) for L2/L3.")
    curator_tick_seconds: float = Field(5.0, gt=0, description="How often a curator runs the users whose L2 is due.")
    l2_delay_after_l1_seconds: float = Field(10.0, ge=0, description="L2 waits this long after an L1 pass.")
    l2_min_interval_seconds: float = Field(900.0, ge=0, description="At most one L2 pass per user per interval.")
    l2_max_interval_seconds: float = Field(3600.0, gt=0)
    l1_tick_seconds: float = Field(5.0, gt=0, description="How often a worker fires due idle/retry triggers.")
    worker_session_timeout: float = Field(
        30.0, ge=6, description="Seconds before Kafka gives a dead worker's partitions to another (also a restart)."
    )

    milvus_uri: str | None = Field(None, description="Milvus URI; None uses the embedded vector index.")
    embedder: Literal["minilm", "hashing", "openai"] = Field(
        "minilm", description="minilm: all-MiniLM-L6-v2 int8 ONNX in-process; openai: an embeddings endpoint."
    )
    embedder_model_path: Path | None = Field(None, description="Explicit MiniLM .onnx file or folder.")
    embedder_url: str | None = Field(None, description="OpenAI-compatible base URL for embedder='openai'.")
    embedder_model: str = "all-MiniLM-L6-v2"
    embedder_threads: int | None = Field(None, ge=1, description="onnxruntime threads; None lets it choose.")
    llm_engine: Literal["heuristic", "openai", "llama_cpp", "vllm"] = "heuristic"
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL for llm_engine='openai'.")
    llm_model: str = Field("default", description="Model name (openai, vllm) sent to the engine.")
    llm_schema_format: Literal["json_schema", "json_object"] = Field(
        "json_schema", description="How the OpenAI-compatible server takes a schema (json_object: llama.cpp server)."
    )
    llm_model_path: Path | None = Field(None, description="GGUF file for llm_engine='llama_cpp'.")
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = Field(60.0, gt=0)
    llm_replicas_min: int = Field(1, ge=0, description="Serve autoscaling of the llm deployment (cluster shape).")
    llm_replicas_max: int = Field(1, ge=1)
    llm_target_ongoing_requests: float = Field(8.0, gt=0)
    llm_max_ongoing_requests: int = Field(
        64, ge=1, description="Concurrent calls one llm replica accepts (continuous-batching engines want many)."
    )
    llm_num_gpus: float = Field(0.0, ge=0, description="GPUs per llm replica (1 for vLLM on a GPU node).")

    @field_validator("api_keys")
    @classmethod
    def _tenants_are_ids(cls, keys: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for tenant in keys:
            check_id(tenant)
        return keys

    def to_env(self) -> dict[str, str]:
        """These settings as ``MNEMOFLOW_*`` variables, so a child process (the Faust worker) sees the same."""
        env = {}
        for name, value in self.model_dump(mode="json", exclude_none=True).items():
            if name == "api_keys":
                value = {tenant: key.get_secret_value() for tenant, key in self.api_keys.items()}
            elif name == "llm_api_key" and self.llm_api_key is not None:
                value = self.llm_api_key.get_secret_value()
            env[f"MNEMOFLOW_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
        return env

    @property
    def shard_partitions(self) -> int:
        return self.tool_results_partitions or self.session_shards

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = os.environ.get("MNEMOFLOW_CONFIG", "mnemoflow.toml")
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
