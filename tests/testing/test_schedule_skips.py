"""Schedules on a skipped clock behave as on a host that was down for that long.

A fire comes due when timer time reaches it. A skip that lands within the misfire grace
(`schedule_time.MISFIRE_GRACE_S`, 60 s) of a fire time starts that fire as on time; a skip past
several fire times leaves them behind by more than the grace, so they count as missed and the
schedule's `catch_up` decides (`latest`: the most recent one, `skip`: none). `advance_to` each fire
time sees every fire. These tests hold what docs/testing.md says.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from testsupport import wait_for

from piwf_actors.store.reader import StoreReader
from piwf_actors.store.schedule_queries import schedule_rows
from piwf_actors.testing.kit import Piwf

HOUR_S = 3600


def _project(tmp_path: Path, catch_up: str) -> Path:
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "hourly.py").write_text(textwrap.dedent(f"""
        from piwf_actors.workflows import compute, define_schedule, define_workflow

        tick = define_workflow(name="tick", start_at="t", nodes={{
            "t": compute(run=lambda ctx: {{"fired_at": ctx.input["at"]}}),
        }}, edges=[])
        hourly = define_schedule("hourly", tick, every_s={HOUR_S}, catch_up={catch_up!r},
                                 input=lambda fire: {{"at": fire.timestamp()}})
    """))
    return project


def _row(piwf: Piwf) -> dict | None:
    reader = StoreReader(piwf.host.paths.database)
    try:
        return schedule_rows(reader).get("hourly")
    finally:
        reader.close()


def _first_fire(piwf: Piwf) -> float:
    """The schedule's first fire time, once the keeper has recorded it (the next full hour)."""
    row = wait_for(lambda: _row(piwf), piwf.timeout, "the schedule is recorded")
    assert row["next_fire_at"] is not None and not piwf.host.list_runs()
    return row["next_fire_at"]


def _stepped_past(piwf: Piwf, when: float) -> dict:
    """The schedule's row once the keeper has looked at timer time `when` (its cursor moved past)."""
    return wait_for(lambda: (row := _row(piwf)) and row["next_fire_at"] > when and row, piwf.timeout,
                    f"the schedule steps past {when}")


def test_advancing_to_each_fire_time_starts_every_fire(tmp_path: Path) -> None:
    with Piwf(project=_project(tmp_path, "latest")) as piwf:
        first = _first_fire(piwf)
        for hour in range(3):
            piwf.advance_to(first + hour * HOUR_S)
            _stepped_past(piwf, first + hour * HOUR_S)
        runs = wait_for(lambda: len(piwf.host.list_runs()) == 3 and piwf.host.list_runs(), piwf.timeout,
                        "three runs")
        outputs = sorted(piwf.wait(run.run_id).output["fired_at"] for run in runs)
        assert outputs == [first, first + HOUR_S, first + 2 * HOUR_S]
        assert _row(piwf)["skipped_count"] == 0


def test_a_skip_over_three_fires_starts_the_latest_only(tmp_path: Path) -> None:
    with Piwf(project=_project(tmp_path, "latest")) as piwf:
        first = _first_fire(piwf)
        # Ten minutes past the third fire: all three are more than the grace behind, missed.
        landed = piwf.advance_to(first + 2 * HOUR_S + 600)
        row = _stepped_past(piwf, landed)
        [run] = wait_for(lambda: piwf.host.list_runs(), piwf.timeout, "the catch-up fire")
        assert piwf.wait(run.run_id).output == {"fired_at": first + 2 * HOUR_S}
        assert row["fire_count"] == 1 and row["skipped_count"] == 2, row
        assert piwf.host.get_run(run.run_id).extra["schedule"]["kind"] == "catch_up"


def test_a_skip_over_three_fires_starts_none_under_catch_up_skip(tmp_path: Path) -> None:
    with Piwf(project=_project(tmp_path, "skip")) as piwf:
        first = _first_fire(piwf)
        landed = piwf.advance_to(first + 2 * HOUR_S + 600)
        row = _stepped_past(piwf, landed)
        assert row["fire_count"] == 0 and row["skipped_count"] == 3, row
        assert not piwf.host.list_runs()
        assert row["next_fire_at"] == first + 3 * HOUR_S
