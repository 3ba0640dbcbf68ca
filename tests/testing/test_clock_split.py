"""Timer time moves, host time does not: a host whose timer clock is skipped a month ahead keeps its
lease and its run claims, and its runs finish (piwf_actors/clock.py)."""

from __future__ import annotations

import time

import kit_flows as flows
from testsupport import wait_for

from piwf_actors.testing.kit import Piwf

MONTH_S = 30 * 86400


def test_a_month_skipped_keeps_the_lease_and_the_claim_of_a_running_run() -> None:
    # The default leases (15 s host lease, 30 s claims): a month is far beyond either, so had a
    # renewal or a claim's check been judged by timer time, the lease or the claim would be gone.
    with Piwf() as piwf:
        epoch = piwf.host.epoch
        run = piwf.start(flows.slow)
        piwf.wait_until(run, lambda view: view.status == "running", "to run")  # its node takes a second
        renewed = piwf.host.status()["lease"]["heartbeat_at"]
        piwf.skip(MONTH_S)
        done = piwf.wait(run)
        assert done.status == "done" and done.node("work").attempts == 1, piwf.describe(run)
        kinds = [event.kind for event in piwf.events(run)]
        assert kinds.count("run_claimed") == 1 and "run_requeued" not in kinds, kinds
        # A renewal after the skip, on host time: the lease is still this host's, live, and runs
        # out a lease length from now, not a month ahead.
        status = wait_for(lambda: (status := piwf.host.status())["lease"]["heartbeat_at"] > renewed and status,
                          piwf.timeout, "the lease is renewed after the skip")
        assert status["lease"]["live"] and piwf.host.epoch == epoch and not piwf.host.stopped
        assert status["lease"]["expires_at"] < time.time() + 3600  # host time, not a month ahead
        after = piwf.start(flows.slow)
        assert piwf.wait(after).status == "done"


def test_records_keep_host_time_while_timers_take_timer_time() -> None:
    with Piwf() as piwf:
        piwf.skip(MONTH_S)
        run = piwf.start(flows.napper)
        parked = piwf.wait_parked(run, "waiting")
        [nap] = parked.waits
        # The wake-up is an hour of timer time away; the run's own times are host time.
        assert abs(nap["wake_at"] - (time.time() + MONTH_S + 3600)) < 60
        assert abs(parked.created_at - time.time()) < 60
        wait_for(lambda: piwf.host.status()["lease"]["live"], 5, "the lease is live")
