"""Schedules across real host processes: `piwf-host --project DIR` (its CLI entry, in a process of its own).

- A host SIGKILLed while an every-second schedule fires, and a new host on the
  same state directory: every fire time happened exactly once — no fire twice,
  none lost (catch_up="all" takes the downtime's fires) — and an oracle file
  the runs write outside the database shows no fire started as two runs.
- `catch_up` after downtime: three schedules (latest, skip, all) stopped with
  their host, left alone for a few seconds, then a new host: `latest` starts
  only the most recent missed fire, `skip` none, `all` the most recent
  `max_catch_up`.
"""

from __future__ import annotations

import collections
import signal
import textwrap
import time
from pathlib import Path
from typing import Any

from wf import harness
from wf.harness import rows, wait_for

guard = harness.guard

HOST_MAIN = Path(__file__).resolve().parent / "wf" / "piwf_host_main.py"

FILE = '''
import os

from piwf_actors.workflows import compute, define_schedule, define_workflow


def _note(ctx):
    # The oracle: one line per execution, outside the database: "<fire time> <run id>".
    with open(os.environ["PIWF_SCHEDULE_ORACLE"], "a") as oracle:
        oracle.write(f"{ctx.input['fire']} {ctx.run_id}\\n")
    return {"fire": ctx.input["fire"]}


note = define_workflow(name="note", start_at="a", nodes={"a": compute(run=_note)}, edges=[])
'''


def _project(base: Path, schedules: str) -> Path:
    project = base / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "scheduled.py").write_text(FILE + textwrap.dedent(schedules))
    return project


def _start(guard: Any, state_dir: Path, project: Path) -> Any:
    """piwf-host on `state_dir` with `project`'s schedules; returns once its schedules are recorded."""
    script = harness.HostScript(["--state-dir", str(state_dir), "--project", str(project), "--max-workers", "2",
                                 "--lease-s", "5"], guard.log_dir, len(guard.scripts), script=HOST_MAIN)
    guard.scripts.append(script)
    wait_for(lambda: "host started" in script.log() or script.proc.poll() is not None, 30,
             lambda: f"the host to start; log:\n{script.log()}")
    assert script.proc.poll() is None, script.log()
    return script


def _fires(state_dir: Path, name: str) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT fire_time, kind, run_id, error FROM schedule_fire WHERE schedule = ? "
                          "ORDER BY fire_time", (name,))


def _stop(script: Any) -> None:
    script.proc.send_signal(signal.SIGTERM)
    assert script.proc.wait(30) == 0, script.log()


def _pass_time(seconds: float) -> None:
    """Downtime: nothing to wait for but the clock (no host runs meanwhile)."""
    until = time.time() + seconds
    while time.time() < until:
        time.sleep(0.05)


def test_a_host_killed_and_restarted_fires_each_time_exactly_once(guard, state_dir, tmp_path, monkeypatch) -> None:
    oracle = tmp_path / "oracle.txt"
    monkeypatch.setenv("PIWF_SCHEDULE_ORACLE", str(oracle))
    project = _project(tmp_path, """
        every = define_schedule(name="every", workflow=note, every_s=1, catch_up="all", max_catch_up=100,
                                input=lambda t: {"fire": t.timestamp()})
    """)
    first = _start(guard, state_dir, project)
    wait_for(lambda: len(_fires(state_dir, "every")) >= 3, 20, "three fires before the kill")
    assert first.sigkill() < 0
    before = _fires(state_dir, "every")
    _pass_time(2.5)
    second = _start(guard, state_dir, project)
    restarted = time.time()
    wait_for(lambda: _fires(state_dir, "every")[-1]["fire_time"] >= restarted + 2, 20, "fires after the restart")
    _stop(second)
    after = _fires(state_dir, "every")
    times = [fire["fire_time"] for fire in after]
    # Every second from the first fire to the last, each once: nothing fired twice, nothing lost.
    assert times == [times[0] + i for i in range(len(times))], times
    assert after[:len(before)] == before  # what was committed before the kill stands as it was
    caught_up = [fire["fire_time"] for fire in after if fire["kind"] == "catch_up"]
    assert len(caught_up) >= 2 and all(t > before[-1]["fire_time"] for t in caught_up)
    run_ids = [fire["run_id"] for fire in after]
    assert None not in run_ids and len(set(run_ids)) == len(run_ids)
    assert rows(state_dir, "SELECT count(*) AS n FROM run")[0]["n"] == len(after)
    # The oracle: no fire was started as two runs (a run may write twice, if it was cut by the kill).
    runs_by_fire: dict[float, set[str]] = collections.defaultdict(set)
    for line in oracle.read_text().splitlines():
        fire, run_id = line.split(" ")
        runs_by_fire[float(fire)].add(run_id)
    assert all(len(ids) == 1 for ids in runs_by_fire.values()), runs_by_fire
    assert {next(iter(ids)) for ids in runs_by_fire.values()} <= set(run_ids)


def test_catch_up_modes_after_downtime(guard, state_dir, tmp_path, monkeypatch) -> None:
    down_s = 4.0
    monkeypatch.setenv("PIWF_SCHEDULE_ORACLE", str(tmp_path / "oracle.txt"))
    project = _project(tmp_path, """
        def _input(t):
            return {"fire": t.timestamp()}

        latest = define_schedule(name="latest", workflow=note, every_s=1, catch_up="latest", input=_input)
        skip = define_schedule(name="skip", workflow=note, every_s=1, catch_up="skip", input=_input)
        every = define_schedule(name="all", workflow=note, every_s=1, catch_up="all", max_catch_up=2, input=_input)
    """)
    names = ("latest", "skip", "all")
    first = _start(guard, state_dir, project)
    wait_for(lambda: all(_fires(state_dir, name) for name in names), 20, "a fire of each schedule")
    _stop(first)
    last_before = {name: _fires(state_dir, name)[-1]["fire_time"] for name in names}
    _pass_time(down_s)
    second = _start(guard, state_dir, project)
    restarted = time.time()
    wait_for(lambda: all(_fires(state_dir, name)[-1]["fire_time"] >= restarted + 1 for name in names), 20,
             "fires of each schedule after the restart")
    _stop(second)
    seen: dict[str, tuple[list[float], list[float]]] = {}
    for name in names:
        later = [fire for fire in _fires(state_dir, name) if fire["fire_time"] > last_before[name]]
        caught = [fire["fire_time"] for fire in later if fire["kind"] == "catch_up"]
        on_time = [fire["fire_time"] for fire in later if fire["kind"] == "scheduled"]
        assert on_time and on_time == [on_time[0] + i for i in range(len(on_time))], later
        seen[name] = (caught, on_time)
    caught, on_time = seen["latest"]
    assert caught == [on_time[0] - 1]  # the most recent missed fire only
    caught, on_time = seen["skip"]
    assert caught == [] and on_time[0] - last_before["skip"] >= down_s  # the downtime left a gap
    caught, on_time = seen["all"]
    assert caught == [on_time[0] - 2, on_time[0] - 1]  # the most recent max_catch_up (2)
    skipped = {row["name"]: row["skipped_count"] for row in rows(state_dir, "SELECT name, skipped_count FROM schedule")}
    missed = {name: int(seen[name][1][0] - last_before[name]) - 1 for name in names}
    assert skipped == {"latest": missed["latest"] - 1, "skip": missed["skip"], "all": missed["all"] - 2}
