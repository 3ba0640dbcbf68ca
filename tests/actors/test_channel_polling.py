"""`PollWatch` without threads, a bot or a database: a poll's end, at a chosen time, and what the
adapter is to tell its manager."""

from __future__ import annotations

import logging

import pytest

from piwf_actors.actors.channel_io import PollFailed
from piwf_actors.actors.channel_polling import ChannelHealth, ChannelRefused, PollWatch

TAKEN = PollFailed("409 Conflict", taken=True)


def test_the_default_window_outlasts_a_previous_hosts_long_poll() -> None:
    assert PollWatch("ops", poll_timeout_s=25.0).conflict_window_s == 55.0
    assert PollWatch("ops", poll_timeout_s=25.0, conflict_window_s=3.0).conflict_window_s == 3.0


def test_the_manager_is_told_a_problem_once_and_again_when_it_ends() -> None:
    watch = PollWatch("ops", poll_timeout_s=1.0)
    assert watch.polled() is None  # healthy from the start: nothing changed
    down = PollFailed("connection refused", taken=False)
    assert watch.failed(down, 10.0) == ChannelHealth("ops", "cannot read updates: connection refused")
    assert watch.failed(down, 11.0) is None  # the same problem: told once
    other = PollFailed("timed out", taken=False)
    assert watch.failed(other, 12.0) == ChannelHealth("ops", "cannot read updates: timed out")
    assert watch.polled() == ChannelHealth("ops", None)
    assert watch.polled() is None


def test_conflicts_within_the_window_are_a_restart_and_outlasting_it_refuses_the_profile(caplog) -> None:
    caplog.set_level(logging.INFO, logger="piwf_actors.actors.channel")
    watch = PollWatch("ops", poll_timeout_s=1.0, conflict_window_s=7.0)
    assert watch.failed(TAKEN, 100.0) is None
    assert watch.failed(TAKEN, 104.0) is None
    assert watch.problem is None  # a restart's conflicts are no problem to report
    refused = watch.failed(TAKEN, 107.0)
    assert isinstance(refused, ChannelRefused) and refused.profile == "ops"
    assert "409 Conflict for 7 s" in refused.reason and "piwf channel reload" in refused.reason
    levels = [r.levelno for r in caplog.records if "409" in r.getMessage()]
    assert levels == [logging.INFO, logging.ERROR]  # once per run of conflicts at INFO, then the refusal


@pytest.mark.parametrize("gap", [7.5, 30.0])
def test_a_gap_longer_than_the_window_starts_a_new_run_of_conflicts(gap: float) -> None:
    watch = PollWatch("ops", poll_timeout_s=1.0, conflict_window_s=7.0)
    assert watch.failed(TAKEN, 100.0) is None
    assert watch.failed(TAKEN, 100.0 + gap) is None  # a new run: its first conflict
    assert watch.failed(TAKEN, 100.0 + gap + 6.0) is None
    assert isinstance(watch.failed(TAKEN, 100.0 + gap + 7.0), ChannelRefused)
