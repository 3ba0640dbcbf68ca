"""`piwf answer` takes what a person has at hand: a request id, or the id of the run that waits (a
start of it, or its end as tables show it) when that run waits for exactly one request — `piwf start`
prints the run's id, not the request's."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import ok_json, piwf, short_dir, wait_status, wait_until

from piwf_actors import HostConfig, start_host
from piwf_actors.client import Client

FLOWS = textwrap.dedent('''
    from piwf_actors.durable import checkpoint, decide, workflow
    from piwf_actors.workflows import compute, define_workflow

    @workflow(name="approve")
    def approve() -> str:
        return decide("ok", title="Go?", choices={"yes": "Go", "no": "Stop"}).choice

    @workflow(name="note")
    def note() -> object:
        return checkpoint("note", title="A note?")

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pca-")
    (state / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        yield {"state": state, "host": host, "flows": state / "flows.py"}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)


def _asking(env: dict[str, Any], workflow: str) -> str:
    run_id = env["host"].start_run(f"{env['flows']}:{workflow}", {})["receipt"]["run_id"]

    def asks() -> bool:
        with Client(env["state"]) as client:
            return any(r["run_id"] == run_id for r in client.request("interaction.list").receipt["requests"])

    wait_until(asks, 30, f"run {run_id} to ask")
    return run_id


@pytest.mark.parametrize("form", ["full", "start", "end"])
def test_a_decision_is_answered_by_the_id_of_the_run_that_waits(env: dict[str, Any], form: str) -> None:
    run_id = _asking(env, "approve")
    named = {"full": run_id, "start": run_id[:-6], "end": "…" + run_id[-12:]}[form]
    answered = piwf(env["state"], "answer", named, "yes")
    assert answered.returncode == 0, answered.stderr
    assert f"run {run_id} resumes" in answered.stdout
    assert wait_status(env["state"], run_id, ("done", "failed"))["output"] == "yes"


def test_a_checkpoint_is_answered_by_its_run_s_id(env: dict[str, Any]) -> None:
    run_id = _asking(env, "note")
    answered = ok_json(piwf(env["state"], "answer", run_id, "--value", '{"text": "hi"}', "--json"))
    assert answered["run_id"] == run_id
    assert wait_status(env["state"], run_id, ("done", "failed"))["output"] == {"text": "hi"}


def test_a_run_that_waits_for_no_request_is_one_clear_line(env: dict[str, Any]) -> None:
    run_id = env["host"].start_run(f"{env['flows']}:quick", {})["receipt"]["run_id"]
    wait_status(env["state"], run_id, ("done",))
    refused = piwf(env["state"], "answer", run_id, "yes")
    assert refused.returncode == 1, refused
    assert refused.stderr.strip() == f"piwf: error: run {run_id} waits for no request (it is done)"
    unknown = piwf(env["state"], "answer", "run_0000000000000000000000000z", "yes")
    assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1, unknown
    assert unknown.stderr == "piwf: notFound: run run_0000000000000000000000000z not found\n", unknown.stderr
    typo = piwf(env["state"], "answer", "zzzz", "yes")
    assert typo.returncode == 1 and typo.stderr.startswith("piwf: no request matches 'zzzz'"), typo.stderr
