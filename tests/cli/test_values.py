"""`piwf`'s JSON arguments: inline, from a file (`@PATH`) or from standard input (`-`).

A command line takes no single argument longer than 128 KiB (Linux's MAX_ARG_STRLEN), so a large run
input, message or answer must come from a file or a pipe.
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from piwf_actors.cli.values import json_value


def test_a_json_value_comes_inline_from_a_file_or_from_standard_input(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert json_value('{"n": 3}') == {"n": 3}
    big = {"report": "é" * 300_000}
    path = tmp_path / "value.json"
    path.write_text(json.dumps(big, ensure_ascii=False), encoding="utf-8")
    assert json_value(f"@{path}") == big
    monkeypatch.setattr("sys.stdin", io.StringIO('["from", "stdin"]'))
    assert json_value("-") == ["from", "stdin"]


def test_a_file_that_cannot_be_read_or_is_not_json_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^cannot read .*missing\.json: .*No such file"):
        json_value(f"@{tmp_path / 'missing.json'}")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(argparse.ArgumentTypeError, match=rf"^not valid JSON in {bad}: "):
        json_value(f"@{bad}")
    with pytest.raises(argparse.ArgumentTypeError, match="^not valid JSON: "):
        json_value("{not json")
