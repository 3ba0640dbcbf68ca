"""`piwf start` with a typed workflow input: the refusal names the field and then shows the input the
workflow expects, nothing is started; `piwf workflows` lists each workflow's input shape."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import ok_json, piwf, short_dir

from piwf_actors import HostConfig, start_host

TYPED = textwrap.dedent('''
    from __future__ import annotations

    import dataclasses

    from piwf_actors.workflows import compute, define_workflow


    @dataclasses.dataclass
    class Deploy:
        version: str
        count: int = 1
        dry_run: bool = False


    deploy = define_workflow(name="deploy", start_at="plan", input=Deploy,
                             nodes={"plan": compute(run=lambda ctx: {"plan": ctx.input["version"]})}, edges=[])
    untyped = define_workflow(name="untyped", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
''')
EXPECTED = "expected input: {version: string, count?: integer, dry_run?: boolean}"


@pytest.fixture
def project() -> Iterator[Path]:
    root = short_dir("pct-")
    (root / ".piwf" / "workflows").mkdir(parents=True)
    (root / ".piwf" / "workflows" / "typed.py").write_text(TYPED)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def state() -> Iterator[Path]:
    state = short_dir("pct-s-")
    host = start_host(HostConfig(state_dir=state, max_workers=1))
    try:
        yield state
    finally:
        host.stop("test done")
        shutil.rmtree(state, ignore_errors=True)


def test_start_refuses_a_bad_input_naming_the_field_then_shows_the_expected_input(project: Path, state: Path) -> None:
    missing = piwf(state, "start", "deploy", "count=2", "--project", str(project))
    assert missing.returncode == 1, missing
    assert missing.stderr.splitlines() == ["piwf: rejected: input: missing required property 'version'", EXPECTED]
    assert missing.stdout == ""

    mistyped = piwf(state, "start", "deploy", "version=v1.4", 'count="3"', "--project", str(project))
    assert mistyped.returncode == 1
    assert mistyped.stderr.splitlines() == ["piwf: rejected: input.count: expected integer, got string", EXPECTED]

    as_json = piwf(state, "start", "deploy", "--input", '{"version": 1}', "--project", str(project), "--json")
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["outcome"] == "rejected"
    assert answer["error"] == f"input.version: expected string, got integer; {EXPECTED}"
    assert ok_json(piwf(state, "list", "--json"))["runs"] == []  # nothing was started

    started = piwf(state, "start", "deploy", "version=v1.4", "count=3", "--project", str(project), "--wait")
    assert started.returncode == 0, started.stderr
    [run] = ok_json(piwf(state, "list", "--json"))["runs"]
    assert run["workflow"] == "deploy" and run["status"] == "done"


def test_workflows_lists_the_input_shape(project: Path, tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    view = ok_json(piwf(None, "workflows", "--project", str(project), "--json", extra_env=env))
    by_name = {item["name"]: item for item in view["workflows"]}
    assert by_name["deploy"]["input_shape"] == {
        "type": "object", "properties": {"version": {"type": "string"}, "count": {"type": "integer"},
                                         "dry_run": {"type": "boolean"}},
        "required": ["version"], "additionalProperties": False}
    assert "input_shape" not in by_name["untyped"]
    table = piwf(None, "workflows", "--project", str(project), extra_env={**env, "COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    assert "{version: string, count?: integer, dry_run?: boolean}" in table.stdout
    assert " input " in table.stdout.splitlines()[2]
