"""Every helper of the test kit on a real host: answers, submissions, messages, effects, reads, the
ways a workflow is named, and what a wait that runs out says (with the package's `piwf` fixture)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import kit_flows as flows
import pytest

from piwf_actors.testing.kit import Piwf, WaitTimeout
from piwf_actors.workflows import compute, define_workflow


def test_answer_decides_a_decision(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    receipt = piwf.answer(run, "go")
    assert receipt.outcome == "accepted" and receipt.choice == "go"
    done = piwf.wait(run)
    assert done.output == {"went": True}
    assert piwf.outputs(run) == {"approve": {"choice": "go"}, "went": {"went": True}}
    assert piwf.output(run) == {"went": True}


def test_answer_takes_the_request_itself_and_refuses_an_unknown_choice(piwf: Piwf) -> None:
    from piwf_actors.errors import Rejected

    run = piwf.start(flows.gate)
    decision = piwf.request(run, "decision", "approve")
    with pytest.raises(Rejected):
        piwf.answer(decision, "maybe")
    piwf.answer(decision, "stop")
    assert piwf.wait(run).output == {"went": False}


def test_answer_checkpoint_gives_the_checkpoint_its_output(piwf: Piwf) -> None:
    run = piwf.start(flows.note)
    piwf.answer_checkpoint(run, {"text": "all good"})
    assert piwf.wait(run).output == {"note": {"text": "all good"}}


def test_submit_waits_for_the_workers_verdict(piwf: Piwf) -> None:
    run = piwf.start(flows.summary, session_id="agent-1")
    rejected = piwf.submit(run, {"wrong": 1})
    assert rejected.outcome == "rejected" and not rejected.accepted and "summary" in (rejected.error or "")
    accepted = piwf.submit(run, {"summary": "short"})
    assert accepted.accepted and accepted.error is None
    assert piwf.wait(run).output == {"summary": "short"}


def test_send_delivers_a_message_and_a_keyed_resend_is_the_same_message(piwf: Piwf) -> None:
    run = piwf.start(flows.routed)
    piwf.wait_parked(run, "waiting")
    first = piwf.send(run, "verdict", {"verdict": "approved"}, key="v1")
    again = piwf.send(run, "verdict", {"verdict": "approved"}, key="v1")
    assert again.outcome == "adopted" and again.message_id == first.message_id
    assert piwf.wait(run).output == {"verdict": "yes"}
    assert [event.kind for event in piwf.events(run, "message_received")] == ["message_received"]


def test_resolve_confirms_an_ambiguous_effect(piwf: Piwf) -> None:
    run = piwf.start(flows.stuck)
    piwf.wait_parked(run, "ambiguous_effect")
    [effect] = piwf.effects(run)
    assert effect.status == "ambiguous" and effect.node_id == "deploy"
    piwf.resolve(run, "confirm", {"deployed": "by hand"})
    done = piwf.wait(run)
    assert done.output == {"deploy": {"deployed": "by hand"}}
    assert piwf.effects(run)[0].resolution.startswith("confirmed")


def test_resolve_retry_runs_the_effect_again(piwf: Piwf) -> None:
    run = piwf.start(flows.stuck)
    piwf.wait_parked(run, "ambiguous_effect")
    piwf.resolve(run, "retry")
    # It is cut off again by its timeout: a second effect, parked the same way.
    piwf.wait_until(run, lambda view: len(view.effects) == 2 and view.park_reason == "ambiguous_effect",
                    "to park on its second effect")
    first, second = piwf.effects(run)
    assert first.resolution == "retry" and second.status == "ambiguous"
    piwf.resolve(run, "confirm", {"deployed": True}, effect_id=second.effect_id)
    assert piwf.wait(run).status == "done"


def test_resolve_without_an_effect_id_needs_exactly_one_ambiguous_effect(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    piwf.request(run, "decision")
    with pytest.raises(AssertionError, match="has 0 ambiguous effects, not one; pass effect_id"):
        piwf.resolve(run, "confirm")


def test_events_filter_by_kind_and_node(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    piwf.answer(run, "go")
    piwf.wait(run)
    kinds = [event.kind for event in piwf.events(run)]
    assert kinds[0] == "run_created" and kinds[-1] == "run_finished"
    assert [event.node_id for event in piwf.events(run, "node_finished")] == ["approve", "went"]
    assert [event.kind for event in piwf.events(run, node="went")] == ["node_finished", "run_finished"]
    assert piwf.wait_for_event(run, "interaction_settled").node_id == "approve"


def test_a_wait_that_runs_out_says_what_the_run_waits_for(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    piwf.request(run, "decision")
    with pytest.raises(WaitTimeout) as failed:
        piwf.wait(run, timeout=0.2)
    message = str(failed.value)
    assert f"run {run} did not get to finish within 0.2 s" in message
    assert "is parked (waiting) at node 'approve'" in message
    assert "decision 'approve'" in message and re.search(r"deadline in (59m\d\ds|1h00m) of timer time", message)
    assert "interaction_requested approve" in message


def test_a_wait_for_a_park_fails_at_once_when_the_run_ends_instead(piwf: Piwf) -> None:
    run = piwf.start(flows.slow)
    with pytest.raises(WaitTimeout, match="but it ended"):
        piwf.wait_parked(run, timeout=60)
    with pytest.raises(WaitTimeout, match="ended without a wait_started event"):
        piwf.wait_for_event(run, "wait_started", timeout=60)
    with pytest.raises(WaitTimeout, match="waited for a decision"):
        piwf.request(run, "decision", timeout=60)


def test_workflows_by_name_in_a_project_and_by_file(tmp_path: Path) -> None:
    project = tmp_path / "project"
    folder = project / ".piwf" / "workflows"
    folder.mkdir(parents=True)
    (folder / "hello.py").write_text(textwrap.dedent("""
        from piwf_actors.workflows import compute, define_workflow

        hello = define_workflow(name="hello", start_at="hi", nodes={
            "hi": compute(run=lambda ctx: {"hello": ctx.input["who"]}),
        }, edges=[])
    """))
    with Piwf(project=project) as piwf:
        by_name = piwf.start("hello", {"who": "name"})
        by_file = piwf.start(str(folder / "hello.py:hello"), {"who": "file"})
        assert piwf.wait(by_name).output == {"hello": "name"}
        assert piwf.wait(by_file).output == {"hello": "file"}
        assert piwf.run(by_name).project_path == str(project.resolve())


def test_a_workflow_that_is_no_module_attribute_is_refused_with_the_reason(piwf: Piwf) -> None:
    local = define_workflow(name="local", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
    with pytest.raises(ValueError, match="not a module-level attribute"):
        piwf.start(local)
    with pytest.raises(LookupError, match="there is no run run_nope"):
        piwf.run("run_nope")
