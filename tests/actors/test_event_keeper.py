"""The event keeper on a real embedded host: what a subscriber's own functions do to an event (a filter
that raises, an input that is not JSON) is that event's delivery, with its line, and the other
subscribers and later events go on; a workflow file that appears later is picked up and takes only the
events emitted after it was found (no backfill); a name defined twice is reported, the first wins."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from piwf_actors import HostHandle

FILE = '''
from piwf_actors.workflows import compute, define_workflow, on_event


def _boom(event):
    if event["data"].get("boom"):
        raise ValueError("no booms here")
    return True


fussy = define_workflow(name="fussy", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
                        on_event=on_event("thing", filter=_boom))
odd = define_workflow(name="odd", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
                      on_event=on_event("thing", input=lambda event: {"when": object()}))
plain = define_workflow(name="plain", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
                        on_event=on_event("thing"))
'''

LATER = '''
from piwf_actors.workflows import compute, define_workflow, on_event

late = define_workflow(name="late", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
                       on_event=on_event("thing"))
plain = define_workflow(name="plain", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[],
                        on_event=on_event("other"))
'''


def _until(what: str, check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _outcomes(host: HostHandle, event_id: str, count: int) -> dict[str, tuple[str, Any]]:
    event = _until(f"{count} deliveries of {event_id}",
                   lambda: (lambda e: e if len(e["deliveries"]) >= count else None)(host.get_event(event_id)))
    return {d["subscription"]: (d["outcome"], d["error"]) for d in event["deliveries"]}


def test_subscriber_code_that_fails_fails_that_delivery_only(hosts: Any, state_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "project" / ".piwf" / "workflows"
    folder.mkdir(parents=True)
    (folder / "a.py").write_text(FILE)
    host = hosts(state_dir, projects=(str(tmp_path / "project"),), max_workers=2)
    _until("three subscriptions", lambda: len(host.list_event_subscriptions()) == 3)
    boom = host.emit_event("thing", {"boom": True})
    calm = host.emit_event("thing", {"n": 1})
    first = _outcomes(host, boom["event_id"], 3)
    assert first["fussy"] == ("failed", "ValueError: no booms here")
    assert first["odd"][0] == "failed" and "JSON" in first["odd"][1], first["odd"]
    assert first["plain"][0] == "started"
    second = _outcomes(host, calm["event_id"], 3)
    assert second["fussy"][0] == "started" and second["plain"][0] == "started" and second["odd"][0] == "failed"

    # A file added later: its workflow takes the events after it was found, not the earlier ones; a
    # name defined again in another file is reported, the first definition (a.py's "plain") stays.
    (folder / "b.py").write_text(LATER)
    _until("the late subscription", lambda: len(host.list_event_subscriptions()) == 4)
    subs = {item["name"]: item for item in host.list_event_subscriptions()}
    assert subs["plain"]["event_name"] == "thing" and subs["late"]["cursor_seq"] >= calm["seq"]
    after = host.emit_event("thing", {"n": 2})
    assert set(_outcomes(host, after["event_id"], 4)) == {"fussy", "odd", "plain", "late"}
    assert "late" not in {d["subscription"] for d in host.get_event(calm["event_id"])["deliveries"]}
    started = [run for run in host.list_runs() if run.workflow == "late"]
    assert len(started) == 1


BATCHED = '''
from piwf_actors.workflows import batch, compute, define_workflow, on_event

tally = define_workflow(name="tally", start_at="a", edges=[],
                        nodes={"a": compute(run=lambda ctx: sorted(e["data"]["n"] for e in ctx.input["events"]))},
                        on_event=on_event("vote"), batch=batch(max_items=10, max_wait_s=3600))
'''


def test_a_batch_falls_due_on_timer_time(tmp_path: Path) -> None:
    """The test kit's skip moves a batch's max_wait_s as it moves a sleep: three votes, an hour skipped,
    one run with the three."""
    from piwf_actors.testing import Piwf

    folder = tmp_path / "project" / ".piwf" / "workflows"
    folder.mkdir(parents=True)
    (folder / "votes.py").write_text(BATCHED)
    with Piwf(project=tmp_path / "project") as piwf:
        _until("the subscription", lambda: piwf.host.list_event_subscriptions())
        for n in range(3):
            piwf.emit("vote", {"n": n})
        _until("the batch to open", lambda: piwf.host.list_events("vote")[0]["started"] == 1)
        assert piwf.host.list_runs() == []  # 3 of 10, and the hour has not passed
        piwf.skip(3600)
        [run] = _until("the batch's run", lambda: piwf.host.list_runs())
        assert piwf.wait(run.run_id).output == [0, 1, 2]
