"""docs/schedules.md's example runs as written: its workflow file in a project, a host with
`projects=` (what `piwf-host --project` sets), both schedules listed with their next fires, and a
manual fire of the nightly report that ends `done` with the fire's day as input; and every schedule's
input is computed at fire time, not when the file loads."""

from __future__ import annotations

import datetime
import re
import shutil
import tempfile
import time
from pathlib import Path

from test_readme_python import python_block

from piwf_actors.client import Client
from piwf_actors.workflows.schedule_discovery import load_file


def test_the_schedules_example_runs_as_written(hosts, state_dir) -> None:
    source = python_block("nightly-report")
    assert re.search(r"^# myproject/\.piwf/workflows/reports\.py$", source, flags=re.M)
    project = Path(tempfile.mkdtemp(prefix="pw-proj-", dir="/tmp"))
    try:
        (project / ".piwf" / "workflows").mkdir(parents=True)
        (project / ".piwf" / "workflows" / "reports.py").write_text(source)
        host = hosts(state_dir, projects=(str(project),), max_workers=1, warm_workers=1)
        with Client(state_dir) as client:
            deadline = time.monotonic() + 15
            while True:
                listed = client.request("schedule.list").receipt
                if len(listed["schedules"]) == 2 and all(s["next_fire_at"] for s in listed["schedules"]):
                    break
                assert time.monotonic() < deadline, listed
                time.sleep(0.05)
            assert listed["failures"] == [] and listed["clashes"] == []
            by_name = {s["name"]: s for s in listed["schedules"]}
            assert by_name["nightly-report"]["timing"] == "cron 0 3 * * * (Europe/Berlin)"
            assert by_name["heartbeat"]["next_fire_at"] % 900 == 0
            fired = client.request("schedule.trigger", {"name": "nightly-report"})
            assert fired.ok, fired
            beat = client.request("schedule.trigger", {"name": "heartbeat"})
            assert beat.ok, beat
        beaten = host.wait_for_run(beat.receipt["run_id"], timeout=30)
        fire_day = datetime.datetime.fromtimestamp(beaten["schedule"]["fire_time"], datetime.UTC).date()
        assert beaten.status == "done" and beaten.input == {"day": fire_day.isoformat()}
        view = host.wait_for_run(fired.receipt["run_id"], timeout=30)
        assert view.status == "done" and view.output["day"] == view.input["day"]
        assert view["schedule"]["name"] == "nightly-report" and view["schedule"]["kind"] == "manual"
    finally:
        shutil.rmtree(project, ignore_errors=True)


def test_the_schedules_example_computes_every_input_at_fire_time(tmp_path: Path) -> None:
    """Nothing in the example is computed when the file loads: a host that loaded it on one day and fires
    on another gives each run its fire's day (a `date.today()` in the file would freeze the load day)."""
    path = tmp_path / "reports.py"
    path.write_text(python_block("nightly-report"))
    loaded = {item.name: item.schedule for item in load_file(str(path), str(tmp_path))}
    assert set(loaded) == {"nightly-report", "heartbeat"}
    for name, schedule in loaded.items():
        fire_time = datetime.datetime(2031, 7, 14, 12, 0, tzinfo=datetime.UTC).timestamp()  # not today
        assert schedule.input_for(fire_time) == {"day": "2031-07-14"}, name
