"""Waiting, children and flow control under real SIGKILLs (DESIGN.md "Waiting, children and flow
control"), with real `bin/piwf-host` processes and an oracle file outside the database that the
nodes append to (workflows in `wf/flow_flows.py`):

1. a fan-out of 200 children, `max_parallel=4`, while the host is SIGKILLed three times (each
   time while a child executes): one child run per index (a child is never started twice), never
   more than four children executing at once, the parent `done` with the outputs in item order;
   what was committed is read at each kill, and a child's node runs again only after a kill that
   found it uncommitted (once per such kill), and always after one;
2. a durable sleep whose wake-up passes while no host runs (SIGKILL or a clean stop), and one
   whose host comes back (and is seen serving) before it: the node after it runs once, not before
   the wake time, and `slept_until` is the wake time the wait recorded;
3. messages: sent before the run waits (kept in the mailbox, consumed once); sent twice under one
   client id + key (one message, the resend `adopted`, also after the run ended); sent while the
   host is SIGKILLed inside the actions they woke, one of them committed with its receipt lost,
   retried with the same key until a receipt comes (that one `adopted`; each consumed once; every
   cut action parks on its effect instead of running again);
4. `limit(2)` on PostgreSQL under a burst of 50 runs executed by the active host and a runner
   host: never three running at once (the harder race is tests/integration/test_pg_limit_stress.py);
5. `run.start {priority}`: a run queued behind 100 fresh ones, while every worker is held, starts
   among the next claims.

Times in the oracle are `time.time()` of this machine: hosts, runner and workers all run here.
"""

from __future__ import annotations

import itertools
import signal
import socket
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from testsupport import database_rows, dead_host_settled
from wf import harness
from wf.flow_flows import FAN_CHILDREN, FAN_MAX_PARALLEL, LIMIT, LONG_NAP_S, NAP_S
from wf.harness import WF, rows, wait_for
from wf.piwf_hosts import max_overlap, oracle_lines, piwf_host, sigkill

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning
from piwf_actors.wire import recv_frame, send_frame

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

FINISHED = ("done", "failed", "cancelled")


def fflow(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/flow_flows.py."""
    return f"{WF / 'flow_flows.py'}:{attr}"


def _status(state_dir: Path, run_id: str) -> str | None:
    found = rows(state_dir, "SELECT status FROM run WHERE run_id = ?", (run_id,))
    return found[0]["status"] if found else None


def _wait_settled(state_dir: Path, run_id: str, timeout: float, host: Any = None) -> dict[str, Any]:
    """The run's view once it finished or parked for anything but a wait. On a timeout the message
    carries the run's waits and, given the serving `host` (a HostScript), its log and exit status."""

    def describe() -> str:
        waits = rows(state_dir, "SELECT kind, status, wake_at FROM run_wait WHERE run_id = ?", (run_id,))
        said = f"run {run_id} to settle (is {_status(state_dir, run_id)}; waits {waits}; now {time.time():.3f})"
        if host is not None:
            said += f"; host exit status {host.proc.poll()}; its log:\n{host.log()[-6000:]}"
        return said

    def settled() -> bool:
        found = rows(state_dir, "SELECT status, park_reason FROM run WHERE run_id = ?", (run_id,))
        return bool(found) and (found[0]["status"] in FINISHED or
                                (found[0]["status"] == "parked" and found[0]["park_reason"] != "waiting"))

    wait_for(settled, timeout, describe, poll=0.05)
    with Client(state_dir) as client:
        return client.get(run_id)


def _send(client: Client, run_id: str, topic: str, payload: Any, key: str) -> tuple[str, dict[str, Any]]:
    """`message.send`: (outcome, receipt)."""
    answer = client.request("message.send", {"run_id": run_id, "topic": topic, "payload": payload},
                            idempotency_key=key)
    assert answer.ok, (answer.outcome, answer.error)
    return answer.outcome, answer.receipt


def _messages(state_dir: Path, run_id: str) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT message_id, topic, seq, status, wait_id FROM run_message WHERE run_id = ? "
                           "ORDER BY seq", (run_id,))


# --- 1. a fan-out of 200 children, four at once, the host SIGKILLed three times ---------------------


def _executing(records: list[list[str]]) -> set[int]:
    """Indexes of the fan-out whose node is executing now: a start record without its end (by pid)."""
    open_now: Counter[tuple[str, str]] = Counter()
    for word, index, _run, _at, pid in records:
        open_now[(index, pid)] += 1 if word == "start" else -1
    return {int(index) for (index, _pid), n in open_now.items() if n > 0}


def test_fan_out_of_200_children_with_max_parallel_4_survives_three_host_sigkills(guard, state_dir) -> None:
    oracle = state_dir / "oracle"
    # More worker slots than the fan-out may use: the limit, not the pool, keeps it at four.
    workers = FAN_MAX_PARALLEL + 2
    script = piwf_host(guard, state_dir, workers=workers)
    with Client(state_dir) as client:
        parent = client.start(fflow("fan"), {"n": FAN_CHILDREN, "oracle": str(oracle)})["run_id"]

    def ended() -> int:
        return len({line[1] for line in oracle_lines(oracle) if line[0] == "end"})

    # Each kill: (its time, the time the next host was started, the indexes committed at it, the
    # indexes whose node had started and were not committed at it).
    kills: list[tuple[float, float, set[int], set[int]]] = []
    for ended_before_kill in (25, 85, 145):
        # Kill while a child's node executes, so that a kill lands inside a child.
        wait_for(lambda n=ended_before_kill: ended() >= n and _executing(oracle_lines(oracle)), 30,
                 lambda n=ended_before_kill: f"{n} children to end and one to execute (have {ended()})", poll=0.002)
        killed_at = sigkill(guard, script)
        dead_host_settled(state_dir)
        committed = {row["child_index"] for row in rows(
            state_dir, "SELECT child_index FROM run WHERE parent_run_id = ? AND parent_node_id = 'children' "
                       "AND status = 'done'", (parent,))}
        started = {int(index) for word, index, _run, at, _pid in oracle_lines(oracle) if word == "start" and float(at) < killed_at}
        assert _status(state_dir, parent) == "parked", "the parent finished before a kill"
        restarted_at = time.time()
        script = piwf_host(guard, state_dir, workers=workers)
        kills.append((killed_at, restarted_at, committed, started - committed))
    view = _wait_settled(state_dir, parent, timeout=60)
    assert view["status"] == "done", view

    # The output: every child's output, in item order.
    assert view["output"] == [{"index": i, "square": i * i} for i in range(FAN_CHILDREN)]

    # One child run per index, in the oracle and in the database: a child is never started twice.
    records = oracle_lines(oracle)
    run_ids: dict[int, set[str]] = defaultdict(set)
    for _word, index, run_id, _at, _pid in records:
        run_ids[int(index)].add(run_id)
    assert sorted(run_ids) == list(range(FAN_CHILDREN))
    twice = {index: ids for index, ids in run_ids.items() if len(ids) != 1}
    assert not twice, f"indexes with more than one child run: {twice}"
    children = rows(state_dir, "SELECT run_id, child_index, status FROM run WHERE parent_run_id = ? "
                               "AND parent_node_id = 'children'", (parent,))
    assert len(children) == FAN_CHILDREN
    assert {row["child_index"]: row["run_id"] for row in children} == {i: next(iter(ids)) for i, ids in run_ids.items()}
    assert {row["status"] for row in children} == {"done"}

    # Never more than four children executing at once. An execution is the interval between its
    # start and end records (matched by index and worker pid); one cut by a kill, so without an
    # end, ends at the kill or at the next start of its index, whichever comes first.
    kill_times = [killed_at for killed_at, _restarted, _committed, _cut in kills]
    starts = [(int(i), float(at), pid) for word, i, _run, at, pid in records if word == "start"]
    ends: dict[tuple[int, str], list[float]] = defaultdict(list)
    for word, index, _run, at, pid in records:
        if word == "end":
            ends[(int(index), pid)].append(float(at))
    intervals = []
    for index, started_at, pid in starts:
        end = min((at for at in ends[(index, pid)] if at >= started_at), default=None)
        if end is None:
            later = [at for other, at, _ in starts if other == index and at > started_at] + \
                    [at for at in kill_times if at > started_at]
            assert later, f"child {index} started at {started_at} (pid {pid}) and never ended"
            end = min(later)
        intervals.append((started_at, end))
    most = max_overlap(intervals)
    assert most <= FAN_MAX_PARALLEL, f"{most} children executed at once (max_parallel {FAN_MAX_PARALLEL})"
    # The fan-out did run children side by side (the bound above is not met by running one at a time).
    assert most >= 2, most

    # The scenario happened: some kill cut a child that had started and was not committed.
    assert any(cut for _killed, _restarted, _committed, cut in kills), \
        f"no kill landed inside an uncommitted child (kills {kill_times})"
    # A child's node runs again only because a kill cut it: between two executions of an index lies
    # a kill (its own, one per re-execution) at which that index was not committed. (The window of a
    # kill reaches to the next host's start: a worker of the dead host may begin a node it was
    # handed just before the kill.)
    for index in range(FAN_CHILDREN):
        times = sorted(at for other, at, _pid in starts if other == index)
        unused = list(kills)
        for before, after in itertools.pairwise(times):
            cause = next((kill for kill in unused if before < kill[1] and kill[0] < after and index not in kill[2]),
                         None)
            assert cause is not None, (
                f"child {index} executed again at {after} after {before} with no kill of it uncommitted between "
                f"(kills at {kill_times}; its executions {times})")
            unused.remove(cause)
    # And a child cut by a kill (started, not committed) ran again after it: its output is not made up.
    for killed_at, _restarted, _committed, cut in kills:
        for index in cut:
            assert any(other == index and at > killed_at for other, at, _pid in starts), \
                f"child {index} was cut by the kill at {killed_at} and never executed again"


# --- 2. a durable sleep whose wake-up passes while no host runs -------------------------------------


@pytest.mark.parametrize("how", ["sigkill", "stop",
                                 pytest.param("sigkill-back-early", marks=pytest.mark.slow)])  # make test-slow
def test_durable_sleep_wakes_once_after_a_host_gap(guard, state_dir, how) -> None:
    """`sigkill` / `stop`: the host dies (or stops cleanly) while the run sleeps and no host runs
    until its wake-up has passed; `sigkill-back-early`: the next host is back before it."""
    oracle = state_dir / "oracle"
    script = piwf_host(guard, state_dir)
    # Back early: a nap long enough for the next host to take over first (after the dead host's
    # lease on PostgreSQL); after a gap: a short one, that passes while no host runs.
    workflow, nap_s = ("long_napper", LONG_NAP_S) if how == "sigkill-back-early" else ("napper", NAP_S)
    with Client(state_dir) as client:
        run_id = client.start(fflow(workflow), {"oracle": str(oracle)})["run_id"]

    def sleeping() -> dict[str, Any] | None:
        with Client(state_dir) as client:
            view = client.get(run_id)
        return view if view["status"] == "parked" and view["park_reason"] == "waiting" and view["waits"] else None

    view = wait_for(sleeping, 10, f"run {run_id} to sleep")
    (wait,) = view["waits"]
    assert wait["kind"] == "sleep", wait
    wake_at = wait["wake_at"]
    assert wake_at > time.time(), "woke before the host went away"
    if how == "stop":
        script.proc.send_signal(signal.SIGTERM)
        assert script.proc.wait(15) == 0, script.log()
    else:
        sigkill(guard, script)

    if how != "sigkill-back-early":
        # No host runs: the wake-up passes with nobody to act on it.
        wait_for(lambda: time.time() > wake_at + 0.5, NAP_S + 5, "the wake-up time to pass")
        assert _status(state_dir, run_id) == "parked"
    restarted_at = time.time()
    next_host = piwf_host(guard, state_dir)
    if how == "sigkill-back-early":
        # The scenario: the next host serves (and holds the sleep) before the wake-up.
        assert time.time() < wake_at, f"the next host served only {time.time() - wake_at:.1f} s after the wake-up"
    view = _wait_settled(state_dir, run_id, timeout=nap_s + 20, host=next_host)
    assert view["status"] == "done", view

    after = [line for line in oracle_lines(oracle) if line[0] == "after"]
    assert len(after) == 1, f"the node after the sleep ran {len(after)} times: {after}"
    (_, ran_for, at, _pid) = after[0]
    assert ran_for == run_id
    assert float(at) >= wake_at, "the node after the sleep ran before the wake-up"
    assert float(at) >= restarted_at
    assert view["output"] == {"slept_until": wake_at}
    (nap,) = [node for node in view["nodes"] if node["node_id"] == "nap"]
    assert nap["output"] == {"slept_until": wake_at}
    assert rows(state_dir, "SELECT status FROM run_wait WHERE run_id = ?", (run_id,)) == [{"status": "consumed"}]


# --- 3. messages ------------------------------------------------------------------------------------


def test_message_sent_before_the_run_waits_is_kept_and_consumed_once(guard, state_dir) -> None:
    oracle = state_dir / "oracle"
    piwf_host(guard, state_dir)
    with Client(state_dir) as client:
        run_id = client.start(fflow("late_listener"), {"oracle": str(oracle)})["run_id"]
        outcome, receipt = _send(client, run_id, "go", {"n": 7}, "early")
    # The run sleeps 1 s before its wait: the message waits for it in the mailbox.
    assert (outcome, receipt["status"], receipt["consumed_by"]) == ("accepted", "pending", None), receipt
    view = _wait_settled(state_dir, run_id, timeout=20)
    assert view["status"] == "done", view
    assert view["output"] == {"n": 7}
    assert [line for line in oracle_lines(oracle) if line[0] == "got"] == [["got", run_id, "7"]]
    (message,) = _messages(state_dir, run_id)
    (wait,) = rows(state_dir, "SELECT wait_id, status FROM run_wait WHERE run_id = ? AND kind = 'message'", (run_id,))
    assert (message["message_id"], message["status"], message["wait_id"]) == \
           (receipt["message_id"], "consumed", wait["wait_id"])
    assert view["mailbox"] == {}


def test_message_sent_twice_under_one_key_is_one_message(guard, state_dir) -> None:
    oracle = state_dir / "oracle"
    piwf_host(guard, state_dir)
    with Client(state_dir, client_id="sender-a") as client:
        run_id = client.start(fflow("late_listener"), {"oracle": str(oracle)})["run_id"]
        first = _send(client, run_id, "go", {"n": 1}, "key-1")
    with Client(state_dir, client_id="sender-a") as client:  # a new connection, the same client id
        second = _send(client, run_id, "go", {"n": 1}, "key-1")
    assert first[0] == "accepted" and second[0] == "adopted", (first, second)
    assert second[1]["message_id"] == first[1]["message_id"], (first, second)

    view = _wait_settled(state_dir, run_id, timeout=20)
    assert view["status"] == "done", view
    assert [line for line in oracle_lines(oracle) if line[0] == "got"] == [["got", run_id, "1"]]
    assert [(m["message_id"], m["status"]) for m in _messages(state_dir, run_id)] == \
           [(first[1]["message_id"], "consumed")]
    # Sent once more after the run ended: still the one message (a replay, not a refusal).
    with Client(state_dir, client_id="sender-a") as client:
        third = _send(client, run_id, "go", {"n": 1}, "key-1")
    assert third[0] == "adopted" and third[1]["message_id"] == first[1]["message_id"], third
    assert len(_messages(state_dir, run_id)) == 1


class _Sender(threading.Thread):
    """Sends message `n` to run `n` (payload {"n": n}, key `key-n`) for each n of `numbers`, one after
    the other; a send that gets no receipt (the host is gone, or not serving yet) is sent again with
    the same key until one comes."""

    def __init__(self, state_dir: Path, run_ids: list[str], client_id: str, numbers: range) -> None:
        super().__init__(daemon=True)
        self.state_dir, self.run_ids, self.client_id, self.numbers = state_dir, run_ids, client_id, numbers
        self.receipts: dict[int, tuple[str, dict[str, Any]]] = {}
        self.failures: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for n in self.numbers:
                self.receipts[n] = self._send_until_received(n, self.run_ids[n])
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _send_until_received(self, n: int, run_id: str) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(self.state_dir, client_id=self.client_id, timeout=5, retries=0) as client:
                    answer = client.request("message.send", {"run_id": run_id, "topic": "go", "payload": {"n": n}},
                                            idempotency_key=f"key-{n}")
                if answer.ok:
                    return answer.outcome, answer.receipt
                if answer.outcome != "unavailable":  # a host not serving yet answers unavailable
                    raise AssertionError(f"message {n} refused: {answer.outcome} {answer.error}")
                self.failures.append(f"{n}: unavailable")
            except (HostNotRunning, OSError, TimeoutError) as exc:
                self.failures.append(f"{n}: {type(exc).__name__}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no receipt for message {n} within 60 s: {self.failures[-5:]}")
            time.sleep(0.02)

    def finish(self, timeout: float) -> dict[int, tuple[str, dict[str, Any]]]:
        self.join(timeout)
        assert not self.is_alive() and self.error is None, self.error
        return self.receipts


def _send_unanswered(state_dir: Path, client_id: str, run_id: str, n: int) -> socket.socket:
    """Send message `n` (as `_Sender` does) and return the open connection once the message is
    committed, its answer unread: the receipt a kill then takes from the client."""
    frame = {"schema": "piwf.client.v1", "type": "request", "request_id": f"unanswered-{n}", "client_id": client_id,
             "idempotency_key": f"key-{n}", "operation": "message.send",
             "payload": {"run_id": run_id, "topic": "go", "payload": {"n": n}}}
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(state_dir / "host.sock"))
    assert (recv_frame(sock) or {}).get("type") == "hello"
    send_frame(sock, frame)
    wait_for(lambda: _messages(state_dir, run_id), 20, f"message {n} to be committed")
    return sock


def test_messages_sent_while_the_host_is_sigkilled_are_consumed_once(guard, state_dir) -> None:
    """The host is SIGKILLed while the action after each wait acts (it holds until a gate file
    appears), and after it committed a message whose receipt the client never read."""
    oracle, gate = state_dir / "oracle", state_dir / "gate"
    runs, workers = 16, 4
    script = piwf_host(guard, state_dir, workers=workers)
    with Client(state_dir) as client:
        run_ids = [client.start(fflow("listener"), {"oracle": str(oracle), "gate": str(gate)})["run_id"]
                   for _ in range(runs)]

    def all_waiting() -> bool:
        found = rows(state_dir, "SELECT count(*) AS n FROM run_wait WHERE kind = 'message' AND status = 'pending'")
        return found[0]["n"] == runs

    def acting() -> set[str]:
        return {line[1] for line in oracle_lines(oracle) if line[0] == "got"}

    wait_for(all_waiting, 20, "every run to wait for its message")
    # Messages 0-3 are received, and the action each wakes holds every worker, inside its effect.
    first = _Sender(state_dir, run_ids, "sender-c", range(workers))
    first.start()
    receipts = first.finish(30)
    wait_for(lambda: len(acting()) == workers, 20, lambda: f"{workers} actions to act (have {acting()})")
    # Message 4 is committed; the kill takes its receipt away.
    unanswered = _send_unanswered(state_dir, "sender-c", run_ids[workers], workers)
    (sent_before_kill,) = _messages(state_dir, run_ids[workers])
    rest = _Sender(state_dir, run_ids, "sender-c", range(workers, runs))
    sigkill(guard, script)
    rest.start()  # meets the dead host first
    unanswered.close()
    gate.touch()  # the dead host's workers may finish their actions: nothing will record it
    dead_host_settled(state_dir)
    cut = {row["run_id"] for row in rows(state_dir, "SELECT run_id FROM effect WHERE status = 'applying'")}
    # The scenario: the kill landed inside the actions (their effects reserved, not settled).
    assert cut == acting() and len(cut) == workers, (cut, acting())
    piwf_host(guard, state_dir, workers=workers)
    receipts |= rest.finish(90)
    assert rest.failures, "no send met the dead host"
    assert [outcome for outcome, _ in receipts.values() if outcome not in ("accepted", "adopted")] == []
    # The send whose receipt the kill took, sent again under its key: the message committed before.
    assert receipts[workers][0] == "adopted", receipts[workers]
    assert receipts[workers][1]["message_id"] == sent_before_kill["message_id"]

    # The test plays the person for an ambiguous effect (the action after the wait was cut by the
    # kill): it looks at the world (the oracle) and confirms what happened, or has it done.
    views, resolved = {}, []
    for run_id in run_ids:
        while True:
            view = _wait_settled(state_dir, run_id, timeout=30)
            if view["status"] != "parked":
                break
            assert view["park_reason"] == "ambiguous_effect", view
            acted = [line for line in oracle_lines(oracle) if line[:2] == ["got", run_id]]
            (wait_node,) = [node for node in view["nodes"] if node["node_id"] == "wait"]
            with Client(state_dir) as client:
                answer = client.request("effect.resolve", {"effect_id": view["park_detail"],
                                                           "action": "confirm" if acted else "retry",
                                                           "output": wait_node["output"]})
            assert answer.ok, (answer.outcome, answer.error)
            resolved.append(run_id)
        views[run_id] = view

    got = Counter((line[1], line[2]) for line in oracle_lines(oracle) if line[0] == "got")
    for n, run_id in enumerate(run_ids):
        assert views[run_id]["status"] == "done", views[run_id]
        assert views[run_id]["output"] == {"n": n}
        assert got[(run_id, str(n))] == 1, f"payload {n} consumed {got[(run_id, str(n))]} times"
        # One message per key, whichever host's receipt the sender got, consumed by the run's wait.
        assert [(m["message_id"], m["status"]) for m in _messages(state_dir, run_id)] == \
               [(receipts[n][1]["message_id"], "consumed")]
    assert sum(got.values()) == runs, got
    assert len(resolved) == len(set(resolved)), f"a run parked on its effect twice: {resolved}"
    # Every action the kill cut parked on its effect (never ran again by itself) and was settled by the person.
    assert sorted(resolved) == sorted(cut), (resolved, cut)


# --- 4. a concurrency limit across the active host and a runner host (PostgreSQL) -------------------


def test_concurrency_limit_holds_across_an_active_and_a_runner_host(guard, state_dir, pg_database) -> None:
    url = pg_database.url
    oracle = state_dir / "oracle"
    (state_dir / "host-a").mkdir()
    (state_dir / "runner-1").mkdir()
    # One worker on the active host, three on the runner: the second slot of the limit can only be
    # the runner's, and the runner alone has a worker more than the limit allows.
    piwf_host(guard, state_dir / "host-a", "--host-id", "host-a", workers=1, database=url, lease_s=5)
    piwf_host(guard, state_dir / "runner-1", "--role", "runner", "--host-id", "runner-1", workers=3,
               database=url, lease_s=5)
    with Client(state_dir / "host-a") as client:
        run_ids = [client.start(fflow("limited"), {"oracle": str(oracle), "cluster": "eu", "sleep": 0.1})["run_id"]
                   for _ in range(50)]

    def finished() -> int:
        return database_rows(url, "SELECT count(*) AS n FROM run WHERE workflow = 'limited' AND status IN "
                                  "('done', 'failed', 'cancelled')")[0]["n"]

    wait_for(lambda: finished() == len(run_ids), 60, lambda: f"every run to finish ({finished()} of 50)", poll=0.1)
    assert database_rows(url, "SELECT DISTINCT status FROM run WHERE workflow = 'limited'") == [{"status": "done"}]

    records = oracle_lines(oracle)
    starts = {run_id: float(at) for word, run_id, at, _pid in records if word == "start"}
    ends = {run_id: float(at) for word, run_id, at, _pid in records if word == "end"}
    assert sorted(starts) == sorted(ends) == sorted(run_ids)
    assert len(records) == 2 * len(run_ids), "a run's node ran twice"
    most = max_overlap([(starts[r], ends[r]) for r in run_ids])
    assert most <= LIMIT, f"{most} runs of limited[cluster=eu] executed at once (limit {LIMIT})"
    assert most == LIMIT, f"the limit's slots were never both used ({most})"
    executors = Counter(row["executed_by"] for row in database_rows(
        url, "SELECT executed_by FROM node_attempt WHERE status = 'succeeded'"))
    assert set(executors) == {"host-a", "runner-1"}, executors


# --- 5. a priority run queued behind 100 fresh ones -------------------------------------------------


def test_priority_run_starts_before_the_queue_of_fresh_runs(guard, state_dir) -> None:
    oracle = state_dir / "oracle"
    gate = state_dir / "gate"
    workers = 4
    piwf_host(guard, state_dir, workers=workers)
    run_input = {"oracle": str(oracle), "gate": str(gate), "sleep": 0.1}
    with Client(state_dir) as client:
        # The first runs to start hold their workers until the gate opens: the rest stay queued.
        fresh = [client.start(fflow("queued"), run_input)["run_id"] for _ in range(100)]
        wait_for(lambda: len(oracle_lines(oracle)) >= workers, 30, lambda: f"{workers} runs to hold every worker "
                                                                      f"(have {len(oracle_lines(oracle))})")
        urgent = client.start(fflow("queued"), run_input, priority=10)["run_id"]
        assert client.get(urgent)["priority"] == 10
        # The scenario: every worker is held and the urgent run waits behind the 96 fresh ones left.
        assert client.get(urgent)["status"] == "queued"
    holding = [line[1] for line in oracle_lines(oracle)]
    assert len(holding) == workers and urgent not in holding, holding
    gate.touch()

    def finished() -> int:
        return rows(state_dir, "SELECT count(*) AS n FROM run WHERE status = 'done'")[0]["n"]

    wait_for(lambda: finished() == len(fresh) + 1, 60, lambda: f"every run to finish ({finished()})", poll=0.1)
    order = [run_id for _word, run_id, _at, _pid in sorted(oracle_lines(oracle), key=lambda line: float(line[2]))]
    assert sorted(order) == sorted([*fresh, urgent]), "a run started twice or never"
    position = order.index(urgent)
    # Only the runs already holding a worker when it was queued, and those claimed alongside it
    # when the workers freed, start before it: it starts before at least 93 of the 100 others.
    assert position < 2 * workers, f"the priority run was the {position + 1}th of {len(order)} to start"
