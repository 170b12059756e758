"""Traces across Kafka, driven inline: the API route's span, the context in the records' headers, the worker's
L0 and offload writes, the shard call and the extractor's pass over real files and a real SQLite index, with the
SDK's in-memory exporter. Off by default: no provider, no header, no span."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mnemoflow.config import TOPIC_JOBS, TOPIC_TOOL_RESULTS, TOPIC_TURNS, Settings
from mnemoflow.handlers import (
    HandlerContext,
    JobsOutcome,
    L1JobsHandler,
    RawRecord,
    ToolResultsHandler,
    TurnsHandler,
    WriterThread,
)
from mnemoflow.memory.l1.schedule import L1Scheduler
from mnemoflow.offload.entries import SessionAppend
from mnemoflow.retry import RetryPolicy
from mnemoflow.storage import LocalFileStore
from mnemoflow.testing import ListBus, files_holding
from mnemoflow.tracing import (
    SpanFileExporter,
    TraceExport,
    Tracing,
    extract_headers,
    from_traceparent,
    inject_headers,
    setup_tracing,
    traceparent,
)
from serving.api import create_api

KEY = {"Authorization": "Bearer key-acme"}
TURNS = [
    "I am a glassblower living in Quixotevale and I keep a pet axolotl named Zorblatt",
    "Please always answer me in Portuguese, my favourite tea is Xanthoria oolong",
    "My daughter Pemberwick starts violin lessons next Tuesday",
]


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def plane(exporter: InMemorySpanExporter, name: str) -> Tracing:
    return Tracing.to(exporter, name, batch=False)


def trace_id(span: ReadableSpan) -> int:
    return span.get_span_context().trace_id


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def records(bus: ListBus, topic: str) -> Iterator[RawRecord]:
    offset = 0
    for (sent_topic, batch), headers in zip(bus.sent, bus.headers, strict=True):
        for key, value, partition in batch:
            if sent_topic == topic:
                offset += 1
                yield RawRecord(value, key.encode(), topic, partition or 0, offset, headers)


def test_headers_carry_the_context_both_ways(spans: InMemorySpanExporter) -> None:
    tracing = plane(spans, "api")
    with tracing.span("request") as span:
        headers = inject_headers()
        value = traceparent()
    assert [name for name, _ in headers] == ["traceparent"] and value == headers[0][1].decode()
    expected = span.get_span_context()
    for carried in (extract_headers(headers), extract_headers(dict(headers)), from_traceparent(value)):
        assert carried is not None
        got = trace.get_current_span(carried).get_span_context()
        assert (got.trace_id, got.span_id, got.is_remote) == (expected.trace_id, expected.span_id, True)
    assert inject_headers() == [] and traceparent() is None  # outside any span
    for nothing in (None, [], [("other", b"x")], [("traceparent", b"00-garbage")], {"traceparent": b""}):
        assert extract_headers(nothing) is None
    assert from_traceparent(None) is None and from_traceparent("junk") is None


def test_tracing_is_off_by_default_and_makes_no_span_nor_header(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    assert TraceExport.from_settings(settings) is None and setup_tracing(settings, "worker") is None
    bus = ListBus()
    client = TestClient(create_api(Settings(data_dir=tmp_path, api_keys={"acme": "key-acme"}), bus))
    body = {"turns": [{"message_id": "m1", "user": "ana", "session": "s1", "role": "user", "content": TURNS[0]}]}
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert client.post("/v1/turns", json=body, headers={**KEY, "traceparent": caller}).status_code == 202
    assert bus.headers == [None]  # not even the caller's context is passed on
    files = LocalFileStore(tmp_path)
    ctx = HandlerContext(_clock(), RetryPolicy(attempts=1), WriterThread())
    outcome = asyncio.run(TurnsHandler(ctx, files, L1Scheduler(files)).handle(list(records(bus, TOPIC_TURNS))))
    assert outcome.written == 1 and outcome.jobs and all(m.headers is None for m in outcome.messages())
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)  # nobody set a global provider


def test_one_trace_from_the_api_to_the_l0_write_and_the_stored_atoms(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, api_keys={"acme": "key-acme"}, embedder="hashing", session_shards=2)
    bus = ListBus()
    client = TestClient(create_api(settings, bus, tracing=plane(spans, "api")))
    body = {
        "turns": [
            {"message_id": f"m{i}", "user": "ana", "session": "s1", "role": "user", "content": text}
            for i, text in enumerate(TURNS)
        ]
    }
    assert client.post("/v1/turns", json=body, headers=KEY).status_code == 202
    [api_span] = named(spans, "POST /v1/turns")
    assert api_span.attributes["mnemoflow.events"] == 3 and api_span.resource.attributes["service.name"] == (
        "mnemoflow-api"
    )

    # the worker: the turns' records carry the API span's context; the L0 write is its child, and the L1 job the
    # write publishes carries the write's context on
    files = LocalFileStore(data)
    scheduler = L1Scheduler(files)
    worker = HandlerContext(_clock(), RetryPolicy(attempts=1), WriterThread(), tracing=plane(spans, "worker"))
    turns = asyncio.run(TurnsHandler(worker, files, scheduler).handle(list(records(bus, TOPIC_TURNS))))
    assert turns.written == 3 and [job.user for job in turns.jobs] == ["ana"]
    [l0] = named(spans, "mnemoflow.worker.l0_write")
    assert trace_id(l0) == trace_id(api_span) and l0.parent.span_id == api_span.get_span_context().span_id
    assert l0.attributes["mnemoflow.l0.written"] == 3 and l0.kind == trace.SpanKind.CONSUMER
    [job] = [m for m in turns.messages() if m.topic == TOPIC_JOBS]
    assert job.headers and trace.get_current_span(extract_headers(job.headers)).get_span_context().span_id == (
        l0.get_span_context().span_id
    )

    # the jobs agent runs the pass in the real extractor deployment class (off Serve), which stores the atoms
    server = _extractor(settings, plane(spans, "extractor"))
    reports: list[JobsOutcome] = []

    async def report(outcome: JobsOutcome) -> None:
        reports.append(outcome)

    async def run_jobs() -> JobsOutcome:
        jobs = L1JobsHandler(worker, scheduler, server_client(server), report=report)
        outcome = await jobs.handle([RawRecord(job.value, job.key, TOPIC_JOBS, 0, 1, job.headers)])
        await jobs.drain()
        return outcome

    assert asyncio.run(run_jobs()).parked == []
    # the first turn starts a run (warm-up), the others make a catch-up run; each is reported when it ends
    replies = [reply for outcome in reports for reply in outcome.runs[("acme", "ana")]]
    assert len(replies) == len(reports) == 2
    assert all(r.ok and r.result is not None for r in replies) and sum(r.result.stored for r in replies) > 0
    runs, passes = named(spans, "mnemoflow.worker.l1_run"), named(spans, "mnemoflow.extractor.l1_pass")
    assert len(runs) == len(passes) == len(replies)
    assert {trace_id(s) for s in runs + passes} == {trace_id(api_span)}
    assert all(run.parent.span_id == l0.get_span_context().span_id for run in runs)
    for run, stored, reply in zip(runs, passes, replies, strict=True):
        assert stored.parent.span_id == run.get_span_context().span_id
        assert stored.resource.attributes["service.name"] == "mnemoflow-extractor"
        assert stored.attributes["mnemoflow.l1.stored"] == run.attributes["mnemoflow.l1.stored"] == reply.result.stored
        assert list(stored.attributes["mnemoflow.l1.atom_ids"]) == reply.result.atom_ids[:100]
    atom_ids = [a for stored in passes for a in stored.attributes["mnemoflow.l1.atom_ids"]]
    assert atom_ids and len(server.store.get("acme", "ana", atom_ids)) == len(atom_ids)
    for span in spans.get_finished_spans():  # ids and counts only: nothing a user said, no user id
        text = json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in span.attributes.items()})
        assert "Zorblatt" not in text and "ana" not in text.replace("mnemoflow", "")


def test_tool_results_continue_to_the_shard_call(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    settings = Settings(data_dir=tmp_path, api_keys={"acme": "key-acme"}, session_shards=2)
    bus = ListBus()
    client = TestClient(create_api(settings, bus, tracing=plane(spans, "api")))
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"  # an agent framework's own trace
    for call, session in (("c1", "s1"), ("c2", "s2")):
        body = {"results": [{"tool_call_id": call, "session": session, "tool_name": "bash", "content": "out"}]}
        headers = {**KEY, "traceparent": caller} if call == "c1" else KEY
        assert client.post("/v1/tool-results", json=body, headers=headers).status_code == 202
    first, second = named(spans, "POST /v1/tool-results")
    assert f"{trace_id(first):032x}" == caller.split("-")[1] and trace_id(second) != trace_id(first)

    told: list[tuple[list[SessionAppend], list[str]]] = []

    async def notify(appended: list[SessionAppend], *, traceparents: Any = ()) -> None:
        told.append((appended, list(traceparents)))

    worker = HandlerContext(_clock(), RetryPolicy(attempts=1), WriterThread(), tracing=plane(spans, "worker"))
    handler = ToolResultsHandler(worker, LocalFileStore(tmp_path), notify)
    outcome = asyncio.run(handler.handle(list(records(bus, TOPIC_TOOL_RESULTS))))
    assert len(outcome.appended) == 2
    writes = named(spans, "mnemoflow.worker.offload_write")  # one per trace in the batch
    assert sorted(trace_id(s) for s in writes) == sorted([trace_id(first), trace_id(second)])
    [(_, parents)] = told
    assert [p.split("-")[2] for p in parents] == [f"{s.get_span_context().span_id:016x}" for s in writes]

    # the shard actor class (off Ray) continues the first and links the second
    from actors.shard import SessionShard

    shard = SessionShard(0, str(tmp_path), 600.0, 100)
    shard._tracing = plane(spans, "shard")
    updates = [
        (a.tenant, a.session, [e.model_dump_json() for e in a.new_entries], a.last_seq)
        for (a,) in zip(outcome.appended)
    ]
    assert asyncio.run(shard.sync(updates, parents)) == 2
    [sync] = named(spans, "mnemoflow.shard.sync")
    assert trace_id(sync) == trace_id(first) and [link.context.trace_id for link in sync.links] == [trace_id(second)]


def test_the_span_folder_exporter_writes_one_json_line_per_span(tmp_path: Path) -> None:
    export = TraceExport.from_settings(Settings(data_dir=tmp_path, otel_span_dir=tmp_path / "spans"))
    assert export is not None
    tracing = export.start("worker")
    with tracing.span("outer", attributes={"mnemoflow.tenant": "acme"}), tracing.span("inner"):
        pass
    [path] = (tmp_path / "spans").iterdir()
    inner, outer = (json.loads(line) for line in path.read_text().splitlines())
    assert (inner["name"], outer["name"], inner["service"]) == ("inner", "outer", "mnemoflow-worker")
    assert inner["trace_id"] == outer["trace_id"] and inner["parent_span_id"] == outer["span_id"]
    assert outer["attributes"] == {"mnemoflow.tenant": "acme"} and not files_holding(tmp_path, [b"Zorblatt"])
    assert isinstance(SpanFileExporter(tmp_path, "api").path, Path)


def test_an_endpoint_exports_spans_by_otlp_http_to_v1_traces(tmp_path: Path) -> None:
    """A collector stand-in on loopback gets the protobuf request OTLP/HTTP sends, once the batch is flushed."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[tuple[str, str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        tracing = setup_tracing(Settings(data_dir=tmp_path, otel_endpoint=endpoint), "extractor")
        assert tracing is not None
        with tracing.span("mnemoflow.extractor.l1_pass", attributes={"mnemoflow.l1.stored": 2}):
            pass
        tracing.shutdown()  # flushes the batch processor
    finally:
        server.shutdown()
    [(path, content_type, body)] = received
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf")
    request = ExportTraceServiceRequest.FromString(body)
    [resource_spans] = request.resource_spans
    service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
    [span] = [span for scope in resource_spans.scope_spans for span in scope.spans]
    assert (service, span.name) == ("mnemoflow-extractor", "mnemoflow.extractor.l1_pass")


def _clock() -> Any:
    from datetime import UTC, datetime

    from mnemoflow.testing import ManualClock

    return ManualClock(datetime(2026, 5, 4, 9, 0, tzinfo=UTC))


def _extractor(settings: Settings, tracing: Tracing) -> Any:
    from serving.extractor import ExtractorServer

    server = ExtractorServer(settings.model_copy(update={"extractor_nice": 0}))  # in the test's own process
    server._tracing = tracing
    return server


def server_client(server: Any) -> Any:
    """The worker's real ``ExtractorClient.run``, its Serve handle replaced by what the deployment's batched
    ``run`` does with each request (``serve.batch`` needs a replica to run in)."""
    from serving.extractor import ExtractorClient

    class Method:
        def remote(self, request: tuple[Any, ...]) -> Any:
            assert len(request) == 3  # (tenant, user, traceparent): the worker traces
            return server._run_user(*request)

    client = ExtractorClient.__new__(ExtractorClient)
    client._handle = type("Handle", (), {"run": Method()})()
    return client.run
