"""The example systemd unit starts `piwf-host` with options it accepts."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from piwf_actors.cli.host import build_parser

UNIT = Path(__file__).resolve().parents[2] / "examples" / "systemd" / "piwf-host.service"


def test_the_unit_runs_piwf_host_with_valid_options() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive in systemd
    unit.read_string(UNIT.read_text())
    command = shlex.split(unit["Service"]["ExecStart"])
    assert command[0].endswith("/piwf-host")
    build_parser().parse_args(command[1:])  # exits (SystemExit) on an option piwf-host does not know
    assert unit["Service"]["KillSignal"] == "SIGTERM" and unit["Service"]["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "default.target"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    # `%h/.local/bin/piwf-host` is not installed here; the venv's own launcher stands in for it,
    # so what systemd checks is the unit's syntax and directives, and that ExecStart runs.
    piwf_host = Path(sys.executable).parent / "piwf-host"
    assert piwf_host.exists()
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("%h/.local/bin/piwf-host", str(piwf_host)))
    verified = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert verified.returncode == 0 and verified.stderr == "", verified.stderr
