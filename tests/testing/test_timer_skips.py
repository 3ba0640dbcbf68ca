"""Each kind of workflow timer comes due when the test kit skips its clock, on a real host.

Every timeout here is an hour or more of timer time; each test passes in real seconds because the
kit moves timer time forward (`piwf.skip`), never because it waited. The tests use the package's own
`piwf` fixture (piwf_actors/testing/pytest_plugin.py), as a user's tests do.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import kit_flows as flows
import pytest

from piwf_actors.testing.kit import Piwf

HOUR_S = 3600
#: Real seconds a loaded machine may take between a timer's start and the test's read of it: a
#: remaining time is checked within this, never to the second (schedules: test_schedule_skips.py).
SLACK_S = 60
#: A wake-up time is taken from the clock of the process that started the sleep and its remaining time
#: from the host's: the two reads of timer time can differ by milliseconds (a remaining time of
#: 3600.003 s was seen once), so the top of a range allows this much.
CLOCKS_S = 1


def test_a_durable_sleep_wakes_when_its_hour_is_skipped(piwf: Piwf) -> None:
    run = piwf.start(flows.napper)
    parked = piwf.wait_parked(run, "waiting")
    [nap] = parked.waits
    assert nap["kind"] == "sleep" and HOUR_S - SLACK_S < nap["remaining_s"] <= HOUR_S + CLOCKS_S

    piwf.skip(1800)  # half of it: still asleep, with half an hour of timer time left
    half = piwf.run(run)
    assert half.status == "parked" and 1800 - SLACK_S < half.waits[0]["remaining_s"] <= 1800 + CLOCKS_S

    piwf.skip(1800)
    done = piwf.wait(run)
    assert done.status == "done", piwf.describe(run)
    assert done.output == {"slept_until": nap["wake_at"]}
    assert [e.payload["by"] for e in piwf.events(run, "wait_settled")] == ["sleep"]


def test_advance_to_a_time_wakes_what_sleeps_until_then(piwf: Piwf) -> None:
    run = piwf.start(flows.napper)
    [nap] = piwf.wait_parked(run, "waiting").waits
    piwf.advance_to(datetime.datetime.fromtimestamp(nap["wake_at"], datetime.UTC))
    assert piwf.wait(run).output == {"slept_until": nap["wake_at"]}
    with pytest.raises(ValueError, match="only moves forward"):
        piwf.advance_to(nap["wake_at"] - 60)


def test_a_message_wait_times_out_after_a_skipped_day(piwf: Piwf) -> None:
    run = piwf.start(flows.listener)
    [wait] = piwf.wait_parked(run, "waiting").waits
    assert wait["kind"] == "message" and wait["clock"] == "running"
    piwf.skip(86400)
    done = piwf.wait(run)
    assert done.status == "done" and done.output == {"news": "none"}
    assert [e.payload["by"] for e in piwf.events(run, "wait_settled")] == ["timeout"]


def test_a_message_wait_without_a_default_fails_message_timeout(piwf: Piwf) -> None:
    run = piwf.start(flows.strict_listener)
    piwf.wait_parked(run, "waiting")
    piwf.skip(601)
    failed = piwf.wait(run)
    assert failed.status == "failed" and failed.error.code == "node_failed", failed.error
    assert failed.node("listen").error.code == "message_timeout"


def test_a_decision_takes_its_default_when_its_timeout_is_skipped(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    decision = piwf.request(run, "decision")
    assert decision.deadline_at is not None and HOUR_S - SLACK_S < decision.deadline_at - piwf.now() <= HOUR_S + CLOCKS_S
    piwf.skip(3600)
    done = piwf.wait(run)
    assert done.output == {"went": False}
    assert done.node("approve").output == {"choice": "stop"}
    assert done.node("approve").extra["answer"]["by"]["kind"] == "timeout"


def test_a_checkpoint_fails_checkpoint_timeout_when_its_timeout_is_skipped(piwf: Piwf) -> None:
    run = piwf.start(flows.note)
    piwf.request(run, "checkpoint")
    piwf.skip(600 - SLACK_S)
    assert piwf.run(run).status == "parked"  # a minute early: nothing happens
    piwf.skip(SLACK_S)
    failed = piwf.wait(run)
    assert failed.status == "failed" and failed.error.code == "checkpoint_timeout", failed.error


def test_an_agent_steps_missing_submissions_count_at_each_skipped_deadline(piwf: Piwf) -> None:
    run = piwf.start(flows.summary)
    first = piwf.request(run, "agent")
    piwf.skip(900)  # one missing submission of two: the deadline is set again, 900 s on
    piwf.wait_for_event(run, "submission_missing")
    again = piwf.request(run, "agent")
    assert again.request_id == first.request_id and again.deadline_at > first.deadline_at
    assert piwf.run(run).status == "parked"
    piwf.skip(900)
    failed = piwf.wait(run)
    assert failed.status == "failed" and failed.error.code == "missing_submission", failed.error


def test_a_retry_back_off_of_an_hour_ends_when_it_is_skipped(piwf: Piwf, tmp_path: Path) -> None:
    marker = tmp_path / "calls"
    run = piwf.start(flows.flaky, {"marker": str(marker)})
    piwf.wait_until(run, lambda view: view.node("try") is not None and view.node("try").status == "failed",
                    "to fail its first attempt")
    assert piwf.run(run).status == "running"  # its worker sleeps the back-off
    piwf.skip(3600)
    done = piwf.wait(run)
    assert done.status == "done" and done.output == {"calls": 2}, piwf.describe(run)
    assert done.node("try").attempts == 2


def test_a_paused_runs_deadline_stands_still_in_timer_time(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    piwf.request(run, "decision")
    piwf.skip(1800)  # half of the hour, then a pause: half an hour of timer time is kept
    piwf.host.pause_run(run)
    paused = piwf.run(run)  # (a run parked waiting stays parked, with its pause requested)
    assert paused.pause_requested
    [waiting] = paused.extra["waiting"]
    assert waiting["clock"] == "paused" and 1800 - SLACK_S < waiting["remaining_s"] <= 1800 + CLOCKS_S
    piwf.skip(7200)  # a pause longer than the deadline: nothing expires
    assert piwf.run(run).status == "parked" and not piwf.host.pending_interactions()[0].deadline_at
    piwf.host.resume_run(run)
    resumed = piwf.request(run, "decision")
    assert resumed.deadline_at is not None and 1800 - SLACK_S < resumed.deadline_at - piwf.now() <= 1800 + CLOCKS_S
    piwf.skip(1800)
    assert piwf.wait(run).output == {"went": False}
