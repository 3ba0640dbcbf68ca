"""The schedule keeper: its pure planning step, then in-process hosts with schedule files in a project.

An interval schedule fires on time; the files are reloaded when they change;
pause, resume and trigger go through the socket; run.get names the schedule;
a fire whose input function raises is recorded with its error and no run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import gated_source, rows, wait_for

from piwf_actors.actors.schedules import plan_tick
from piwf_actors.client import Client
from piwf_actors.workflows import define_schedule
from piwf_actors.workflows.schedule_discovery import LoadedSchedule

HEADER = """
from piwf_actors.workflows import compute, define_schedule, define_workflow

echo = define_workflow(name="echo", start_at="a", nodes={"a": compute(run=lambda ctx: {"got": ctx.input})}, edges=[])
"""


@pytest.fixture
def project() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pw-proj-", dir="/tmp"))
    (path / ".piwf" / "workflows").mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_schedules(project: Path, body: str, name: str = "sched.py") -> Path:
    """A workflow file with the `echo` workflow and `body`; its mtime is moved on so a rewrite within the
    same clock tick is still a change."""
    path = project / ".piwf" / "workflows" / name
    existed = path.exists()
    path.write_text(HEADER + textwrap.dedent(body))
    if existed:
        stamp = time.time_ns() + 1_000_000_000
        os.utime(path, ns=(stamp, stamp))
    return path


def fires(state_dir: Path, name: str) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT fire_time, kind, run_id, error, created_at FROM schedule_fire WHERE schedule = ? "
                          "ORDER BY fire_time", (name,))


# --- plan_tick: pure ----------------------------------------------------------------------------------


def _loaded(schedule: Any) -> LoadedSchedule:
    return LoadedSchedule(schedule, "/p/.piwf/workflows/s.py", "s", "/p", "echo")


def _row(item: LoadedSchedule, **fields: Any) -> dict[str, Any]:
    return {"definition_digest": item.digest, "timing_key": item.schedule.timing.key(), "paused": False,
            "next_fire_at": 110.0, **fields}


def test_plan_records_new_changed_and_resumed_schedules_first() -> None:
    item = _loaded(define_schedule("tick", "echo", every_s=10))
    new = plan_tick({"tick": item}, {}, online_since=100.0, now=103.0)
    assert [s["name"] for s in new.sync] == ["tick"] and new.sync[0]["cursor"] == 110.0 and not new.due
    changed = plan_tick({"tick": item}, {"tick": _row(item, definition_digest="old")}, 100.0, 103.0)
    assert len(changed.sync) == 1
    resumed = plan_tick({"tick": item}, {"tick": _row(item, next_fire_at=None)}, 100.0, 103.0)
    assert len(resumed.sync) == 1
    assert plan_tick({"tick": item}, {"tick": _row(item)}, 100.0, 103.0).sync == ()


def test_plan_fires_what_is_due_and_nothing_while_paused() -> None:
    item = _loaded(define_schedule("tick", "echo", every_s=10))
    due = plan_tick({"tick": item}, {"tick": _row(item)}, online_since=100.0, now=110.2)
    assert [(name, d.fires, d.cursor) for name, d in due.due] == [("tick", (110.0,), 120.0)]
    assert plan_tick({"tick": item}, {"tick": _row(item, paused=True)}, 100.0, 130.0).due == ()
    # After downtime: fires 60..100 came before the keeper (online since 100.5): catch_up decides.
    late = plan_tick({"tick": item}, {"tick": _row(item, next_fire_at=60.0)}, online_since=100.5, now=100.6)
    assert [(d.fires, d.missed, d.skipped) for _name, d in late.due] == [((100.0,), (100.0,), 4)]


# --- a host with schedules ------------------------------------------------------------------------------


def test_an_interval_schedule_fires_on_time(hosts, state_dir, project) -> None:
    write_schedules(project, """
        tick = define_schedule(name="tick", workflow=echo, every_s=1, input=lambda t: {"second": t.second})
    """)
    host = hosts(state_dir, projects=(str(project),), max_workers=2, warm_workers=1)
    started = time.time()
    wait_for(lambda: len(fires(state_dir, "tick")) >= 3, 15, "three fires of an every_s=1 schedule")
    found = fires(state_dir, "tick")
    times = [fire["fire_time"] for fire in found]
    # Consecutive whole seconds, the first one after the host started, none twice.
    assert times == [times[0] + i for i in range(len(times))] and times[0] > started - 1
    assert all(fire["fire_time"] == int(fire["fire_time"]) and fire["kind"] == "scheduled" for fire in found)
    # Each started within a second of its time (the keeper ticks every 0.25 s).
    assert all(0 <= fire["created_at"] - fire["fire_time"] < 1.0 for fire in found), found
    first = host.wait_for_run(found[0]["run_id"], timeout=30)
    assert first.status == "done"
    second = int(found[0]["fire_time"]) % 60
    assert first.output == {"got": {"second": second}}
    assert first["schedule"] == {"name": "tick", "fire_time": found[0]["fire_time"], "kind": "scheduled"}


def test_schedules_reload_when_their_files_change(hosts, state_dir, project) -> None:
    hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=1)
    with Client(state_dir) as client:
        assert client.request("schedule.list").receipt["schedules"] == []
        path = write_schedules(project, """
            tick = define_schedule(name="tick", workflow=echo, every_s=1, input={"version": 1})
        """)
        wait_for(lambda: [s["name"] for s in client.request("schedule.list").receipt["schedules"]] == ["tick"], 10,
                 "the new schedule file to be loaded")
        wait_for(lambda: fires(state_dir, "tick"), 10, "a fire of the new schedule")
        write_schedules(project, """
            tick = define_schedule(name="tick", workflow=echo, every_s=1, input={"version": 2})
        """)

        def second_version() -> bool:
            last = fires(state_dir, "tick")[-1]
            view = client.request("run.get", run_id=last["run_id"]).receipt
            return view is not None and view["input"] == {"version": 2}

        wait_for(second_version, 10, "a fire with the edited input")
        path.write_text("raise RuntimeError('broken on purpose')\n")
        listing = wait_for(lambda: (r := client.request("schedule.list").receipt)["failures"] and r, 10,
                           "the broken file to be reported")
        assert "broken on purpose" in listing["failures"][0]["error"]
        [gone] = listing["schedules"]
        assert gone["name"] == "tick" and gone["loaded"] is False and gone["next_fire_at"] is None
        count = len(fires(state_dir, "tick"))
        time.sleep(2.5)  # an unloaded schedule must not fire: nothing to wait for but time itself
        assert len(fires(state_dir, "tick")) <= count + 1  # at most one already in flight at the edit


def test_pause_resume_and_trigger_through_the_socket(hosts, state_dir, project) -> None:
    write_schedules(project, """
        hourly = define_schedule(name="hourly", workflow=echo, cron="0 * * * *", timezone="Europe/Berlin",
                                 input=lambda t: {"hour": t.hour})
    """)
    host = hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=1)
    with Client(state_dir) as client:
        [item] = wait_for(lambda: [s for s in client.request("schedule.list").receipt["schedules"]
                                   if s["next_fire_at"]], 10, "the schedule's next fire time")
        assert item["timing"] == "cron 0 * * * * (Europe/Berlin)" and item["next_fire_at"] % 3600 == 0
        paused = client.request("schedule.pause", {"name": "hourly"}, idempotency_key="pause-1")
        assert paused.outcome == "accepted" and paused.receipt == {"name": "hourly", "paused": True}
        assert client.request("schedule.pause", {"name": "hourly"}, idempotency_key="pause-1").outcome == "adopted"
        assert client.request("schedule.pause", {"name": "hourly"}).outcome == "rejected"
        assert client.request("schedule.list").receipt["schedules"][0]["paused"] is True
        # A manual fire works while paused, once per request.
        trigger = client.request("schedule.trigger", {"name": "hourly"}, idempotency_key="now-1")
        assert trigger.outcome == "accepted", trigger
        run_id = trigger.receipt["run_id"]
        again = client.request("schedule.trigger", {"name": "hourly"}, idempotency_key="now-1")
        assert again.outcome == "adopted" and again.receipt["run_id"] == run_id
        view = host.wait_for_run(run_id, timeout=30)
        assert view.status == "done" and view["schedule"]["kind"] == "manual"
        assert view["schedule"]["fire_time"] == pytest.approx(trigger.receipt["fire_time"])
        other = client.request("schedule.trigger", {"name": "hourly"}, idempotency_key="now-2")
        assert other.outcome == "accepted" and other.receipt["run_id"] != run_id
        resumed = client.request("schedule.resume", {"name": "hourly"})
        assert resumed.outcome == "accepted" and resumed.receipt == {"name": "hourly", "paused": False}
        wait_for(lambda: client.request("schedule.list").receipt["schedules"][0]["next_fire_at"], 10,
                 "the resumed schedule's next fire time")
        assert client.request("schedule.trigger", {"name": "nope"}).outcome == "notFound"
        assert client.request("schedule.pause", {"name": "nope"}).outcome == "notFound"
        plain = client.request("run.get", run_id=client.start("echo", {}, project_path=str(project))["run_id"])
        assert plain.receipt["schedule"] is None


def test_a_fire_whose_input_function_raises_is_recorded_without_a_run(hosts, state_dir, project) -> None:
    write_schedules(project, """
        def _input(fire_time):
            raise ValueError(f"no input at {fire_time:%S}")

        bad = define_schedule(name="bad", workflow=echo, every_s=1, input=_input)
        missing = define_schedule(name="missing", workflow="no-such-workflow", every_s=1)
    """)
    hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=1)
    [bad] = wait_for(lambda: fires(state_dir, "bad")[:1], 10, "a fire of the failing schedule")
    assert bad["run_id"] is None and bad["error"].startswith("ValueError: no input at ")
    [missing] = wait_for(lambda: fires(state_dir, "missing")[:1], 10, "a fire of the schedule without workflow")
    assert missing["run_id"] is None and "no-such-workflow" in missing["error"]
    with Client(state_dir) as client:
        listed = {s["name"]: s for s in client.request("schedule.list").receipt["schedules"]}
        assert listed["bad"]["last_error"].startswith("ValueError") and listed["bad"]["loaded"] is True
        assert client.request("schedule.trigger", {"name": "bad"}).outcome == "rejected"
    assert rows(state_dir, "SELECT count(*) AS n FROM run")[0]["n"] == 0


def test_a_file_whose_import_blocks_holds_up_neither_the_start_nor_the_stop_of_a_host(
        hosts, state_dir, project) -> None:
    """The keeper loads the project's files off its own thread: a host with such a file in its project
    starts and answers at once, and stops while the import still blocks."""
    workflows = project / ".piwf" / "workflows"
    (workflows / "stuck.py").write_text(gated_source("stuck"))
    started: list[Any] = []
    try:
        starting = threading.Thread(target=lambda: started.append(
            hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=0, load_timeout_s=60)), daemon=True)
        starting.start()
        starting.join(20)
        assert started, "the host did not start while a workflow file of its project was still importing"
        [host] = started
        assert (workflows / "stuck.started").exists()  # the import is under way, and blocks
        assert host.status()["lease"]["live"] is True
        stopping = threading.Thread(target=host.stop, args=("test",), daemon=True)
        stopping.start()
        stopping.join(20)
        assert not stopping.is_alive(), "the host did not stop while a workflow file's import blocked"
    finally:
        (workflows / "stuck.release").touch()


def test_a_trigger_right_after_a_restart_waits_for_the_first_load_of_the_files(hosts, state_dir, project) -> None:
    """The schedule is on record from the first host; the second loads the files off its thread, and a
    trigger that comes before that load is done is built once it is, not refused as not loaded."""
    write_schedules(project, """
        hourly = define_schedule(name="hourly", workflow=echo, cron="0 * * * *", input={"manual": True})
    """)
    first = hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=0)
    wait_for(lambda: rows(state_dir, "SELECT name FROM schedule"), 10, "the schedule on record")
    first.stop("restart")
    host = hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=0)
    with Client(state_dir) as client:
        trigger = client.request("schedule.trigger", {"name": "hourly"})
        assert trigger.outcome == "accepted", trigger
    assert host.wait_for_run(trigger.receipt["run_id"], timeout=30).output == {"got": {"manual": True}}
