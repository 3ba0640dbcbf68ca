"""OpenTelemetry traces of runs (the `otel` extra: `pip install piwf_actors[otel]`); docs/tracing.md.

Three modules, by what they may import:

- `ids`: the trace and span ids, derived from run, attempt, wait and request
  ids, and the W3C `traceparent` of a node attempt. Plain Python: the worker
  imports it to hand shell commands and callbacks their trace context.
- `spans`: the pure step function that turns a run's committed events into
  finished span records (`SpanRecord`), with the times the events carry.
- `otel`: the only module that imports `opentelemetry`: it builds the host's
  own TracerProvider from the `OTEL_*` variables, or uses the application's,
  and emits span records with the derived ids. It is imported only when a
  host traces (`HostConfig(tracer_provider=…)`).

Importing this package imports nothing of the three.
"""
