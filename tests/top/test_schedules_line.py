"""piwf-top's schedules line: the pure render of the schedules and their next fire times, captured by a
fixed-width recording console (80×24 must still hold every pane)."""

from __future__ import annotations

from test_render import has_all, screen
from top_fixtures import NOW, snapshot

SCHEDULES = (
    {"name": "nightly", "loaded": True, "paused": False, "next_fire_at": NOW + 3 * 3600, "last_error": None},
    {"name": "tick", "loaded": True, "paused": False, "next_fire_at": NOW + 42, "last_error": None},
    {"name": "[red]bad[/red]", "loaded": True, "paused": False, "next_fire_at": NOW + 600,
     "last_error": "ValueError"},
    {"name": "weekly", "loaded": True, "paused": True, "next_fire_at": None, "last_error": None},
    {"name": "gone", "loaded": False, "paused": False, "next_fire_at": None, "last_error": None},
)


def test_the_header_lists_schedules_soonest_first_with_their_next_fire() -> None:
    text = screen(snapshot(schedules=SCHEDULES), width=140, height=None)
    has_all(text, "schedules  tick in 42s  [red]bad[/red] in 10m00s failing  nightly in 3h00m  gone not loaded  "
                  "weekly paused")


def test_80x24_keeps_every_pane_and_counts_what_does_not_fit() -> None:
    text = screen(snapshot(schedules=SCHEDULES))
    has_all(text, "schedules  tick in 42s  [red]bad[/red] in 10m00s failing  nightly in 3h00m  +2", "epoch 7",
            "decisions")


def test_no_schedules_no_line() -> None:
    assert "schedules" not in screen(snapshot())
