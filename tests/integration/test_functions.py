"""Durable function workflows on real hosts (real workers, a real database, the test kit's clock).

The flows are in wf/function_flows.py; their steps append a line per execution to an oracle file
outside the database, so each test counts what actually ran — never what the database says ran.
"""

from __future__ import annotations

import collections
import os
import signal
from pathlib import Path

import psutil
import pytest
from testsupport import both_engines
from wf import function_flows as flows
from wf import harness
from wf.harness import active_worker, alive, wait_for, wait_for_status

from piwf_actors.testing.kit import Piwf

guard = harness.guard


def executions(oracle: Path) -> collections.Counter[str]:
    return collections.Counter(oracle.read_text(encoding="utf-8").splitlines() if oracle.exists() else [])


@pytest.fixture
def oracle(tmp_path: Path) -> Path:
    return tmp_path / "oracle"


@both_engines
def test_a_function_with_a_loop_local_state_a_retry_and_a_caught_failure(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.loops, {"oracle": str(oracle), "count": 3})
    view = piwf.wait(run)
    assert view.status == "done", piwf.describe(run)
    assert view.output == {"squares": [0, 1, 4], "total": 106, "receipt": {"published": 106},
                           "caught": {"code": "node_error", "message": "ValueError: broken step", "step": "broken"}}
    assert executions(oracle) == {"square 0": 1, "square 1": 1, "square 2": 1, "flaky 1": 2, "broken": 1,
                                  "publish 106": 1}
    nodes = {node.node_id: node for node in view.nodes}
    assert list(nodes) == ["square", "square#2", "square#3", "flaky", "broken", "publish", "return"]
    assert (nodes["flaky"].status, nodes["flaky"].attempts) == ("succeeded", 2)
    assert nodes["broken"].status == "failed" and nodes["broken"].error is not None
    assert nodes["return"].output == view.output
    assert [(effect.node_id, effect.status) for effect in view.effects] == [("publish", "applied")]
    assert view.steps == 7  # six calls and the return


@both_engines
def test_replay_after_a_sleep_returns_recorded_results_and_runs_no_step_again(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.napper, {"oracle": str(oracle)})
    piwf.wait_parked(run, "waiting")
    assert executions(oracle) == {"square 3": 1}
    piwf.skip(3601)  # the test kit's clock: the hour passes at once
    view = piwf.wait(run)
    assert view.status == "done" and view.output == {"before": 9, "after": 16}, piwf.describe(run)
    assert executions(oracle) == {"square 3": 1, "square 4": 1}, "a recorded step ran again on replay"
    assert [kind for kind in (e.kind for e in piwf.events(run)) if kind in ("run_started", "run_resumed")] == [
        "run_started", "run_resumed"]


def test_typed_values_come_back_as_their_types_on_replay(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.typed_release, {"oracle": str(oracle), "release": {"service": "api"}})
    piwf.wait_parked(run, "waiting")
    piwf.skip(31)
    view = piwf.wait(run)
    assert view.output == {"service": "api", "env": "staging", "passed": 3, "notify": True,
                           "types": ["Release", "Report"]}, piwf.describe(run)
    assert executions(oracle) == {"run_tests api": 1}
    assert piwf.outputs(run)["run_tests"] == {"service": "api", "passed": 3}


def test_a_replay_that_takes_another_path_fails_the_run_nondeterministic(piwf: Piwf, oracle: Path,
                                                                        tmp_path: Path) -> None:
    switch = tmp_path / "switch"
    switch.write_text("a")
    run = piwf.start(flows.reads_outside, {"oracle": str(oracle), "switch": str(switch)})
    piwf.wait_parked(run, "waiting")  # square, square#2, then the sleep
    switch.write_text("b")  # what the function reads outside a step changes between launches
    piwf.skip(61)
    view = piwf.wait(run)
    assert view.status == "failed" and view.error is not None, piwf.describe(run)
    assert view.error.code == "nondeterministic"
    assert "'publish'" in view.error.message and "'square#2'" in view.error.message, view.error.message
    assert executions(oracle) == {"square 1": 1, "square 2": 1}, "nothing of the other path may run"


@both_engines
def test_decide_is_answered_through_decision_answer_and_the_function_goes_on(piwf: Piwf, oracle: Path) -> None:
    yes = piwf.start(flows.asker, {"oracle": str(oracle), "service": "api"})
    request = piwf.request(yes, "decision", "approve")
    assert request.node_id == "approve"
    piwf.answer(request, "yes")
    view = piwf.wait(yes)
    assert view.output == {"deployed": {"published": 25}, "by": True}, piwf.describe(yes)
    assert piwf.outputs(yes)["approve"]["answered_by"]["kind"] == "human"

    no = piwf.start(flows.asker, {"oracle": str(oracle)})
    piwf.answer(no, "no", input={"why": "a freeze"})
    assert piwf.wait(no).output == {"deployed": False, "why": "a freeze"}
    # The step before the decision ran once per run although each run had two launches.
    assert executions(oracle) == {"square 5": 2, "publish 25": 1}


def test_an_agent_step_takes_the_first_submission_that_fits_and_replays_it(piwf: Piwf, oracle: Path) -> None:
    run_id = piwf.start(flows.summarizer, {"oracle": str(oracle), "topic": "the release"}, session_id="agent-1")
    request = piwf.request(run_id, "agent", "summarize")
    assert request.session_id == "agent-1"
    refused = piwf.submit(request, {"summary": 42})
    assert refused.outcome == "rejected" and "$.summary: expected string" in str(refused.error), refused
    assert piwf.submit(request, {"summary": "short and sweet", "words": 3}).outcome == "accepted"
    view = piwf.wait(run_id)
    assert view.output == {"before": 9, "summary": "short and sweet", "words": 3}, piwf.describe(run_id)
    # The step before the agent ran once over the run's two launches; the agent's answer was used once.
    assert executions(oracle) == {"square 3": 1, "summarized short and sweet": 1}


def test_a_message_a_checkpoint_and_send_message_between_two_function_runs(piwf: Piwf, oracle: Path) -> None:
    listener = piwf.start(flows.listener, {"oracle": str(oracle)})
    piwf.wait_parked(listener, "waiting")
    sender = piwf.start(flows.messenger, {"target": listener})
    assert piwf.wait(sender).status == "done", piwf.describe(sender)
    piwf.answer_checkpoint(listener, {"text": "hi"})
    view = piwf.wait(listener)
    assert view.output == {"got": {"from": "messenger"}, "note": {"text": "hi"}}, piwf.describe(listener)
    assert executions(oracle) == {"square 1": 1}


def test_a_message_wait_takes_its_default_after_its_timeout(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.listener, {"oracle": str(oracle)})
    piwf.wait_parked(run, "waiting")
    piwf.skip(601)
    piwf.answer_checkpoint(run, "ok")
    assert piwf.wait(run).output == {"got": {"late": True}, "note": "ok"}


@both_engines
def test_child_runs_both_ways_function_to_graph_and_graph_to_function(piwf: Piwf, oracle: Path) -> None:
    parent = piwf.start(flows.parent_fn, {"oracle": str(oracle)})
    view = piwf.wait(parent)
    assert view.output == {"graph": {"double": 42}, "mapped": [1, 4, 9]}, piwf.describe(parent)
    graph_parent = piwf.start(flows.parent_graph, {"oracle": str(oracle)})
    assert piwf.wait(graph_parent).output == {"child": 49}, piwf.describe(graph_parent)
    assert executions(oracle) == {"square 1": 1, "square 2": 1, "square 3": 1, "square 7": 1}


def test_an_uncaught_step_failure_and_an_exception_fail_the_run(piwf: Piwf, oracle: Path) -> None:
    uncaught = piwf.wait(piwf.start(flows.uncaught, {"oracle": str(oracle)}))
    assert uncaught.status == "failed" and uncaught.error is not None
    assert (uncaught.error.code, uncaught.error.message) == ("node_error", "step 'broken' failed: ValueError: broken step")
    raised = piwf.wait(piwf.start(flows.raises, {"oracle": str(oracle)}))
    assert raised.status == "failed" and raised.error is not None
    assert (raised.error.code, raised.error.message) == ("workflow_error", "KeyError: 'no such thing'")
    assert "raise KeyError" in (raised.error.traceback or "")
    assert {node.node_id: node.status for node in raised.nodes} == {"square": "succeeded", "return": "failed"}


@both_engines
def test_an_effect_step_cut_off_by_sigkill_parks_ambiguous_and_a_confirm_goes_on_without_it(
        guard, state_dir: Path, oracle: Path, tmp_path: Path) -> None:
    flag = tmp_path / "block"
    flag.write_text("block")
    host = guard.start_host(state_dir, max_workers=1)
    run_id = host.start_run(f"{flows.__file__}:invoicer",
                            {"oracle": str(oracle), "block_flag": str(flag)})["receipt"]["run_id"]
    wait_for(lambda: executions(oracle)["send_invoice"] == 1, 15, "the effect step to start")
    worker = psutil.Process(active_worker(host, run_id))
    os.kill(worker.pid, signal.SIGKILL)
    wait_for(lambda: not alive(worker), 5, "the worker to die")
    view = wait_for_status(host, run_id, ("parked", "done", "failed"), timeout=30)
    assert (view["status"], view["park_reason"]) == ("parked", "ambiguous_effect"), view
    assert [(e["node_id"], e["status"]) for e in view["effects"]] == [("send_invoice", "ambiguous")]
    assert executions(oracle) == {"square 6": 1, "send_invoice": 1}, "the cut-off effect ran again"
    flag.unlink()
    host.resolve_effect(view["park_detail"], "confirm", output={"sent": "by hand"})
    done = wait_for_status(host, run_id, ("done", "failed", "parked"), timeout=30)
    assert done["status"] == "done", done
    assert done["output"] == {"before": 36, "sent": {"sent": "by hand"}, "after": 49}
    assert executions(oracle) == {"square 6": 1, "send_invoice": 1, "square 7": 1}


@both_engines
def test_a_restart_from_a_step_replays_the_copied_results_and_runs_from_that_step(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.loops, {"oracle": str(oracle), "count": 3})
    first = piwf.wait(run)
    assert first.status == "done"
    receipt = piwf.host.restart_run(run, expected_revision=first.revision, from_node="publish", same_code=True)
    again = piwf.wait(receipt.run_id)
    assert again.status == "done" and again.output == first.output, piwf.describe(receipt.run_id)
    # Everything before `publish` was copied (the caught failure of `broken` too), not run again.
    assert executions(oracle) == {"square 0": 1, "square 1": 1, "square 2": 1, "flaky 1": 2, "broken": 1,
                                  "publish 106": 2}
    nodes = {node.node_id: node.status for node in again.nodes}
    assert nodes["broken"] == "failed" and nodes["square#3"] == "succeeded"


def test_pause_holds_a_sleeping_function_past_its_wake_up_and_resume_finishes_it(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.napper, {"oracle": str(oracle)})
    piwf.wait_parked(run, "waiting")
    piwf.host.pause_run(run)  # recorded; the run stays parked on its sleep
    piwf.skip(3601)  # the wake-up time passes while paused: the woken run parks `paused`, not resumed
    piwf.wait_parked(run, "paused")
    assert executions(oracle) == {"square 3": 1}
    piwf.host.resume_run(run)
    view = piwf.wait(run)
    assert view.output == {"before": 9, "after": 16}, piwf.describe(run)
    assert executions(oracle) == {"square 3": 1, "square 4": 1}


def test_cancel_of_a_function_waiting_for_a_decision_ends_it_cancelled(piwf: Piwf, oracle: Path) -> None:
    run = piwf.start(flows.asker, {"oracle": str(oracle)})
    piwf.request(run, "decision", "approve")
    piwf.host.cancel_run(run)
    assert piwf.wait(run).status == "cancelled"
    assert executions(oracle) == {"square 5": 1}
