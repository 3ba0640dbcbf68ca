"""`RunEventFollower`, the bookkeeping `RunEventsSubscription` and `RunTracer` share, without an actor:
a burst of notices costs one flush, a failed read is tried again, a forgotten finished run raises the floor."""

from __future__ import annotations

import sqlite3

import pytest

from piwf_actors.actors.event_follower import RunEventFollower


def test_a_burst_of_notices_tells_one_flush_and_finished_runs_are_not_noticed() -> None:
    follower = RunEventFollower(floor=0.0)
    told: list[int] = []

    def tell() -> bool:
        told.append(1)
        return True

    follower.notice(["run_a", "run_b"], tell)
    follower.notice(["run_a", "run_c"], tell)
    assert len(told) == 1
    followed: list[str] = []
    follower.flush(followed.append, what="test")
    assert followed == ["run_a", "run_b", "run_c"]
    follower.finish("run_a", 5.0)
    follower.notice(["run_a"], tell)  # finished: nothing to read, no flush told
    assert len(told) == 1
    follower.notice(["run_b"], tell)
    assert len(told) == 2


def test_a_read_that_fails_keeps_the_run_noticed_and_a_flush_that_could_not_be_told_is_told_again(
        caplog: pytest.LogCaptureFixture) -> None:
    follower = RunEventFollower(floor=0.0)
    answers = iter([False, True])
    follower.notice(["run_a"], lambda: next(answers))  # the owner could not tell itself
    follower.notice(["run_b"], lambda: next(answers))  # so the next notice does
    attempts: list[str] = []

    def follow(run_id: str) -> None:
        attempts.append(run_id)
        if run_id == "run_a" and attempts.count("run_a") == 1:
            raise sqlite3.OperationalError("database is locked")

    follower.flush(follow, what="test events")
    assert "test events of run run_a not read (tried again on the next commit): database is locked" in caplog.text
    follower.flush(follow, what="test events")
    assert attempts == ["run_a", "run_b", "run_a"]


def test_forgetting_the_oldest_finished_run_raises_the_floor_to_its_end() -> None:
    follower = RunEventFollower(floor=1.0, remembered=2)
    follower.advance("run_a", 7)
    follower.finish("run_a", 10.0)
    assert "run_a" not in follower.cursors
    follower.finish("run_b", 20.0)
    assert follower.floor == 1.0
    follower.finish("run_c", 30.0)
    assert list(follower.finished) == ["run_b", "run_c"] and follower.floor == 10.0
    unbounded = RunEventFollower(floor=0.0, remembered=None)
    for n in range(5):
        unbounded.finish(f"run_{n}", float(n))
    assert len(unbounded.finished) == 5 and unbounded.floor == 0.0
