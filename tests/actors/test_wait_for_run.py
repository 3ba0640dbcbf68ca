"""`HostHandle.wait_for_run` and a run that waits for a person (issue 22, edge 1): with "parked" among
the statuses it returns at the park; without, it keeps waiting (someone else may answer), and its
timeout says what the run waits for and how to answer it, instead of only "parked"."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import checkpoint, choice, compute, define_workflow, edge, human_decision

    gate = define_workflow(name="gate", start_at="ask", nodes={
        "ask": checkpoint(prompt="a number?"),
        "double": compute(run=lambda ctx: {"n": 2 * ctx.outputs["ask"]["n"]}),
    }, edges=[edge("ask", "double")])
    decide = define_workflow(name="decide", start_at="ask", nodes={
        "ask": human_decision(audience="ops", choices={"go": choice(label="Go")}, request={"title": "Go on?"}),
    }, edges=[])
''')


@pytest.fixture
def flows(tmp_path: Path) -> Path:
    path = tmp_path / "flows.py"
    path.write_text(FLOWS)
    return path


def test_wait_for_run_returns_at_the_park_when_asked_and_after_the_answer(hosts, state_dir, flows) -> None:
    host = hosts(state_dir)
    run_id = host.start_run(f"{flows}:gate", {}).run_id
    parked = host.wait_for_run(run_id, ("done", "failed", "cancelled", "parked"), timeout=30)
    assert (parked.status, parked.park_reason) == ("parked", "waiting")
    [request] = host.pending_interactions()
    host.answer_checkpoint(request.request_id, {"n": 21})
    assert host.wait_for_run(run_id, timeout=30).output == {"n": 42}


def test_a_wait_that_times_out_on_a_checkpoint_names_the_request_and_the_answer(hosts, state_dir, flows) -> None:
    host = hosts(state_dir)
    run_id = host.start_run(f"{flows}:gate", {}).run_id
    host.wait_for_run(run_id, ("parked",), timeout=30)
    [request] = host.pending_interactions()
    with pytest.raises(TimeoutError) as raised:
        host.wait_for_run(run_id, timeout=0.2)
    message = str(raised.value)
    assert message == (f"run {run_id} is still parked after 0.2 s: it waits for an answer to checkpoint 'ask' "
                       f"(request {request.request_id}: 'a number?'); answer it with "
                       f"answer_checkpoint({request.request_id!r}, value), or pass statuses=(..., 'parked') "
                       f"to return at the park")


def test_a_wait_that_times_out_on_a_decision_names_its_choices(hosts, state_dir, flows) -> None:
    host = hosts(state_dir)
    run_id = host.start_run(f"{flows}:decide", {}).run_id
    host.wait_for_run(run_id, ("parked",), timeout=30)
    [request] = host.pending_interactions()
    with pytest.raises(TimeoutError, match=rf"waits for an answer to decision 'ask' \(request {request.request_id}: "
                                           rf"'Go on\?'\); answer it with answer_decision\('{request.request_id}', "
                                           rf"choice\) \(choices: go\)"):
        host.wait_for_run(run_id, timeout=0.2)


def test_a_wait_that_times_out_while_running_says_its_status(hosts, state_dir, tmp_path) -> None:
    flows = tmp_path / "slow.py"
    flows.write_text("from piwf_actors.workflows import define_workflow, shell\n"
                     "slow = define_workflow(name='slow', start_at='s', nodes={'s': shell(command=['sleep', '30'], "
                     "idempotent=True)}, edges=[])\n")
    host = hosts(state_dir)
    run_id = host.start_run(f"{flows}:slow", {}).run_id
    host.wait_for_run(run_id, ("running",), timeout=30)
    with pytest.raises(TimeoutError, match=rf"^run {run_id} is still running after 0.2 s$"):
        host.wait_for_run(run_id, timeout=0.2)
    host.cancel_run(run_id)
