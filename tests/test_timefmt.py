"""piwf_actors/timefmt.py: the one way durations and relative times are written, on every screen."""

from __future__ import annotations

import re
from pathlib import Path

from piwf_actors import timefmt
from piwf_actors.timefmt import clock_time, duration, moment, relative

NOW = 1_800_000_000.0


def test_durations_from_milliseconds_to_days_cut_toward_zero() -> None:
    cases = {0.0123: "12ms", 0.9999: "999ms", 1.0: "1s", 2.3: "2.3s", 2.44: "2.4s", 9.99: "9.9s", 18.7: "18s",
             59.97: "59s", 60: "1m00s", 192: "3m12s", 599.7: "9m59s", 3600: "1h00m", 7500: "2h05m",
             86399: "23h59m", 3 * 86400 + 4 * 3600: "3d04h"}
    assert {seconds: duration(seconds) for seconds in cases} == cases
    assert duration(None) == "" and duration(0) == "0s" and duration(-5) == "0s"  # a passed deadline: none left


def test_relative_times_say_which_way_and_how_far() -> None:
    assert relative(NOW + 18.2, NOW) == "in 18s"
    assert relative(NOW - 192, NOW) == "3m12s ago"
    assert relative(NOW - 192, NOW, suffix=False) == "3m12s"  # an age column
    assert relative(NOW + 0.0004, NOW) == "now"
    assert relative(None, NOW) == "" and relative(0, NOW) == ""  # no time: nothing, not "56 years ago"


def test_a_moment_is_local_time_with_its_zone_and_distance() -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+ \(in 2h05m\)", moment(NOW + 7500, NOW))
    assert moment(NOW - 3, NOW).endswith("(3s ago)")
    assert moment(None, NOW) == ""
    assert re.fullmatch(r"\d\d:\d\d:\d\d", clock_time(NOW + 60, NOW))
    assert clock_time(NOW + 3 * 86400, NOW).startswith(timefmt.when(NOW + 3 * 86400)[:10])


def test_the_leaf_imports_nothing_of_the_package() -> None:
    source = Path(timefmt.__file__).read_text(encoding="utf-8")
    assert "import piwf_actors" not in source and "from piwf_actors" not in source
