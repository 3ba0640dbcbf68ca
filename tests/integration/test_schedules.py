"""Schedules across real host processes: `piwf-host --project DIR` (its CLI entry, in a process of its own).

- A host SIGKILLed while an every-second schedule fires, and a new host on the
  same state directory: every fire time happened exactly once — no fire twice,
  none lost (catch_up="all" takes the downtime's fires) — and an oracle file
  the runs write outside the database, one line per execution, shows every
  fire executed exactly once (but for an execution a host's end cut off
  before it committed).
- `catch_up` after downtime: three schedules (latest, skip, all) stopped with
  their host, left alone for a few seconds, then a new host: `latest` starts
  only the most recent missed fire, `skip` none, `all` the most recent
  `max_catch_up`.
"""

from __future__ import annotations

import collections
import json
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
import uuid

from piwf_actors.workflows import compute, define_schedule, define_workflow


def _note(ctx):
    # The oracle: one line per execution, outside the database, with an id of its own (a run
    # executed twice writes two lines that differ): "<fire time> <run id> <host> <execution id>".
    # The execution id is the node's output too, so the database tells which execution committed.
    execution = uuid.uuid4().hex
    host = os.environ.get("PIWF_SCHEDULE_HOST", "-")
    with open(os.environ["PIWF_SCHEDULE_ORACLE"], "a") as oracle:
        oracle.write(f"{ctx.input['fire']!r} {ctx.run_id} {host} {execution}\\n")
    return {"fire": ctx.input["fire"], "execution": execution}


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


def _not_executed_exactly_once(oracle_lines: list[str], fires: list[dict[str, Any]], committed: dict[str, str],
                               done_at_kill: set[str]) -> list[str]:
    """What the oracle shows against "every fire executed exactly once"; [] when it holds.

    `committed`: run id → the execution id its node committed (its output). An execution that did
    not commit is allowed only where a host's end cut it off before its commit: at most one by the
    killed host (`first`), in a run not done at the kill, and at most one by the host stopped at
    the end (`second`), in a run it never committed."""
    run_of_fire = {fire["fire_time"]: fire["run_id"] for fire in fires}
    fire_of_run = {run_id: fire_time for fire_time, run_id in run_of_fire.items()}
    executions: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)  # run id → [(host, execution)]
    problems = []
    for line in oracle_lines:
        fire, run_id, host, execution = line.split(" ")
        if run_id not in fire_of_run or float(fire) != fire_of_run[run_id]:
            problems.append(f"execution {execution} of run {run_id} (fire {fire}) is not the run of its fire")
        executions[run_id].append((host, execution))
    for fire_time, run_id in run_of_fire.items():
        ran = executions.get(run_id, [])
        ids = [execution for _, execution in ran]
        if len(set(ids)) != len(ids):
            problems.append(f"fire {fire_time!r}: an execution logged twice: {ran}")
        if run_id in committed and ids.count(committed[run_id]) != 1:
            problems.append(f"fire {fire_time!r}: the committed execution {committed[run_id]} is not in the "
                            f"oracle once: {ran}")
        if run_id in done_at_kill and len(ran) != 1:
            problems.append(f"fire {fire_time!r}: done before the kill, yet executed {len(ran)} times: {ran}")
        cut_off = [(host, execution) for host, execution in ran if execution != committed.get(run_id)]
        by_first = [execution for host, execution in cut_off if host == "first"]
        by_second = [execution for host, execution in cut_off if host == "second"]
        if len(by_first) > 1 or len(by_second) > 1 or len(by_first) + len(by_second) != len(cut_off):
            problems.append(f"fire {fire_time!r}: executions that did not commit, more than a host's end "
                            f"can explain: {ran} (committed: {committed.get(run_id)})")
        if by_second and run_id in committed:
            problems.append(f"fire {fire_time!r}: executed again by the second host although it committed: {ran}")
    return problems


def _done(state_dir: Path) -> set[str]:
    return {row["run_id"] for row in rows(state_dir, "SELECT run_id FROM run WHERE status = 'done'")}


def _committed_executions(state_dir: Path) -> dict[str, str]:
    """run id → the execution id its node committed."""
    found = {}
    for row in rows(state_dir, "SELECT run_id, output_json FROM node_attempt WHERE status = 'succeeded'"):
        assert row["output_json"] is not None, row  # small: kept inline
        found[row["run_id"]] = json.loads(row["output_json"])["execution"]
    return found


def test_a_host_killed_and_restarted_fires_each_time_exactly_once(guard, state_dir, tmp_path, monkeypatch) -> None:
    oracle = tmp_path / "oracle.txt"
    monkeypatch.setenv("PIWF_SCHEDULE_ORACLE", str(oracle))
    project = _project(tmp_path, """
        every = define_schedule(name="every", workflow=note, every_s=1, catch_up="all", max_catch_up=100,
                                input=lambda t: {"fire": t.timestamp()})
    """)
    monkeypatch.setenv("PIWF_SCHEDULE_HOST", "first")  # the oracle's host field, inherited by its workers
    first = _start(guard, state_dir, project)
    wait_for(lambda: len(_fires(state_dir, "every")) >= 3 and len(_done(state_dir)) >= 2, 30,
             "three fires and two runs done before the kill")
    assert first.sigkill() < 0
    before = _fires(state_dir, "every")
    done_at_kill = _done(state_dir)
    monkeypatch.setenv("PIWF_SCHEDULE_HOST", "second")
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
    # The oracle: one line per execution. Every fire was executed exactly once, but for an execution
    # a host's end cut off before it committed (then executed again, by the next host).
    committed = _committed_executions(state_dir)
    problems = _not_executed_exactly_once(oracle.read_text().splitlines(), after, committed, done_at_kill)
    assert not problems, "\n".join(problems)


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
