"""Whether the environment asks `piwf-host` to trace (pure: reads a mapping, imports nothing).

`piwf-host` traces with a provider of its own (`HostConfig(tracer_provider="env")`) when `--otel`
is given, or when one of the standard variables that point spans somewhere is set:
`OTEL_TRACES_EXPORTER` (other than `none`), `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. `OTEL_SDK_DISABLED=true` turns it off, `--otel` included,
as it does for any OpenTelemetry SDK.
"""

from __future__ import annotations

from collections.abc import Mapping

#: Variables whose presence asks for traces.
REQUESTING = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def tracing_requested(environ: Mapping[str, str], *, flag: bool = False) -> bool:
    if sdk_disabled(environ):
        return False
    if flag or any(environ.get(name, "").strip() for name in REQUESTING):
        return True
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    return bool(exporters) and exporters != "none"


def otel_installed() -> bool:
    """Whether the `otel` extra's packages can be imported (looked up, not imported)."""
    from importlib.util import find_spec

    try:
        return all(find_spec(name) is not None for name in (
            "opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"))
    except ModuleNotFoundError:  # a parent package is missing
        return False
