"""Schedule timing and the pure step `due_fires`, with a fixed clock: no host, no threads.

Cron is evaluated in the schedule's IANA zone, across DST changes the way
cronsim (and Debian's cron) do it; intervals are whole multiples of every_s
since the epoch; missed fires follow `catch_up`.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.ids import id_time
from piwf_actors.workflows import Workflow, compute, define_schedule, define_workflow
from piwf_actors.workflows.schedule_time import (
    MISFIRE_GRACE_S,
    ScheduleState,
    Timing,
    due_fires,
    fire_key,
    fire_run_id,
)

NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")


def at(zone: ZoneInfo, *parts: int, fold: int = 0) -> float:
    return datetime(*parts, tzinfo=zone, fold=fold).timestamp()


def local(t: float, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(t, zone).strftime("%Y-%m-%d %H:%M %Z")


def series(timing: Timing, start: float, n: int) -> list[float]:
    found, t = [], start
    for _ in range(n):
        nxt = timing.next_after(t)
        assert nxt is not None
        found.append(nxt)
        t = nxt
    return found


# --- cron across DST ---------------------------------------------------------------------------------


def test_daily_cron_in_new_york_across_spring_forward() -> None:
    # 2025-03-09 02:00 EST jumps to 03:00 EDT: 02:30 does not exist that day and fires right after the jump.
    timing = Timing(cron="30 2 * * *", timezone="America/New_York")
    fires = series(timing, at(NEW_YORK, 2025, 3, 7, 12, 0), 4)
    assert [local(t, NEW_YORK) for t in fires] == [
        "2025-03-08 02:30 EST", "2025-03-09 03:00 EDT", "2025-03-10 02:30 EDT", "2025-03-11 02:30 EDT"]
    # One fire a day, and the day of the change is an hour short between its neighbours.
    assert [round((b - a) / 3600, 2) for a, b in zip(fires, fires[1:], strict=False)] == [23.5, 23.5, 24.0]


def test_daily_cron_in_new_york_across_fall_back_fires_once() -> None:
    # 2025-11-02 02:00 EDT falls back to 01:00 EST: 01:30 happens twice, the schedule fires at the first only.
    timing = Timing(cron="30 1 * * *", timezone="America/New_York")
    fires = series(timing, at(NEW_YORK, 2025, 10, 31, 12, 0), 4)
    assert [local(t, NEW_YORK) for t in fires] == [
        "2025-11-01 01:30 EDT", "2025-11-02 01:30 EDT", "2025-11-03 01:30 EST", "2025-11-04 01:30 EST"]
    assert [round((b - a) / 3600) for a, b in zip(fires, fires[1:], strict=False)] == [24, 25, 24]


def test_cron_every_30_minutes_in_berlin_across_fall_back_fires_each_instant_once() -> None:
    # 2025-10-26 03:00 CEST falls back to 02:00 CET: */30 fires on both passes of the repeated hour,
    # each a distinct instant half an hour after the previous one.
    timing = Timing(cron="*/30 * * * *", timezone="Europe/Berlin")
    fires = series(timing, at(BERLIN, 2025, 10, 26, 1, 45), 6)
    assert [local(t, BERLIN) for t in fires] == [
        "2025-10-26 02:00 CEST", "2025-10-26 02:30 CEST", "2025-10-26 02:00 CET", "2025-10-26 02:30 CET",
        "2025-10-26 03:00 CET", "2025-10-26 03:30 CET"]
    assert {b - a for a, b in zip(fires, fires[1:], strict=False)} == {1800.0}


def test_cron_in_berlin_across_spring_forward_by_the_step_function() -> None:
    # The step function with a fixed clock: a 02:15 daily schedule, the host up all along. On 2025-03-30
    # 02:00 CET becomes 03:00 CEST; the fire of that day comes at 03:00 CEST, once.
    timing = Timing(cron="15 2 * * *", timezone="Europe/Berlin")
    online = at(BERLIN, 2025, 3, 28, 12, 0)
    cursor = timing.next_after(online)
    assert local(cursor, BERLIN) == "2025-03-29 02:15 CET"
    fired: list[float] = []
    now = online
    while now < at(BERLIN, 2025, 4, 1, 0, 0):
        now += 60
        due = due_fires(ScheduleState(timing, cursor, online), now)
        fired += due.fires
        assert due.skipped == 0 and not due.missed
        cursor = due.cursor if due.cursor is not None else cursor
    assert [local(t, BERLIN) for t in fired] == [
        "2025-03-29 02:15 CET", "2025-03-30 03:00 CEST", "2025-03-31 02:15 CEST"]


def test_cron_with_seconds_and_utc_default() -> None:
    timing = Timing(cron="*/20 * * * * *")
    assert series(timing, 1_800_000_000.0, 3) == [1_800_000_000.0 + 20, 1_800_000_000.0 + 40, 1_800_000_000.0 + 60]


# --- intervals -----------------------------------------------------------------------------------------


def test_interval_fires_at_multiples_of_every_s_since_the_epoch() -> None:
    timing = Timing(every_s=60.0)
    assert timing.next_after(119.5) == 120.0
    assert timing.next_after(120.0) == 180.0
    assert timing.fires_from(120.0, 300.0, 100) == [120.0, 180.0, 240.0, 300.0]
    assert timing.last_before(300.0, 0.0, 2) == [180.0, 240.0]
    assert timing.count_between(120.0, 300.0) == 3


# --- catch-up after downtime ---------------------------------------------------------------------------


DOWN_FROM, UP_AT = 1000.0, 1010.5  # a host that stopped at 1000 and started again at 1010.5


@pytest.mark.parametrize(("mode", "fires", "skipped"), [
    ("latest", [1010.0], 9),
    ("skip", [], 10),
    ("all", [1007.0, 1008.0, 1009.0, 1010.0], 6),
])
def test_catch_up_modes_after_downtime(mode: str, fires: list[float], skipped: int) -> None:
    # every_s=1, cursor at 1001 (the fire at 1000 was the last one started): 1001..1010 were missed.
    state = ScheduleState(Timing(every_s=1.0), cursor=DOWN_FROM + 1, online_since=UP_AT, catch_up=mode,
                          max_catch_up=4)
    due = due_fires(state, UP_AT)
    assert list(due.fires) == fires and list(due.missed) == fires
    assert due.skipped == skipped
    assert due.cursor == 1011.0  # the next fire is in the future whatever the mode


def test_missed_fires_and_on_time_fires_together() -> None:
    # The host came back at 1010.5; at 1012.2 the keeper ticks late: 1011 and 1012 are on time and fire.
    state = ScheduleState(Timing(every_s=1.0), cursor=1001.0, online_since=1010.5, catch_up="latest")
    due = due_fires(state, 1012.2)
    assert due.fires == (1010.0, 1011.0, 1012.0) and due.missed == (1010.0,) and due.skipped == 9


def test_a_fire_later_than_the_misfire_grace_counts_as_missed() -> None:
    # A host that stalled (suspended laptop) for longer than the grace: its old fires follow catch_up.
    timing = Timing(every_s=10.0)
    state = ScheduleState(timing, cursor=100.0, online_since=0.0, catch_up="skip")
    due = due_fires(state, 100.0 + MISFIRE_GRACE_S + 25)
    assert due.fires == (130.0, 140.0, 150.0, 160.0, 170.0, 180.0)  # within the grace of now (185)
    assert due.skipped == 3  # 100, 110, 120


def test_nothing_due_before_the_cursor_and_nothing_while_paused() -> None:
    timing = Timing(every_s=5.0)
    assert due_fires(ScheduleState(timing, cursor=105.0, online_since=0.0), 104.9).fires == ()
    paused = due_fires(ScheduleState(timing, cursor=50.0, online_since=0.0, paused=True), 104.9)
    assert paused.fires == () and paused.cursor == 50.0
    fresh = due_fires(ScheduleState(timing, cursor=None, online_since=0.0), 104.9)
    assert fresh.fires == () and fresh.cursor == 105.0


def test_a_month_of_missed_one_second_fires_is_counted_not_listed() -> None:
    state = ScheduleState(Timing(every_s=1.0), cursor=1.0, online_since=2_592_000.5, catch_up="all", max_catch_up=3)
    due = due_fires(state, 2_592_000.5)
    assert due.fires == (2_591_998.0, 2_591_999.0, 2_592_000.0) and due.skipped == 2_592_000 - 3


def test_fire_ids_are_derived_from_schedule_and_fire() -> None:
    at = 1_800_000_000.0
    key = fire_key(at)
    assert fire_run_id("nightly", key, at) == fire_run_id("nightly", key, at)
    assert fire_run_id("nightly", key, at) != fire_run_id("hourly", key, at)
    assert fire_run_id("nightly", key, at) != fire_run_id("nightly", fire_key(at + 60), at + 60)
    # Every run id's shape (ids.derived_id), the fire time leading.
    assert re.fullmatch(r"run_[0-9a-z]{26}", fire_run_id("nightly", key, at))
    assert id_time(fire_run_id("nightly", key, at)) == at


# --- define_schedule ------------------------------------------------------------------------------------


def _workflow() -> Workflow:
    return define_workflow(name="report", start_at="a", nodes={"a": compute(run=lambda ctx: ctx.input)}, edges=[])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({}, "give exactly one of cron= and every_s="),
    ({"cron": "0 3 * * *", "every_s": 60}, "give exactly one of cron= and every_s="),
    ({"cron": "0 25 * * *"}, "invalid cron expression '0 25 * * *': Bad hour"),
    ({"cron": "@daily"}, "invalid cron expression '@daily'"),
    ({"every_s": 0.5}, "every_s must be a number of seconds >= 1"),
    ({"every_s": True}, "every_s must be a number of seconds"),
    ({"cron": "0 3 * * *", "timezone": "Europe/Atlantis"}, "unknown timezone 'Europe/Atlantis'"),
    ({"every_s": 60, "catch_up": "some"}, "catch_up must be one of latest, skip, all"),
    ({"every_s": 60, "max_catch_up": 0}, "max_catch_up must be an integer from 1 to 100"),
    ({"every_s": 60, "input": ["not", "a", "map"]}, "input must be a JSON object or a function"),
    ({"every_s": 60, "input": {"when": object()}}, "input: it is not a value a run can hold"),
])
def test_define_schedule_refuses_bad_arguments_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(WorkflowDefinitionError) as caught:
        define_schedule("nightly", _workflow(), **kwargs)
    text = str(caught.value)
    assert text.startswith("schedule 'nightly': ") and message in text and "\n" not in text


def test_define_schedule_names_and_workflows() -> None:
    with pytest.raises(WorkflowDefinitionError, match="the name must match"):
        define_schedule("Nightly Report", "report", every_s=60)
    with pytest.raises(WorkflowDefinitionError, match="workflow must be a Workflow or a workflow name"):
        define_schedule("nightly", 42, every_s=60)  # type: ignore[arg-type]


def test_input_function_gets_the_fire_time_in_the_schedule_zone() -> None:
    schedule = define_schedule("nightly", _workflow(), cron="0 3 * * *", timezone="Europe/Berlin",
                               input=lambda fire_time: {"day": fire_time.isoformat()})
    fire = at(BERLIN, 2025, 7, 1, 3, 0)
    assert schedule.input_for(fire) == {"day": "2025-07-01T03:00:00+02:00"}
    static = define_schedule("static", "report", every_s=60, input={"a": [1, 2]})
    assert static.input_for(fire) == {"a": [1, 2]}


def test_digest_follows_what_a_fire_does() -> None:
    wf = _workflow()
    base = define_schedule("nightly", wf, cron="0 3 * * *")
    assert define_schedule("nightly", wf, cron="0 3 * * *").digest == base.digest
    assert define_schedule("nightly", wf, cron="0 4 * * *").digest != base.digest
    assert define_schedule("nightly", wf, cron="0 3 * * *", input={"x": 1}).digest != base.digest
    assert define_schedule("nightly", wf, cron="0 3 * * *", catch_up="skip").digest != base.digest
