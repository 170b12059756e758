"""Traces of one request across the planes: OpenTelemetry spans, off unless configured.

Off (the default): :func:`setup_tracing` makes no tracer provider and returns None, and the wiring hands None on, so
a plane's only cost is a ``tracing is None`` check per batch. On (``MNEMOFLOW_OTEL_ENDPOINT``, or a span folder for
tests): each plane (``api``, ``worker``, ``shard``, ``extractor``) has its own provider, service name
``mnemoflow-<plane>``, exporting through a batch processor. Nothing here touches OpenTelemetry's global provider,
so a host application's own tracing is left alone (STYLE 15: observability as a port, OpenTelemetry only when a
tracer is passed in).

The context crosses Kafka as W3C ``traceparent`` record headers (:func:`inject_headers`, :func:`extract_headers`) and
crosses Ray actor and Serve calls as a traceparent string argument (:func:`traceparent`, :func:`from_traceparent`).
Spans carry tenants, counts and atom ids: never memory content, and no user or session ids (an erase must leave
nothing of a user in the span files either).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

    from mnemoflow.config import Settings

Plane = Literal["api", "worker", "shard", "extractor"]
Headers = list[tuple[str, bytes]]
"""Kafka record headers as aiokafka and faust take them."""

TRACEPARENT = "traceparent"
TRACE_HEADERS = frozenset({TRACEPARENT, "tracestate"})
_PROPAGATOR = TraceContextTextMapPropagator()  # stateless: W3C traceparent and tracestate


class HasHeaders(Protocol):
    """A record as the handlers see it (:class:`mnemoflow.handlers.RawRecord`)."""

    @property
    def key(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None: ...


def inject_headers(context: Context | None = None) -> Headers:
    """The context (default: the current one) as Kafka headers; empty when it holds no valid span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return [(name, value.encode()) for name, value in carrier.items()]


def _header(headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None, name: str) -> bytes | None:
    if not headers:
        return None
    if isinstance(headers, Mapping):
        return headers.get(name)
    for key, value in headers:
        if key == name:
            return value
    return None


def extract_headers(headers: Sequence[tuple[str, bytes]] | Mapping[str, bytes] | None) -> Context | None:
    """The context a record's headers carry, or None (no or malformed ``traceparent``)."""
    parent = _header(headers, TRACEPARENT)
    if parent is None:
        return None
    carrier = {TRACEPARENT: parent.decode("ascii", "replace")}
    state = _header(headers, "tracestate")
    if state is not None:
        carrier["tracestate"] = state.decode("ascii", "replace")
    return _valid(_PROPAGATOR.extract(carrier))


def traceparent(context: Context | None = None) -> str | None:
    """The W3C traceparent of the context (default: the current one), for a Ray call's argument."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    return carrier.get(TRACEPARENT)


def from_traceparent(value: str | None) -> Context | None:
    """The context a traceparent string names, or None."""
    return _valid(_PROPAGATOR.extract({TRACEPARENT: value})) if value else None


def _valid(context: Context) -> Context | None:
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class Tracing:
    """The spans of one plane, made by its own provider (tests give it an in-memory exporter: :meth:`to`)."""

    def __init__(self, provider: TracerProvider, plane: str) -> None:
        self.provider, self.plane = provider, plane
        self._tracer = provider.get_tracer("mnemoflow")

    @classmethod
    def to(cls, exporter: SpanExporter, plane: str, *, batch: bool = True, sample_ratio: float = 1.0) -> Tracing:
        """A plane's tracing exporting to ``exporter``: batched (a background thread) or at each span's end.

        ``sample_ratio`` samples new traces only; a span whose parent came over Kafka or Ray follows its parent's
        decision, so a trace is either whole or absent."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

        resource = Resource.create({"service.name": f"mnemoflow-{plane}", "service.namespace": "mnemoflow"})
        provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(sample_ratio)))
        provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
        return cls(provider, plane)

    @contextmanager
    def span(
        self,
        name: str,
        parent: Context | None = None,
        attributes: Mapping[str, Any] | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[Link] = (),
    ) -> Iterator[Span]:
        """A span made current for the block, child of ``parent`` (None: of the current context, if any)."""
        with self._tracer.start_as_current_span(
            name, context=parent, kind=kind, attributes=attributes, links=links
        ) as span:
            yield span

    @contextmanager
    def batch(
        self, name: str, records: Sequence[HasHeaders], attributes: Mapping[str, Any] | None = None
    ) -> Iterator[BatchTrace]:
        """Spans over a consumer batch whose records came from several requests: one span per distinct parent
        the records' headers name (the records without one share a span of a new trace), each covering the
        whole batch's work, since the batch is written as one group commit. Not made current: the batch's
        calls onward name the traces they continue (:meth:`BatchTrace.traceparents`)."""
        spans: dict[bytes | None, Span] = {}
        of_key: dict[bytes | None, Span] = {}
        for record in records:
            raw = _header(record.headers, TRACEPARENT)
            span = spans.get(raw)
            if span is None:
                parent = extract_headers(record.headers) if raw is not None else None
                span = spans[raw] = self._tracer.start_span(
                    name, context=parent or Context(), kind=SpanKind.CONSUMER, attributes=attributes
                )
            of_key[record.key] = span  # the last record of a key (a user, a session) names its trace onward
        done = BatchTrace(list(spans.values()), of_key)
        try:
            yield done
        except BaseException as exc:
            for span in done.spans:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
        finally:
            for span in done.spans:
                span.end()

    def shutdown(self) -> None:
        """Export what is buffered and stop (the provider also does this when the process exits)."""
        self.provider.shutdown()


@dataclass(frozen=True, slots=True)
class BatchTrace:
    """The spans of one batch (:meth:`Tracing.batch`): distinct parents in order of first appearance."""

    spans: list[Span]
    _of_key: dict[bytes | None, Span]

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        for span in self.spans:
            span.set_attributes(attributes)

    def traceparents(self) -> list[str]:
        """Every span's traceparent: a call onward continues the first and links the others."""
        return [tp for span in self.spans if (tp := traceparent(trace.set_span_in_context(span))) is not None]

    def headers_for(self, key: str) -> Headers | None:
        """Headers of the span of the batch's last record with this key (a job for the user continues it)."""
        span = self._of_key.get(key.encode())
        return inject_headers(trace.set_span_in_context(span)) if span is not None else None


def links_to(traceparents: Sequence[str]) -> list[Link]:
    """Links to the spans these traceparents name (the other traces a batched call continues)."""
    links = []
    for value in traceparents:
        context = from_traceparent(value)
        if context is not None:
            links.append(Link(trace.get_current_span(context).get_span_context()))
    return links


@dataclass(frozen=True)
class TraceExport:
    """Where a plane's spans go, as picklable values (a Ray actor is built from them in its own process).

    ``endpoint``: an OTLP/HTTP collector (``http://host:4318``; ``/v1/traces`` is added). ``span_dir``: each
    process appends its spans as JSON lines to ``<span_dir>/<plane>-<pid>.jsonl`` (tests and debugging)."""

    endpoint: str | None = None
    span_dir: Path | None = None
    sample_ratio: float = 1.0

    @classmethod
    def from_settings(cls, settings: Settings) -> TraceExport | None:
        """None when tracing is off (neither an endpoint nor a span folder is configured)."""
        if settings.otel_endpoint is None and settings.otel_span_dir is None:
            return None
        span_dir = settings.otel_span_dir.resolve() if settings.otel_span_dir is not None else None
        return cls(settings.otel_endpoint, span_dir, settings.otel_sample_ratio)

    def start(self, plane: Plane) -> Tracing:
        if self.span_dir is not None:
            return Tracing.to(
                SpanFileExporter(self.span_dir, plane), plane, batch=False, sample_ratio=self.sample_ratio
            )
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:  # pragma: no cover - the runtime extra installs it
            raise ImportError(
                "OTLP export needs opentelemetry-exporter-otlp-proto-http: pip install 'mnemoflow[otel]'"
            ) from exc
        assert self.endpoint is not None
        url = self.endpoint.rstrip("/")
        url = url if url.endswith("/v1/traces") else url + "/v1/traces"
        return Tracing.to(OTLPSpanExporter(endpoint=url), plane, sample_ratio=self.sample_ratio)


def setup_tracing(settings: Settings, plane: Plane) -> Tracing | None:
    """The plane's tracing from settings, or None (off: no provider, no exporter, no thread)."""
    export = TraceExport.from_settings(settings)
    return export.start(plane) if export is not None else None


class SpanFileExporter(SpanExporter):
    """Appends finished spans as JSON lines (one file per process, so processes never interleave a line)."""

    def __init__(self, folder: Path, plane: str) -> None:
        self.path = Path(folder) / f"{plane}-{os.getpid()}.jsonl"

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(s), separators=(",", ":")) + "\n" for s in spans)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """A finished span as plain JSON: ids in hex as OTLP/JSON writes them."""
    context, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "service": span.resource.attributes.get("service.name"),
        "trace_id": f"{context.trace_id:032x}" if context else None,
        "span_id": f"{context.span_id:016x}" if context else None,
        "parent_span_id": f"{parent.span_id:016x}" if parent else None,
        "links": [f"{link.context.trace_id:032x}" for link in span.links],
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "status": span.status.status_code.name,
        "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()},
    }
