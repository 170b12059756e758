"""Traces on the real stack (Apache Kafka, the Faust worker, Ray shards, Serve api and extractor): each process
writes its spans to a JSON-lines file (``otel_span_dir``), and one trace id runs from the API request through the
worker's L0 write and L1 run to the extractor's pass that stored the atoms, and from a tool-result submission to
the shard's sync."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mnemoflow.cli.stack import Stack
from mnemoflow.config import Settings
from mnemoflow.memory.l1.records import RecordLog
from mnemoflow.storage import LocalFileStore
from streams.broker import free_port
from streams.broker_kafka import EmbeddedKafka

pytestmark = pytest.mark.integration

TENANT, KEY = "acme", "key-acme"
AUTH = {"Authorization": f"Bearer {KEY}"}
TURNS_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TOOLS_TRACE = "0af7651916cd43dd8448eb211c80319c"
TURNS = [
    "I am a glassblower living in Quixotevale and I keep a pet axolotl named Zorblatt",
    "Please always answer me in Portuguese, my favourite tea is Xanthoria oolong",
    "My daughter Pemberwick starts violin lessons next Tuesday",
]


@pytest.fixture(scope="module")
def stack(apache_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("traces"),
        kafka_bootstrap=apache_kafka.bootstrap,
        api_port=0,
        api_keys={TENANT: KEY},
        embedder="hashing",
        session_shards=2,
        worker_session_timeout=8,
        worker_metrics_port=free_port(),
        otel_span_dir=tmp_path_factory.mktemp("spans"),
    )
    st = Stack(settings)
    st.start()
    yield st
    st.stop()


def spans_of(folder: Path, trace_id: str) -> list[dict[str, Any]]:
    found = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                span = json.loads(line)
                if span["trace_id"] == trace_id:
                    found.append(span)
    return found


def wait_for(folder: Path, trace_id: str, names: set[str], timeout: float = 240) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        spans = spans_of(folder, trace_id)
        if names <= {s["name"] for s in spans} or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


def test_one_trace_id_runs_from_the_api_through_kafka_to_the_stored_atoms_and_the_shard(stack: Stack) -> None:
    assert stack.info is not None and stack.settings.otel_span_dir is not None
    folder = stack.settings.otel_span_dir
    with httpx.Client(base_url=stack.info.api_url, headers=AUTH, timeout=60) as api:
        turns = [
            {"message_id": f"m{i}", "user": "ana", "session": "s1", "role": "user", "content": text}
            for i, text in enumerate(TURNS)
        ]
        caller = {"traceparent": f"00-{TURNS_TRACE}-b7ad6b7169203331-01"}  # the agent's own trace goes on
        assert api.post("/v1/turns", json={"turns": turns}, headers=caller).status_code == 202
        result = {"tool_call_id": "c1", "session": "s1", "tool_name": "bash", "content": "total 0\n"}
        caller = {"traceparent": f"00-{TOOLS_TRACE}-00f067aa0ba902b7-01"}
        assert api.post("/v1/tool-results", json={"results": [result]}, headers=caller).status_code == 202

    wanted = {"POST /v1/turns", "mnemoflow.worker.l0_write", "mnemoflow.worker.l1_run", "mnemoflow.extractor.l1_pass"}
    spans = wait_for(folder, TURNS_TRACE, wanted)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    assert wanted <= set(by_name), f"spans of the trace: {sorted(by_name)}; files: {sorted(folder.iterdir())}"
    services = {name: {s["service"] for s in group} for name, group in by_name.items()}
    assert services["POST /v1/turns"] == {"mnemoflow-api"}
    assert services["mnemoflow.worker.l0_write"] == services["mnemoflow.worker.l1_run"] == {"mnemoflow-worker"}
    assert services["mnemoflow.extractor.l1_pass"] == {"mnemoflow-extractor"}
    [api_span] = by_name["POST /v1/turns"]
    assert api_span["parent_span_id"] == "b7ad6b7169203331"
    assert {s["parent_span_id"] for s in by_name["mnemoflow.worker.l0_write"]} == {api_span["span_id"]}
    runs = {s["span_id"] for s in by_name["mnemoflow.worker.l1_run"]}
    assert {s["parent_span_id"] for s in by_name["mnemoflow.extractor.l1_pass"]} <= runs
    # the atoms the passes say they stored are ana's atoms
    stored = {a for s in by_name["mnemoflow.extractor.l1_pass"] for a in s["attributes"]["mnemoflow.l1.atom_ids"]}
    records = {r.id for r in RecordLog(LocalFileStore(stack.settings.data_dir), TENANT, "ana").read(live_only=False)}
    assert stored and stored <= records

    tools = wait_for(
        folder, TOOLS_TRACE, {"POST /v1/tool-results", "mnemoflow.worker.offload_write", "mnemoflow.shard.sync"}
    )
    services = {s["name"]: s["service"] for s in tools}
    assert services == {
        "POST /v1/tool-results": "mnemoflow-api",
        "mnemoflow.worker.offload_write": "mnemoflow-worker",
        "mnemoflow.shard.sync": "mnemoflow-shard",
    }
    for span in spans_of(folder, TURNS_TRACE) + tools:  # no content, no user id left the processes
        assert "Zorblatt" not in json.dumps(span) and '"ana"' not in json.dumps(span)
