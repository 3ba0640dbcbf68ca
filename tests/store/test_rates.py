"""Rate limits and debounce through the real writer on a real database of each engine (a SQLite file,
a PostgreSQL database), with a clock the test moves; and the window arithmetic on its own.

The whole-host behaviour (real workers, host kills, a runner host on PostgreSQL) is in
tests/integration/test_rate_crashes.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from actors.writer_store import TOKEN, WriterStore

from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import queries, rates
from piwf_actors.store.flow_queries import flow_view
from piwf_actors.store.runstate import QUEUE_FRESH, QUEUE_HELD
from piwf_actors.store.values import get_value

# --- the window arithmetic ------------------------------------------------------------------------


def test_a_start_is_allowed_while_fewer_than_max_started_inside_the_window() -> None:
    assert rates.window_state([], 2, 10.0, 100.0) == (0, None)
    assert rates.window_state([95.0], 2, 10.0, 100.0) == (1, None)
    assert rates.window_state([95.0, 99.0], 2, 10.0, 100.0) == (2, 105.0)  # when the oldest leaves


def test_a_start_exactly_per_s_ago_has_left_the_window() -> None:
    assert rates.window_state([90.0, 99.0], 2, 10.0, 100.0) == (1, None)
    assert rates.window_state([90.0001, 99.0], 2, 10.0, 100.0)[1] == pytest.approx(100.0001)


def test_a_lowered_limit_waits_for_enough_starts_to_leave() -> None:
    # Three starts counted, the limit now 1: the next start waits until two have left.
    assert rates.window_state([91.0, 95.0, 99.0], 1, 10.0, 100.0) == (3, 109.0)


def test_the_order_of_the_recorded_starts_does_not_matter() -> None:
    assert rates.window_state([99.0, 91.0, 95.0], 2, 10.0, 100.0) == (3, 105.0)


def test_any_window_of_per_s_sees_at_most_max_starts_when_every_start_waits_for_its_token() -> None:
    """Starting each run at the first allowed time: no `per_s` window ever holds more than `max`."""
    maximum, per_s, now, starts = 3, 7.0, 0.0, []
    for _ in range(50):
        _used, next_at = rates.window_state(starts, maximum, per_s, now)
        now = now if next_at is None else next_at
        starts.append(now)
        now += 0.25  # exact in binary: the check compares times exactly
    for i in range(len(starts) - maximum):
        assert starts[i + maximum] - starts[i] >= per_s


def test_the_queue_reason_names_the_limiter_its_budget_and_the_wait() -> None:
    assert rates.reason("mail-api", 60, 60.0, 111.5, 100.0) == "rate limit mail-api: 60 per 60 s, next in 12 s"
    assert rates.limiter_name("mail-api[eu]") == "mail-api"


# --- through the writer ---------------------------------------------------------------------------


@pytest.fixture
def writer_store(state_dir: Path, database: DatabaseLocation) -> Iterator[WriterStore]:
    store = WriterStore(state_dir, database=database)
    try:
        yield store
    finally:
        store.close()


def claim(store: WriterStore, slots: int = 8) -> list[str]:
    store.messages += 1
    claimed = store.writer.call("scheduler.claim_next", {
        "slots": [{"token_hash": TOKEN, "launch_id": f"l{store.messages}-{i}"} for i in range(slots)],
        "claim_lease_s": 600})
    for item in claimed:
        store.claims[item["run_id"]] = item
    return [item["run_id"] for item in claimed]


def q(store: WriterStore, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in store.reader.all(sql, params)]


def row(store: WriterStore, run_id: str) -> dict[str, Any]:
    cursor = store.reader.conn.execute("SELECT * FROM run WHERE run_id = ?", (run_id,))
    return dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))


def limited(run_id: str, key: str = "mail-api", maximum: int = 2, per_s: float = 60.0) -> dict[str, Any]:
    return {"workflow": "send", "run_id": run_id, "input": {}, "rate_key": key, "rate_max": maximum,
            "rate_per_s": per_s}


def test_a_rate_limit_holds_the_runs_over_its_budget_until_the_window_frees(writer_store: WriterStore) -> None:
    store = writer_store
    start = store.time
    for n in range(5):
        store.writer.call("run.create", limited(f"m{n}"))
    assert claim(store) == ["m0", "m1"]
    held = row(store, "m2")
    assert (held["queue_class"], held["held_by"]) == (QUEUE_HELD, "rate_key:mail-api")
    assert flow_view(store.reader, held, now=start + 48)["queue_reason"] == (
        "rate limit mail-api: 2 per 60 s, next in 12 s")
    assert queries.next_wake(store.reader) == pytest.approx(start + 60, abs=1e-3)  # a timer, like a sleeper's
    assert claim(store) == []

    store.time += 59
    assert store.writer.call("waits.wake", {})["timers"] == {}
    store.time += 1.5
    assert store.writer.call("waits.wake", {})["timers"] == {"rate_key:mail-api": 2}
    assert claim(store) == ["m2", "m3"]  # in queue order
    assert row(store, "m4")["queue_class"] == QUEUE_HELD
    # The timer moved to when the starts just made leave the window, and no earlier.
    assert queries.next_wake(store.reader) == pytest.approx(start + 120.5, abs=1e-3)
    assert q(store, "SELECT count(*) FROM rate_start WHERE rate_key = 'mail-api'") == [(2,)]  # old ones gone


def test_keys_of_one_limiter_have_budgets_of_their_own(writer_store: WriterStore) -> None:
    store = writer_store
    for n in range(3):
        store.writer.call("run.create", limited(f"eu{n}", "mail-api[eu]", 1))
    store.writer.call("run.create", limited("us0", "mail-api[us]", 1))
    assert claim(store) == ["eu0", "us0"]  # the full key does not keep the other one waiting
    assert rates.held_by_limiter(store.reader.conn) == {"mail-api": 2}


def test_a_run_started_once_spends_no_second_start_when_it_is_queued_again(writer_store: WriterStore) -> None:
    store = writer_store
    store.writer.call("run.create", limited("m0", maximum=1))
    store.writer.call("run.create", limited("m1", maximum=1))
    assert claim(store, 1) == ["m0"]
    # Its runner went away (a host crash): the run goes back to the queue and resumes without a token.
    claim_row = store.claims["m0"]
    store.writer.call("runner.exit", {"run_id": "m0", "generation": claim_row["generation"], "token_hash": TOKEN,
                                      "launch_id": claim_row["launch_id"], "outcome": "crashed"})
    assert (row(store, "m0")["status"], row(store, "m0")["park_reason"]) == ("parked", "no_progress")
    store.writer.call("run.resume", {"run_id": "m0"})
    assert claim(store) == ["m0"]  # m1 is still held: the window has m0's one start
    assert q(store, "SELECT run_id FROM rate_start") == [("m0",)]


def test_a_rate_held_run_that_is_cancelled_leaves_no_timer_behind(writer_store: WriterStore) -> None:
    store = writer_store
    store.writer.call("run.create", limited("m0", maximum=1))
    store.writer.call("run.create", limited("m1", maximum=1))
    assert claim(store) == ["m0"]
    store.writer.call("run.cancel", {"run_id": "m1"})
    store.time += 61
    assert store.writer.call("waits.wake", {})["timers"] == {"rate_key:mail-api": 0}
    assert q(store, "SELECT count(*) FROM flow_timer") == [(0,)]
    assert queries.next_wake(store.reader) is None


# --- debounce ------------------------------------------------------------------------------------


def bounced(value: Any, key: str = "index[docs]", seconds: float = 5.0, max_wait_s: float | None = None,
            inputs: str = "last") -> dict[str, Any]:
    return {"workflow": "index", "input": value,
            "debounce": {"key": key, "seconds": seconds, "max_wait_s": max_wait_s, "inputs": inputs}}


def run_input(store: WriterStore, run_id: str) -> Any:
    found = row(store, run_id)
    return get_value(store.reader.conn, found["input_json"], found["input_sha256"])


def test_starts_inside_the_window_collapse_into_one_run_started_once_the_key_is_quiet(
        writer_store: WriterStore) -> None:
    store = writer_store
    start = store.time
    first = store.writer.call("run.create", bounced({"edit": 1}))
    assert first["joined"] is False
    run_id = first["run_id"]
    other = store.writer.call("run.create", bounced({"edit": 9}, key="index[blog]"))
    assert other["run_id"] != run_id  # another key: another run
    assert claim(store) == []  # held for the window
    store.time += 3
    second = store.writer.call("run.create", bounced({"edit": 2}))
    assert (second["run_id"], second["joined"], second["debounce_starts"]) == (run_id, True, 2)
    assert queries.next_wake(store.reader) == pytest.approx(start + 5, abs=1e-3)  # the other key's window ends first
    reason = flow_view(store.reader, row(store, run_id), now=store.time)["queue_reason"]
    assert reason == "debounced index[docs]: 2 starts, starts in 5 s unless another comes"
    store.time += 4  # 7 s after the first start, 4 after the last: still inside the quiet window
    woken = store.writer.call("waits.wake", {})["timers"]
    assert woken == {"debounce:index[blog]": 1}
    store.time += 1.5
    assert store.writer.call("waits.wake", {})["timers"] == {"debounce:index[docs]": 1}
    assert run_input(store, run_id) == {"edit": 2}  # the last input
    assert row(store, run_id)["queue_class"] == QUEUE_FRESH
    assert sorted(claim(store)) == sorted([run_id, other["run_id"]])
    again = store.writer.call("run.create", bounced({"edit": 3}))
    assert again["run_id"] != run_id and again["joined"] is False  # after the fire: a new run


def test_max_wait_starts_the_run_even_while_starts_keep_coming_and_all_inputs_are_kept(
        writer_store: WriterStore) -> None:
    store = writer_store
    start = store.time
    run_id = store.writer.call("run.create", bounced(1, max_wait_s=8, inputs="all"))["run_id"]
    for value in (2, 3, 4):
        store.time += 3
        assert store.writer.call("run.create", bounced(value, max_wait_s=8, inputs="all"))["run_id"] == run_id
    assert queries.next_wake(store.reader) == pytest.approx(start + 8, abs=1e-3)  # capped, not 9 + 5
    store.time = start + 8.1
    assert store.writer.call("waits.wake", {})["timers"] == {"debounce:index[docs]": 1}
    assert run_input(store, run_id) == [1, 2, 3, 4]
    assert [kind for (kind,) in q(store, "SELECT kind FROM run_event WHERE run_id = ? ORDER BY seq", (run_id,))
            ].count("run_debounced") == 3


# --- a node under a named limiter -----------------------------------------------------------------


def take(store: WriterStore, run_id: str, token: str, maximum: int = 1, per_s: float = 30.0) -> dict[str, Any]:
    return store.worker(run_id, "rate_take", {"node_id": "send", "token_id": token, "rate_key": "mail-api",
                                              "rate_max": maximum, "rate_per_s": per_s})


def test_a_node_over_its_limiters_budget_parks_without_its_worker_and_wakes_when_a_start_frees(
        writer_store: WriterStore) -> None:
    store = writer_store
    start = store.time
    for run_id in ("a", "b"):
        store.writer.call("run.create", {"workflow": "w", "run_id": run_id, "input": {},
                                         "concurrency_key": "w", "concurrency_max": 5})
    assert sorted(claim(store)) == ["a", "b"]
    for run_id in ("a", "b"):
        store.worker(run_id, "ready", {"want_state": False})
    assert take(store, "a", "att-a1") == {"granted": True}
    assert take(store, "a", "att-a1") == {"granted": True}  # a resent request of the same attempt
    parked = take(store, "b", "att-b1")
    assert (parked["granted"], parked["directive"]) == (False, "stop")
    b = row(store, "b")
    assert (b["status"], b["park_reason"], b["held_by"]) == ("parked", "waiting", "rate_node:mail-api")
    assert b["park_detail"] == "rate limit mail-api: 1 per 30 s, next in 30 s"
    assert q(store, "SELECT count(*) FROM run_claim WHERE run_id = 'b'") == [(0,)]  # no worker held
    assert rates.held_by_limiter(store.reader.conn) == {"mail-api": 1}
    assert queries.next_wake(store.reader) == pytest.approx(start + 30, abs=1e-3)

    store.time += 31
    assert store.writer.call("waits.wake", {})["timers"] == {"rate_node:mail-api": 1}
    b = row(store, "b")
    assert (b["status"], b["held_by"]) == ("queued", None)
    assert claim(store) == ["b"]
    store.worker("b", "ready", {"want_state": False})
    assert take(store, "b", "att-b2") == {"granted": True}
    assert q(store, "SELECT run_id FROM rate_start ORDER BY started_at") == [("att-b2",)]  # a1 left the window
    assert q(store, "SELECT count(*) FROM flow_timer") == [(0,)]


def test_prune_removes_the_starts_that_left_their_window(writer_store: WriterStore) -> None:
    store = writer_store
    store.writer.call("run.create", limited("m0", "old-key", 1, per_s=10.0))
    store.writer.call("run.create", limited("m1", "new-key", 1, per_s=1000.0))
    assert sorted(claim(store)) == ["m0", "m1"]
    store.time += 11
    store.writer.call("state.prune", {"before": store.time - 86400, "apply": True})
    assert q(store, "SELECT rate_key FROM rate_start") == [("new-key",)]


@pytest.mark.parametrize("starting_now", [0, 1, 3])
def test_the_windows_two_index_reads_agree_with_the_arithmetic(writer_store: WriterStore, starting_now: int) -> None:
    """`rates.window` (a count and one OFFSET read) against `window_state` on the same starts."""
    store = writer_store
    base = store.time
    for n, at in enumerate((1.0, 3.0, 3.5, 7.0, 9.0, 12.0)):
        store.time = base + at
        store.writer.call("run.create", limited(f"m{n}", maximum=100, per_s=10.0))
        assert claim(store) == [f"m{n}"]
    now = base + 13.0
    starts = [at for (at,) in q(store, "SELECT started_at FROM rate_start")]
    for maximum in (1, 2, 3, 4, 6):
        expected = rates.window_state(starts + [now] * starting_now, maximum, 10.0, now)
        assert rates.window(store.reader.conn, "mail-api", maximum, 10.0, now, starting_now) == expected, maximum
