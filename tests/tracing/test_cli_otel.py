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
