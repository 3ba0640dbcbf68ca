"""The one module that imports opentelemetry: the host's TracerProvider and the emission of spans.

Imported only when a host traces (`HostConfig(tracer_provider=…)`): a host
without it, or without the `otel` extra installed, never loads opentelemetry.

Which provider (`provider_for`):
- an application's own TracerProvider object: used as it is (its sampler,
  processors, exporters, resource); the host never shuts it down, it only
  flushes it when it stops;
- `"global"`: the application's global provider,
  `opentelemetry.trace.get_tracer_provider()`, read when the host starts;
- `"env"`: a provider of the host's own, configured by the standard `OTEL_*`
  variables (what `piwf-host` uses): the SDK reads `OTEL_SERVICE_NAME`,
  `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`, `OTEL_SDK_DISABLED`,
  `OTEL_BSP_*` and the exporter's `OTEL_EXPORTER_OTLP_*` itself; this module
  reads only `OTEL_TRACES_EXPORTER` (which exporters, default `otlp`) and
  the OTLP protocol (only http/protobuf ships with the extra). The service
  name defaults to `piwf-host`. The host shuts it down when it stops.

Spans keep the ids `piwf_actors.tracing.ids` derives (so a shell node's
`TRACEPARENT` names the span that is exported for it): the SDK's Tracer
draws ids from its `id_generator`, which is wrapped here, for the host's
tracer only, by one that hands out the chosen id of the span being started
and falls back to the provider's own generator otherwise. A provider that is
not the SDK's keeps its own ids (the spans are still emitted, with their
parents and times).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from piwf_actors.errors import HostError
from piwf_actors.tracing.env import EXPORTER_GROUP, exporter_names, exporter_problem, otlp_protocol
from piwf_actors.tracing.spans import SpanRecord

log = logging.getLogger(__name__)

#: The instrumentation scope of the host's spans.
SCOPE = "piwf_actors"
DEFAULT_SERVICE_NAME = "piwf-host"
#: How long a host's stop waits for its spans to be exported.
FLUSH_TIMEOUT_MS = 5000


# --- the provider ---------------------------------------------------------------------------------


def provider_for(setting: Any) -> tuple[Any, bool]:
    """(provider, owned) for `HostConfig.tracer_provider`; `owned`: the host made it and shuts it down."""
    if setting == "env":
        return provider_from_env(), True
    if setting == "global":
        return trace.get_tracer_provider(), False
    if isinstance(setting, str) or not hasattr(setting, "get_tracer"):
        raise HostError(f"tracer_provider must be a TracerProvider, 'global' or 'env', not {setting!r}")
    return setting, False


def check_setting(setting: Any) -> None:
    """Raise HostError for a setting `provider_for` would refuse, without making a provider."""
    if setting == "env":
        problem = exporter_problem(os.environ)
        if problem is not None:
            raise HostError(problem)
    elif setting != "global" and (isinstance(setting, str) or not hasattr(setting, "get_tracer")):
        provider_for(setting)  # raises


def provider_from_env() -> Any:
    """A TracerProvider configured by the `OTEL_*` variables (see the module docstring)."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, Any] = {}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes[SERVICE_NAME] = DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    for exporter in exporters_from_env():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def exporters_from_env() -> list[Any]:
    """The span exporters `OTEL_TRACES_EXPORTER` names (comma-separated; default `otlp`; `none`: none).
    Raises HostError naming one that cannot be built here (`env.exporter_problem`)."""
    problem = exporter_problem(os.environ)
    if problem is not None:
        raise HostError(problem)
    exporters: list[Any] = []
    for name in exporter_names(os.environ):
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp_proto_http" or (name == "otlp" and otlp_protocol(os.environ)[1] != "grpc"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
        else:  # grpc's ("otlp_proto_grpc", when installed) or another package's
            exporters.append(_exporter_entry_point("otlp_proto_grpc" if name == "otlp" else name))
    return exporters


def _exporter_entry_point(name: str) -> Any:
    from importlib.metadata import entry_points

    return next(iter(entry_points(group=EXPORTER_GROUP, name=name))).load()()


# --- chosen ids -----------------------------------------------------------------------------------


class _ChosenIds:
    """An SDK id generator that returns the ids set for the span being started in this thread, and
    the wrapped generator's otherwise (another thread's spans, or a chosen id already used)."""

    def __init__(self, fallback: Any) -> None:
        self.fallback = fallback
        self._chosen = threading.local()

    def choose(self, trace_id: int | None, span_id: int) -> None:
        self._chosen.trace_id, self._chosen.span_id = trace_id, span_id

    def clear(self) -> None:
        self._chosen.trace_id = self._chosen.span_id = None

    def generate_span_id(self) -> int:
        chosen = getattr(self._chosen, "span_id", None)
        if chosen:
            self._chosen.span_id = None
            return int(chosen)
        return int(self.fallback.generate_span_id())

    def generate_trace_id(self) -> int:
        chosen = getattr(self._chosen, "trace_id", None)
        if chosen:
            self._chosen.trace_id = None
            return int(chosen)
        return int(self.fallback.generate_trace_id())

    def is_trace_id_random(self) -> bool:
        # Derived ids are sha256 bits: as random as the generator's own.
        probe = getattr(self.fallback, "is_trace_id_random", None)
        return bool(probe()) if callable(probe) else False


def _chosen_ids(tracer: Any) -> _ChosenIds | None:
    """Wrap the SDK tracer's id generator once (the provider caches one tracer per scope, which
    two hosts in one process then share); None for a tracer that draws ids some other way."""
    current = getattr(tracer, "id_generator", None)
    if current is None:
        return None
    if not isinstance(current, _ChosenIds):
        current = _ChosenIds(current)
        tracer.id_generator = current
    return current


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class SpanEmitter:
    """Emits `SpanRecord`s through a provider's tracer, with their own ids, parents, links and times.

    Used from one thread at a time (the tracing actor's). `close` flushes (an application's
    provider) or shuts down (the host's own) the provider.
    """

    def __init__(self, provider: Any, *, owned: bool) -> None:
        self._provider = provider
        self._owned = owned
        self._tracer = provider.get_tracer(SCOPE)
        self._ids = _chosen_ids(self._tracer)
        self._sampler = getattr(self._tracer, "sampler", None)
        self._sampled: dict[int, bool] = {}

    def emit(self, records: Iterable[SpanRecord]) -> None:
        for record in records:
            self._emit(record)

    def _flags(self, trace_id: int, name: str) -> TraceFlags:
        """What the sampler decides for the trace's root, so its children are kept or dropped with it
        (a ratio sampler decides by trace id alone)."""
        sampled = self._sampled.get(trace_id)
        if sampled is None:
            sampled = True
            if self._sampler is not None:
                sampled = self._sampler.should_sample(otel_context.Context(), trace_id, name).decision.is_sampled()
            if len(self._sampled) > 10_000:
                self._sampled.clear()
            self._sampled[trace_id] = sampled
        return TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)

    def _emit(self, record: SpanRecord) -> None:
        flags = self._flags(record.trace_id, record.name)
        if record.parent_span_id is None:
            parent = otel_context.Context()  # a root: nothing of the emitting thread's context leaks in
        else:
            parent = trace.set_span_in_context(NonRecordingSpan(
                SpanContext(record.trace_id, record.parent_span_id, is_remote=False, trace_flags=flags)),
                otel_context.Context())
        links = [Link(SpanContext(link.trace_id, link.span_id, is_remote=True,
                                  trace_flags=TraceFlags(TraceFlags.SAMPLED)), link.attributes)
                 for link in record.links]
        attributes = {key: value for key, value in record.attributes.items() if value is not None}
        if self._ids is not None:
            self._ids.choose(record.trace_id if record.parent_span_id is None else None, record.span_id)
        try:
            span = self._tracer.start_span(record.name, context=parent, kind=SpanKind.INTERNAL,
                                           attributes=attributes, links=links, start_time=_ns(record.start))
        finally:
            if self._ids is not None:
                self._ids.clear()
        for name, at, event_attributes in record.events:
            span.add_event(name, {k: v for k, v in event_attributes.items() if v is not None}, timestamp=_ns(at))
        if record.error is not None:
            span.set_status(Status(StatusCode.ERROR, record.error))
        span.end(end_time=_ns(max(record.end, record.start)))

    def close(self) -> None:
        """Flush (an application's provider) or shut down (the host's own), waiting at most
        FLUSH_TIMEOUT_MS (and a second more for the SDK's own joins). Never raises.

        On a daemon thread joined for a bounded time: the SDK's BatchSpanProcessor ignores
        force_flush's timeout and waits for an export in flight, and an unreachable collector
        holds an export for its own timeout, retries included (~30 s): a host's stop must not wait
        for that. A flush still running when the host stops is abandoned with its spans.
        """
        closing = threading.Thread(target=self._close, name="piwf-tracing-flush", daemon=True)
        closing.start()
        closing.join(FLUSH_TIMEOUT_MS / 1000 + 1)
        if closing.is_alive():
            log.warning("tracing: the tracer provider did not finish exporting within %d ms; "
                        "spans still queued are lost", FLUSH_TIMEOUT_MS)

    def _close(self) -> None:
        try:
            if self._owned:
                self._provider.shutdown()
            else:
                flush = getattr(self._provider, "force_flush", None)
                if callable(flush):
                    flush(FLUSH_TIMEOUT_MS)
        except Exception:  # an exporter's failure must not spoil the host's stop
            log.warning("tracing: flushing the tracer provider failed", exc_info=True)
