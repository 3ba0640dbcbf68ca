"""The example systemd unit starts `piwf-host` with options it accepts."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

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
