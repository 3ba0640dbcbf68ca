"""Whether the environment asks `piwf-host` to trace (pure: reads a mapping, imports nothing).

`piwf-host` traces with a provider of its own (`HostConfig(tracer_provider="env")`) when `--otel`
is given, or when one of the standard variables that point spans somewhere is set:
`OTEL_TRACES_EXPORTER` (other than `none`), `OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. `OTEL_SDK_DISABLED=true` turns it off, `--otel` included,
as it does for any OpenTelemetry SDK.

`exporter_problem` says, before anything starts, why the variables name exporters this host cannot
build (an unknown `OTEL_TRACES_EXPORTER`, an OTLP protocol other than http/protobuf, grpc without its
package): `piwf-host` then refuses `--otel` and, when only the variables asked (they may be meant for
other programs), warns and runs without traces.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The entry point group where packages register span exporters (what OTEL_TRACES_EXPORTER names).
EXPORTER_GROUP = "opentelemetry_traces_exporter"
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


def otlp_protocol(environ: Mapping[str, str]) -> tuple[str, str]:
    """(variable, protocol) of the OTLP traces protocol: the traces' own variable, the general one, or
    the default http/protobuf."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if environ.get(name, "").strip():
            return name, environ[name].strip().lower()
    return "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The exporters `OTEL_TRACES_EXPORTER` names (comma-separated; default `otlp`; `none` is none)."""
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")]
    return [name for name in names if name not in ("", "none")]


def exporter_problem(environ: Mapping[str, str]) -> str | None:
    """Why the exporters the variables name cannot be built here (one line), or None."""
    for name in exporter_names(environ):
        if name == "console":
            continue
        if name in ("otlp", "otlp_proto_http"):
            variable, protocol = otlp_protocol(environ)
            if name == "otlp" and protocol == "grpc":
                if not _registered("otlp_proto_grpc"):
                    return (f"{variable}=grpc needs opentelemetry-exporter-otlp-proto-grpc, which is not "
                            f"installed (the otel extra exports http/protobuf)")
                continue
            if protocol not in ("http/protobuf", "grpc"):
                return f"{variable}={protocol!r}: piwf-host exports http/protobuf (or grpc, with its package)"
            continue
        if not _registered(name):
            return (f"OTEL_TRACES_EXPORTER names {name!r}, which no installed package provides "
                    f"(the otel extra has otlp (http/protobuf), console and none)")
    return None


def _registered(name: str) -> bool:
    from importlib.metadata import entry_points

    return bool(list(entry_points(group=EXPORTER_GROUP, name=name)))
