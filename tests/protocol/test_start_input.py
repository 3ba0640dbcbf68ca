"""`start_run_command` checks a run's input against its workflow's `input=` shape where it resolves the
workflow — the one path of `run.start` over the socket, of the embedding handle and of the schedule
keeper's fires — before the concurrency key function sees the input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from piwf_actors.errors import Rejected
from piwf_actors.protocol.catalog.runs import start_run_command
from piwf_actors.workflows.resolver import WorkflowResolver

FLOW = textwrap.dedent('''
    from typing import TypedDict

    from piwf_actors.workflows import compute, define_workflow, limit


    class Deploy(TypedDict):
        version: str
        cluster: str


    deploy = define_workflow(
        name="deploy", start_at="a", input=Deploy, concurrency=limit(1, key=lambda run_input: run_input["cluster"]),
        nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
    )
''')


@pytest.fixture
def spec(tmp_path: Path) -> str:
    path = tmp_path / "deploy.py"
    path.write_text(FLOW)
    return f"{path}:deploy"


def test_without_a_key_the_refusal_is_raised_before_the_concurrency_key_runs(spec: str) -> None:
    # The key function would raise KeyError('cluster') on this input: the input check comes first.
    with pytest.raises(Rejected) as caught:
        start_run_command(WorkflowResolver(), workflow=spec, input={"version": "1"})
    assert caught.value.one_line() == ("input: missing required property 'cluster'; "
                                       "expected input: {version: string, cluster: string}")


def test_with_a_key_the_refusal_becomes_the_recorded_outcome_and_no_run_spec(spec: str) -> None:
    command = start_run_command(WorkflowResolver(), workflow=spec, input={"version": 1, "cluster": "eu"},
                                client_id="c", idempotency_key="k")
    assert "spec" not in command.args
    assert command.args["refusal"] == {
        "code": "rejected",
        "message": "input.version: expected string, got integer; expected input: {version: string, cluster: string}"}


def test_a_valid_input_gets_its_run_spec_and_key(spec: str) -> None:
    command = start_run_command(WorkflowResolver(), workflow=spec, input={"version": "1", "cluster": "eu"})
    assert command.args["spec"]["input"] == {"version": "1", "cluster": "eu"}
    assert command.args["spec"]["concurrency_key"] == "deploy[eu]"
