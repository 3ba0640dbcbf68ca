"""A decision's `on_timeout` and a checkpoint's `timeout_s` computed from the run (a function of the
context), on a real host with the test kit's clock: evaluated in the worker, stored like a constant
deadline — so skips, pauses and the run's view treat it the same — and refused with one line naming
the node when what it returns is not a deadline."""

from __future__ import annotations

import computed_flows as flows
import pytest

from piwf_actors.testing.kit import Piwf

HOUR_S = 3600
#: Real seconds a loaded machine may take between a timer's start and the test's read of it.
SLACK_S = 60


@pytest.mark.parametrize("workflow", [flows.whole, flows.timed], ids=["whole", "after_s"])
def test_a_computed_decision_deadline_is_stored_and_applied_like_a_constant_one(piwf: Piwf, workflow) -> None:
    run = piwf.start(workflow, {"hours": 5})
    decision = piwf.request(run, "decision")
    assert 5 * HOUR_S - SLACK_S < decision.deadline_at - piwf.now() <= 5 * HOUR_S
    assert decision.contract["timeout_s"] == 5 * HOUR_S
    assert decision.contract["default_response"] == {"choice": "stop"}
    [waiting] = piwf.run(run).extra["waiting"]  # what `piwf show` counts down from
    assert waiting["clock"] == "running" and 5 * HOUR_S - SLACK_S < waiting["remaining_s"] <= 5 * HOUR_S
    piwf.skip(4 * HOUR_S)
    assert piwf.run(run).status == "parked"
    piwf.skip(HOUR_S)
    done = piwf.wait(run)
    assert done.output == {"went": False}
    assert done.node("approve").extra["answer"]["by"]["kind"] == "timeout"


def test_a_computed_default_may_depend_on_the_run_and_none_means_no_deadline(piwf: Piwf) -> None:
    go = piwf.start(flows.whole, {"hours": 1, "default": "go"})
    assert piwf.request(go, "decision").contract["default_response"] == {"choice": "go"}
    piwf.skip(HOUR_S)
    assert piwf.wait(go).output == {"went": True}

    endless = piwf.start(flows.whole, {})
    request = piwf.request(endless, "decision")
    assert request.deadline_at is None and request.contract["default_response"] is None
    piwf.skip(1000 * HOUR_S)
    assert piwf.run(endless).status == "parked"


def test_a_computed_checkpoint_timeout_counts_and_stands_still_while_paused(piwf: Piwf) -> None:
    run = piwf.start(flows.note, {"minutes": 90})
    request = piwf.request(run, "checkpoint")
    assert 5400 - SLACK_S < request.deadline_at - piwf.now() <= 5400
    piwf.skip(1800)
    piwf.host.pause_run(run)
    [waiting] = piwf.run(run).extra["waiting"]
    assert waiting["clock"] == "paused" and 3600 - SLACK_S < waiting["remaining_s"] <= 3600
    piwf.skip(10 * HOUR_S)  # a pause longer than the deadline: nothing expires
    assert piwf.run(run).status == "parked"
    piwf.host.resume_run(run)
    resumed = piwf.request(run, "checkpoint")
    assert 3600 - SLACK_S < resumed.deadline_at - piwf.now() <= 3600
    piwf.skip(HOUR_S)
    failed = piwf.wait(run)
    assert failed.status == "failed" and failed.error.code == "checkpoint_timeout", failed.error


@pytest.mark.parametrize(("workflow", "run_input", "node", "words"), [
    (flows.whole, {"hours": -1}, "approve", "on_timeout.after_s must be a positive number of seconds, got -3600"),
    (flows.whole, {"hours": 1, "default": "maybe"}, "approve", "on_timeout.response: unknown choice 'maybe'"),
    (flows.timed, {"hours": 1e308}, "approve", "on_timeout.after_s must be a finite number of seconds, got inf"),
    (flows.timed, {"hours": "2"}, "approve", "on_timeout.after_s must be a number of seconds, got str"),
    (flows.note, {"minutes": 0}, "ask", "timeout_s must be a positive number of seconds, got 0"),
    (flows.note, {"minutes": [1]}, "ask", "timeout_s must be a number of seconds, got list"),
], ids=["negative", "unknown-choice", "infinite", "text", "zero", "list"])
def test_a_computed_deadline_that_is_not_one_fails_the_node_with_one_line_naming_it(
        piwf: Piwf, workflow, run_input, node, words) -> None:
    run = piwf.start(workflow, run_input)
    failed = piwf.wait(run)
    assert failed.status == "failed", piwf.describe(run)
    error = failed.node(node).error
    assert error.code == "bad_request", error
    assert f"node {node!r}:" in error.message and words in error.message, error.message
    assert "\n" not in error.message and len(error.message) <= 1000
    assert piwf.host.pending_interactions() == []
