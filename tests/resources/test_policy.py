"""The pure rules of reconciling (resources/policy.py, resources/fairness.py), each with a chosen `now`."""

from __future__ import annotations

import pytest

from piwf_actors.resources.fairness import after_launch, next_claim
from piwf_actors.resources.policy import BadResult, backoff_s, check_result, merge_status, owned_run_id, settle


def test_backoff_doubles_from_one_second_up_to_a_minute() -> None:
    assert [backoff_s(n) for n in range(8)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_s(10_000) == 60


def test_errors_in_a_row_back_off_and_a_success_resets_the_count() -> None:
    now, errors, waits = 1000.0, 0, []
    for _ in range(8):
        plan = settle("error", now=now, consecutive_errors=errors)
        waits.append(plan.available_at - now)
        now, errors = plan.available_at, plan.consecutive_errors
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60] and errors == 8
    assert settle("requeue_after", now=now, consecutive_errors=errors, after_s=5) == \
        settle("requeue_after", now=now, consecutive_errors=0, after_s=5)
    assert settle("requeue_after", now=now, consecutive_errors=errors, after_s=5).consecutive_errors == 0
    assert settle("done", now=now, consecutive_errors=errors).consecutive_errors == 0


def test_done_leaves_the_queue_unless_enqueued_meanwhile_and_deletes_once_no_finalizer_is_left() -> None:
    assert settle("done", now=10.0, consecutive_errors=0).available_at is None
    assert settle("done", now=10.0, consecutive_errors=0, enqueued_meanwhile=True, pending_at=9.0).available_at == 9.0
    assert settle("done", now=10.0, consecutive_errors=0, deleting=True, finalizers=["x"]).delete is False
    assert settle("done", now=10.0, consecutive_errors=0, deleting=True, finalizers=[]).delete is True
    # Only `done` deletes: an error of a deleting resource backs off like any other.
    assert settle("error", now=10.0, consecutive_errors=0, deleting=True).delete is False


def test_an_enqueue_while_it_ran_never_makes_it_wait_longer() -> None:
    plan = settle("requeue_after", now=100.0, consecutive_errors=0, after_s=30, enqueued_meanwhile=True,
                  pending_at=95.0)
    assert plan.available_at == 95.0
    plan = settle("error", now=100.0, consecutive_errors=3, enqueued_meanwhile=True, pending_at=101.0)
    assert plan.available_at == 101.0 and plan.consecutive_errors == 4


def test_results_are_checked() -> None:
    assert check_result({"result": "done"}) == {"result": "done", "status_patch": {}}
    assert check_result({"result": "requeue_after", "after_s": 3, "finalizers": ["a", "a", "b"]}) == {
        "result": "requeue_after", "after_s": 3.0, "status_patch": {}, "finalizers": ["a", "b"]}
    for bad in ({"result": "ok"}, {"result": "requeue_after"}, {"result": "done", "status_patch": [1]},
                {"result": "done", "finalizers": "x"}, {"result": "done", "extra": 1}, "done",
                {"result": "requeue_after", "after_s": float("nan")}):
        with pytest.raises(BadResult):
            check_result(bad)


def test_a_status_patch_merges_key_by_key_and_none_removes() -> None:
    assert merge_status({"a": 1, "b": {"x": 1}, "c": 3}, {"b": {"y": 2}, "c": None, "d": 4}) == {
        "a": 1, "b": {"y": 2}, "d": 4}


def test_an_owned_run_id_depends_on_manager_key_and_ensure_key_only() -> None:
    first = owned_run_id("builds", "repo-a", "build-1")
    assert first == owned_run_id("builds", "repo-a", "build-1") and first.startswith("run_") and len(first) == 30
    assert len({first, owned_run_id("builds", "repo-a", "build-2"), owned_run_id("builds", "repo-b", "build-1"),
                owned_run_id("other", "repo-a", "build-1")}) == 4


def test_runs_and_reconciles_alternate_on_one_slot() -> None:
    prefer, order = False, []
    runs, reconciles = 3, 3
    while runs or reconciles:
        kind, count = next_claim(1, prefer_reconcile=prefer, runs_waiting=runs > 0, reconciles_waiting=reconciles > 0)
        assert count == 1
        order.append(kind)
        runs, reconciles = (runs - 1, reconciles) if kind == "run" else (runs, reconciles - 1)
        prefer = after_launch(kind)
    assert order == ["run", "reconcile"] * 3


def test_runs_leave_room_for_a_waiting_reconcile_on_many_slots() -> None:
    assert next_claim(4, prefer_reconcile=False, runs_waiting=True, reconciles_waiting=True) == ("run", 2)
    assert next_claim(4, prefer_reconcile=False, runs_waiting=True, reconciles_waiting=False) == ("run", 4)
    assert next_claim(4, prefer_reconcile=True, runs_waiting=True, reconciles_waiting=True) == ("reconcile", 1)
    assert next_claim(4, prefer_reconcile=False, runs_waiting=False, reconciles_waiting=True) == ("reconcile", 1)
    assert next_claim(0, prefer_reconcile=False, runs_waiting=True, reconciles_waiting=True) is None
    assert next_claim(2, prefer_reconcile=True, runs_waiting=False, reconciles_waiting=False) is None
