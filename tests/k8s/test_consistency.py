"""What a schema cannot see: the rendered manifests agree with the code (topics, partitions, consumer group,
Serve builders) and with the rules of the cluster shape (Ray token auth everywhere, non-root, read-only root
filesystems, requests and limits, probes on the dependency-aware health)."""

from __future__ import annotations

from typing import Any

import k8scheck
import pytest
import yaml

from mnemoflow.config import (
    TOPIC_COMMANDS,
    TOPIC_DEAD_LETTERS,
    TOPIC_JOBS,
    TOPIC_TOOL_RESULTS,
    TOPIC_TURNS,
    WORKER_GROUP,
    Settings,
)

# A cold tools build (fixture k8s_bin) may take longer than the suite default of 900 s.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

OVERLAYS = k8scheck.OVERLAYS


def _objs(rendered: dict[str, str], overlay: str) -> list[dict[str, Any]]:
    return k8scheck.objects(rendered[overlay])


def _one(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def _settings(objs: list[dict[str, Any]]) -> dict[str, str]:
    return _one(objs, "ConfigMap", "mnemoflow-settings")["data"]


def _pod_specs(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    specs = {"worker": _one(objs, "Deployment", "mnemoflow-worker")["spec"]["template"]["spec"]}
    cluster = _one(objs, "RayService")["spec"]["rayClusterConfig"]
    specs["ray-head"] = cluster["headGroupSpec"]["template"]["spec"]
    for group in cluster["workerGroupSpecs"]:
        specs[f"ray-{group['groupName']}"] = group["template"]["spec"]
    return specs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_kafka_topic_for_every_topic_the_code_uses(rendered: dict[str, str], overlay: str) -> None:
    """streams.topics.topic_partitions (what the embedded stack creates) is the truth: same names, same counts."""
    from streams.topics import topic_partitions

    objs = _objs(rendered, overlay)
    topics = {o["spec"]["topicName"]: o["spec"] for o in objs if o["kind"] == "KafkaTopic"}
    settings = _settings(objs)
    as_configured = Settings(**{k.removeprefix("MNEMOFLOW_").lower(): v for k, v in settings.items()})
    assert {name: spec["partitions"] for name, spec in topics.items()} == topic_partitions(as_configured)
    assert {TOPIC_TURNS, TOPIC_TOOL_RESULTS, TOPIC_JOBS, TOPIC_DEAD_LETTERS} <= set(topics)
    assert topics[TOPIC_TURNS]["partitions"] == int(settings["MNEMOFLOW_TURNS_PARTITIONS"])
    assert topics[TOPIC_JOBS]["partitions"] == topics[TOPIC_TURNS]["partitions"]  # co-partitioned
    assert topics[TOPIC_COMMANDS]["partitions"] == topics[TOPIC_TURNS]["partitions"]  # co-partitioned
    assert topics[TOPIC_TOOL_RESULTS]["partitions"] == int(settings["MNEMOFLOW_TOOL_RESULTS_PARTITIONS"])
    brokers = sum(
        p["spec"]["replicas"] for p in objs if p["kind"] == "KafkaNodePool" and "broker" in p["spec"]["roles"]
    )
    for name, spec in topics.items():
        assert spec["replicas"] <= brokers, name
        assert spec["replicas"] == int(settings["MNEMOFLOW_TOPIC_REPLICATION"]), name
        isr = int(spec["config"]["min.insync.replicas"])
        assert isr == 1 if spec["replicas"] == 1 else 1 < isr < spec["replicas"], name  # acks=all survives a loss


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_scales_the_worker_group_up_to_the_partitions(rendered: dict[str, str], overlay: str) -> None:
    objs = _objs(rendered, overlay)
    scaled = _one(objs, "ScaledObject")
    turns = next(o for o in objs if o["kind"] == "KafkaTopic" and o["spec"]["topicName"] == TOPIC_TURNS)
    assert scaled["spec"]["maxReplicaCount"] == turns["spec"]["partitions"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "mnemoflow-worker"
    for trigger in scaled["spec"]["triggers"]:
        assert trigger["type"] == "kafka" and trigger["metadata"]["consumerGroup"] == WORKER_GROUP
    assert {t["metadata"]["topic"] for t in scaled["spec"]["triggers"]} >= {TOPIC_TURNS}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_serve_config_names_our_builders(rendered: dict[str, str], overlay: str) -> None:
    from ray.serve.schema import ServeDeploySchema

    from serving import builder

    service = _one(_objs(rendered, overlay), "RayService")
    config = ServeDeploySchema.parse_obj(yaml.safe_load(service["spec"]["serveConfigV2"]))
    names = {app.name for app in config.applications}
    assert {builder.API_APP, builder.EXTRACTOR_APP} <= names
    for app in config.applications:
        module, attr = app.import_path.split(":")
        assert module == "serving.builder" and callable(getattr(builder, attr)), app.import_path
        builder.BuilderArgs.model_validate(app.args)  # the args the builder will get are valid
    api = next(a for a in config.applications if a.name == builder.API_APP)
    assert api.route_prefix == "/" and api.args.get("detached") is True
    engine = _settings(_objs(rendered, overlay))["MNEMOFLOW_LLM_ENGINE"]
    assert (builder.LLM_APP in names) is (engine != "heuristic")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_ray_token_auth_on_every_ray_pod_and_worker(rendered: dict[str, str], overlay: str) -> None:
    for name, spec in _pod_specs(_objs(rendered, overlay)).items():
        env = {e["name"]: e for e in spec["containers"][0].get("env", [])}
        assert env["RAY_AUTH_MODE"]["value"] == "token", name
        ref = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "mnemoflow-ray-token", "key": "auth_token"}, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_run_non_root_read_only_with_requests_and_limits(rendered: dict[str, str], overlay: str) -> None:
    for name, spec in _pod_specs(_objs(rendered, overlay)).items():
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", name
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), name
            assert "memory" in c["resources"]["limits"], name
            mounts = {m["mountPath"] for m in c["volumeMounts"]}
            assert {"/data", "/tmp"} <= mounts, name  # shared layers; the only writable scratch


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_serving_pods_probe_the_dependency_aware_health(rendered: dict[str, str], overlay: str) -> None:
    for name, spec in _pod_specs(_objs(rendered, overlay)).items():
        if name in ("worker", "ray-head"):  # no HTTP server / KubeRay's own probes (see rayservice.yaml)
            continue
        c = spec["containers"][0]
        assert c["readinessProbe"]["httpGet"]["path"] == "/health", name
        assert c["livenessProbe"]["httpGet"]["path"] == "/health/live", name


def test_small_has_no_gpu_and_production_has_one(rendered: dict[str, str]) -> None:
    small = _pod_specs(_objs(rendered, "small"))
    production = _pod_specs(_objs(rendered, "production"))
    assert "ray-gpu" not in small
    assert production["ray-gpu"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    pools = [o for o in _objs(rendered, "production") if o["kind"] == "KafkaNodePool"]
    assert sorted((p["metadata"]["name"], p["spec"]["replicas"]) for p in pools) == [("broker", 3), ("controller", 3)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_shared_volume_and_secrets(rendered: dict[str, str], overlay: str) -> None:
    objs = _objs(rendered, overlay)
    assert _one(objs, "PersistentVolumeClaim", "mnemoflow-data")["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "MNEMOFLOW_API_KEYS" in _one(objs, "Secret", "mnemoflow-api-keys")["stringData"]
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    deny = policies["default-deny"]["spec"]
    assert deny["podSelector"] == {} and sorted(deny["policyTypes"]) == ["Egress", "Ingress"]
    assert len([o for o in objs if o["kind"] == "PodDisruptionBudget"]) >= 3
