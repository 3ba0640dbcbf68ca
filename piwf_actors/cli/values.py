"""Argument values of `piwf`: JSON, key=value input pairs and the input they make, project
directories, prune cutoffs."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import datetime
from typing import Any


def json_value(raw: str) -> Any:
    """JSON given on the command line, or read from a file (`@PATH`) or from standard input (`-`): a
    command line takes no argument longer than 128 KiB, and a value may be any size. (No JSON text
    starts with `@`, and `-` alone is not JSON.)"""
    where = "the argument"
    if raw == "-":
        raw, where = sys.stdin.read(), "standard input"
    elif raw.startswith("@"):
        where = raw[1:]
        try:
            with open(where, encoding="utf-8") as file:
                raw = file.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise argparse.ArgumentTypeError(f"cannot read {where}: {exc}") from None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON{'' if where == 'the argument' else ' in ' + where}: "
                                         f"{exc}") from None


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def key_value(raw: str) -> tuple[str, Any]:
    """`n=3` → ("n", 3); a value that is not JSON (`name=ada`, `x=NaN`) stays a string."""
    key, eq, value = raw.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {raw!r}")
    try:
        return key, json.loads(value, parse_constant=_no_constants)
    except ValueError:
        return key, value


def start_input(given: Any, pairs: list[tuple[str, Any]]) -> Any:
    """The run input of `piwf start`: `--input`'s value (`given`, None when absent) with the KEY=VALUE
    `pairs` added. A key given twice — as a pair and in --input, or as two pairs — is refused, whatever
    the values: one of them would be dropped without a word. Raises ValueError with the one line to show."""
    if not pairs:
        return given
    if given is not None and not isinstance(given, dict):
        raise ValueError("KEY=VALUE pairs need --input to be a JSON object (or no --input)")
    merged = dict(given or {})
    origin = {key: f"--input's {key}={_shown(value)}" for key, value in merged.items()}
    for key, value in pairs:
        said = f"{key}={_shown(value)}"
        if key in merged:
            first, second = (said, origin[key]) if origin[key].startswith("--input") else (origin[key], said)
            raise ValueError(f"input key {key!r} is given twice ({first} and {second}); give it once")
        merged[key], origin[key] = value, said
    return merged


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def project_dir(raw: str) -> str:
    """`--project DIR` → its absolute path; not a directory → the argument's error (a run must not start
    with nodes bound to run in a directory that is not there)."""
    if not os.path.isdir(raw):
        raise argparse.ArgumentTypeError(f"{raw} is not a directory")
    return os.path.abspath(raw)


_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def cutoff(raw: str, now: float | None = None) -> float:
    """`30d`, `12h`, … (that long ago) or an ISO date/datetime (local time unless it says otherwise)."""
    now = time.time() if now is None else now
    match = _RELATIVE.match(raw)
    if match:
        return now - float(match.group(1)) * _UNIT_S[match.group(2)]
    try:
        moment = datetime.fromisoformat(raw.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is neither an ISO date/datetime (2024-05-01, 2024-05-01T12:00) "
            "nor a relative age (30d, 12h, 90m, 2w)") from None
    return moment.timestamp()  # a naive value is local time
