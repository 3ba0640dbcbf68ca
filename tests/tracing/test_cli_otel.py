"""How `piwf-host` decides to trace: `--otel` or the OTEL_* variables, and what it says without the extra."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from piwf_actors.cli import host as cli_host
from piwf_actors.tracing import env as tracing_env


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
                 "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_host_traces_with_its_own_provider_when_the_variables_or_the_flag_ask(
        no_otel_env: pytest.MonkeyPatch) -> None:
    assert cli_host._tracer_setting(False) is None
    assert cli_host._tracer_setting(True) == "env"
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert cli_host._tracer_setting(False) == "env"
    no_otel_env.setenv("OTEL_SDK_DISABLED", "true")
    assert cli_host._tracer_setting(True) is None


def test_without_the_extra_otel_is_refused_and_the_variables_alone_only_warn(
        no_otel_env: pytest.MonkeyPatch, state_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    no_otel_env.setattr(tracing_env, "otel_installed", lambda: False)
    no_otel_env.setenv("OTEL_TRACES_EXPORTER", "otlp")
    with caplog.at_level(logging.WARNING, logger="piwf.host"):
        assert cli_host._tracer_setting(False) is None
    assert "the otel extra is not installed" in caplog.text
    # A process of its own: piwf-host's main configures logging for its whole process.
    script = ("import sys; import piwf_actors.tracing.env as e; e.otel_installed = lambda: False; "
              "from piwf_actors.cli.host import main; sys.exit(main(sys.argv[1:]))")
    refused = subprocess.run([sys.executable, "-c", script, "--state-dir", str(state_dir), "--otel"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "--otel needs the otel extra: pip install 'piwf_actors[otel]'" in refused.stderr
    assert not (state_dir / "state.db").exists()  # refused before anything started


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL='http/json': piwf-host exports http/protobuf"),
    ("OTEL_TRACES_EXPORTER", "zipkin_json", "OTEL_TRACES_EXPORTER names 'zipkin_json', which no installed package"),
])
def test_exporters_the_host_cannot_build_only_warn_when_the_variables_alone_ask_and_refuse_otel(
        no_otel_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, variable: str, value: str,
        said: str) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    if value == "grpc" and tracing_env._registered("otlp_proto_grpc"):
        pytest.skip("the grpc exporter is installed here")
    no_otel_env.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")  # meant for another program
    no_otel_env.setenv(variable, value)
    with caplog.at_level(logging.WARNING, logger="piwf.host"):
        assert cli_host._tracer_setting(False) is None
    warnings = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and said in warnings[0] and warnings[0].endswith(": not tracing"), warnings
    with pytest.raises(ValueError, match="^--otel: ") as refused:
        cli_host._tracer_setting(True)
    assert said in str(refused.value) and "\n" not in str(refused.value)


def test_piwf_host_with_variables_for_another_program_runs_untraced(
        no_otel_env: pytest.MonkeyPatch, state_dir: Path) -> None:
    """The whole program: a grpc endpoint meant for another program; the host starts (without traces)."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    import os
    import signal

    from testsupport import wait_for

    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}
    host = subprocess.Popen([sys.executable, "-m", "piwf_actors.cli.host", "--state-dir", str(state_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(lambda: (state_dir / "host.sock").exists() or host.poll() is not None, 60, "the host's socket")
        assert host.poll() is None, host.communicate()
        host.send_signal(signal.SIGTERM)
        _out, err = host.communicate(timeout=60)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert host.returncode == 0, err
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='http/json': piwf-host exports http/protobuf" in err
    assert "not tracing" in err
