"""What a client reads over the socket counts on the host's timer clock: after a skip, `run.get`
and a `run` watch say how much timer time a wait has left, as the embedding handle does (what
`piwf show`, piwf-top and `piwf graph RUN` read on a test host)."""

from __future__ import annotations

import kit_flows as flows

from piwf_actors.client.connection import Client
from piwf_actors.testing.kit import Piwf

#: Real seconds a loaded machine may take between the kit's read and the socket's: a remaining
#: time is compared within this, never to the second.
SLACK_S = 60


def test_run_get_over_the_socket_counts_remaining_on_timer_time(piwf: Piwf) -> None:
    run = piwf.start(flows.napper)
    piwf.wait_parked(run, "waiting")
    piwf.skip(1800)
    with Client(piwf.state_dir) as client:
        view = client.get(run)
    [nap] = view["waits"]
    # On host time an hour would still be left; on timer time half of it is.
    assert 1800 - SLACK_S < nap["remaining_s"] <= 1800, nap


def test_a_decisions_remaining_over_the_socket_counts_on_timer_time(piwf: Piwf) -> None:
    run = piwf.start(flows.gate)
    piwf.request(run, "decision")
    piwf.skip(2700)
    with Client(piwf.state_dir) as client:
        [waiting] = client.get(run)["waiting"]
    assert waiting["clock"] == "running" and 900 - SLACK_S < waiting["remaining_s"] <= 900, waiting


def test_a_run_watch_counts_remaining_on_timer_time(piwf: Piwf) -> None:
    run = piwf.start(flows.listener)
    piwf.wait_parked(run, "waiting")
    piwf.skip(86400 - 600)
    with Client(piwf.state_dir) as client:
        first = next(client.watch("run", run_id=run, timeout=piwf.timeout))
    [wait] = first["payload"]["waits"]
    assert wait["kind"] == "message" and 600 - SLACK_S < wait["remaining_s"] <= 600, wait
