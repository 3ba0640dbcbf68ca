"""Durable functions under real SIGKILLs (docs/functions.md "Crashes, effects, retries"), with real
`bin/piwf-host` processes and an oracle file outside the database that every step execution
appends to (workflows in `wf/function_crash_flows.py`):

1. a 20-step function (two loops with local state, pure steps, non-idempotent and idempotent effect
   steps, a step that fails after its retries inside a try/except): the host and, separately, the
   step's worker are SIGKILLed at seeded random points of one run (the host restarted after each of
   its kills). The run ends `done` with a clean run's output. From the oracle and the attempts
   committed at each kill: no step whose result was committed ran again; a step cut off by a kill
   ran again at most once per such kill (a pure or idempotent one by itself, a non-idempotent
   effect only when the person said `retry`; a retried step: each attempt not committed at the kill,
   as a dead host's worker may go on into its next try); every non-idempotent effect a kill cut off parked the
   run `ambiguous_effect` with nothing run again, and the test, playing the person, confirmed it
   (the oracle shows it acted) or had it retried (it did not).
2. a function that sleeps, waits for a message and waits for a decision, with the host SIGKILLed at
   each wait: the message is sent while no host runs (the sender meets the dead host) until the
   next one takes it, the decision answered after the restart. It finishes with the right output,
   each step before each wait ran once, and the step after the sleep ran no earlier than its
   wake-up time.

Every kill is shown to have landed, so no test passes by its kills missing: test 1's plan always
holds a kill inside a pure step and inside two non-idempotent effects, one before it acts (the person
retries it) and one after (the person confirms it), read from the oracle against what the database
had committed at the kill; test 2's next host serves before the sleep's wake-up. The kill plan of
test 1 (wf/function_kills.py, with the `Killer` and the `Person`) comes from a seed that every failure
message prints; `PIWF_CRASH_SEED=<seed>` replays it. A slow variant kills more, three times. Runs on
SQLite, and on PostgreSQL under `PIWF_TEST_DATABASE=postgresql`.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import dead_host_settled, hosts_on_postgres, replaced_host_lease_s
from wf import harness
from wf.function_kills import (
    FINISHED,
    Killer,
    Person,
    clean_run,
    is_pure,
    oracle,
    plan,
    run_row,
    settled,
    spec,
    starts,
    words,
)
from wf.harness import rows, wait_for
from wf.piwf_hosts import piwf_host, sigkill

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

#: Kills of test 1: this many of the host and this many of the step's worker, in a seeded order (the
#: slow variant: more, in a few runs).
HOST_KILLS = 3
WORKER_KILLS = 3
SLOW_HOST_KILLS = 5
SLOW_WORKER_KILLS = 5
SEED_ENV = "PIWF_CRASH_SEED"


@contextlib.contextmanager
def reported(seed: int) -> Iterator[None]:
    """Failures inside say the seed that reproduces them."""
    try:
        yield
    except (AssertionError, pytest.fail.Exception) as exc:
        raise AssertionError(f"[kill plan seed {seed}: {SEED_ENV}={seed} replays it] {exc}") from exc


def test_host_and_worker_sigkills_at_random_points_of_a_twenty_step_function(guard, state_dir) -> None:
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    with reported(seed):
        _twenty_steps_under_kills(guard, state_dir, random.Random(seed), HOST_KILLS, WORKER_KILLS)


@pytest.mark.slow
@pytest.mark.parametrize("round_no", range(3))
def test_more_sigkills_at_random_points_of_a_twenty_step_function(guard, state_dir, round_no) -> None:
    """The same with more kills, a few times (each round draws its own seed)."""
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32)) + round_no
    with reported(seed):
        _twenty_steps_under_kills(guard, state_dir, random.Random(seed), SLOW_HOST_KILLS, SLOW_WORKER_KILLS)


def _twenty_steps_under_kills(guard, state_dir: Path, rng: random.Random, host_kills: int,
                              worker_kills: int) -> None:
    script = piwf_host(guard, state_dir, workers=2)
    clean, order, clean_executions = clean_run(state_dir)
    charges = {label for label in order if label.startswith("charge")}
    oracle_path = state_dir / "oracle"
    targets, slow = plan(rng, order, charges, host_kills, worker_kills)
    with Client(state_dir) as client:
        run_id = client.start(spec("ledger"), {"oracle": str(oracle_path), "slow": slow})["run_id"]
    person = Person(state_dir, oracle_path, run_id)
    killer = Killer(guard, state_dir, script, order, person)
    for target in targets:
        killer.kill(target, clean_executions)
    kills, dead = killer.kills, killer.dead

    while (run := settled(state_dir, run_id, timeout=60, script=killer.script))["status"] not in FINISHED:
        person.settle(run, dead)
    with Client(state_dir) as client:
        view = client.get(run_id)
    assert view["status"] == "done", view

    # The output a clean run gives, and the same steps.
    assert view["output"] == clean["output"]
    assert [node["node_id"] for node in view["nodes"]] == [node["node_id"] for node in clean["nodes"]]
    lines = oracle(oracle_path)
    executions = starts(lines)
    assert set(executions) == set(order), executions

    # No step whose result was committed at a kill ran again after it.
    for kill in kills:
        again = {line.label for line in lines
                 if line.word == "start" and line.label in kill.final and line.at > kill.killed_at}
        assert not again, f"committed before the kill at {kill.target}, ran again: {again}"

    # What each kill cut off: a step started by a worker the kill ended, not committed at the kill.
    cut: list[set[str]] = []
    for kill in kills:
        started = {line.label for line in lines if line.word == "start" and line.pid in kill.pids}
        cut.append({label for label in started if label not in kill.final})
    for label in order:
        extra = executions[label] - clean_executions[label] - person.retried[label]
        cut_by = sum(label in cut_off for cut_off in cut)
        if label in charges:
            # A non-idempotent effect runs again only when the person says retry: once per reservation
            # but those a kill cut off before the function started.
            assert extra == -person.unstarted[label], \
                f"{label} ran {executions[label]} times (retried {person.retried[label]}, {person.unstarted[label]} " \
                "of them cut off before they started)"
        elif clean_executions[label] > 1:
            # A retried step: a kill cuts off at most the attempts not committed at it (a pure step's
            # failed attempt is not waited for, and a dead host's worker goes on into the next try),
            # so a committed attempt never runs again and each cut-off one at most once per kill.
            allowed = sum(clean_executions[label] - kill.committed[label]
                          for kill, cut_off in zip(kills, cut, strict=True) if label in cut_off)
            assert 0 <= extra <= allowed, \
                f"{label} ran {executions[label]} times, {allowed} attempts uncommitted at the kills that cut it off"
        else:
            # A pure or idempotent step runs again at most once per kill that cut it off.
            assert 0 <= extra <= cut_by, f"{label} ran {executions[label]} times, cut off by {cut_by} kills"

    # Every non-idempotent effect a kill cut off parked the run, once per such kill, and only those: the
    # effects reserved and unsettled at a kill, among them every one started by a worker it ended.
    assert sorted(person.parked_on) == sorted(label for kill in kills for label in kill.reserved), \
        (person.parked_on, kills)
    cut_effects = [label for cut_off, kill in zip(cut, kills, strict=True) for label in cut_off
                   if label in charges and label in kill.reserved]
    assert cut_effects == [label for cut_off in cut for label in cut_off if label in charges], (cut, kills)
    # Each effect applied as often as a person or a clean execution says (the oracle's `applied`).
    applied = Counter(line.label for line in lines if line.word == "applied")
    for label in charges:
        assert applied[label] <= 1 + person.retried[label], (label, applied[label], person.retried)

    # The scenario happened: every kill landed before the run finished, and some cut off a pure step
    # mid-way (it started, its attempt was not committed) and some a non-idempotent effect.
    assert [kill.target.kind for kill in kills].count("host") == host_kills and len(kills) == host_kills + worker_kills
    # (A dead host's worker may finish its step after the kill: what counts is what it wrote before.)
    inside = [label for kill in kills for label in order if is_pure(label) and label not in kill.final and
              words(lines, label, kill)["start"] > words(lines, label, kill)["end"]]
    assert inside, f"no kill landed inside a pure step (started, not ended at the kill, not committed): {kills}"
    assert cut_effects, f"no kill cut off a non-idempotent effect: {kills}"
    assert person.retried and person.confirmed, f"the person never had to retry or to confirm: {person.parked_on}"
    effects = {row["node_id"]: row["status"] for row in rows(
        state_dir, "SELECT node_id, status FROM effect WHERE run_id = ? AND status <> 'ambiguous'", (run_id,))}
    assert set(effects) == {label for label in order if label.startswith(("charge", "publish"))}, effects


# --- 2. a sleep, a message and a decision across host SIGKILLs ---------------------------------------


class _Sender(threading.Thread):
    """Sends one message under one key until a receipt comes (the host may be dead or not serving)."""

    def __init__(self, state_dir: Path, run_id: str, payload: Any) -> None:
        super().__init__(daemon=True)
        self.state_dir, self.run_id, self.payload = state_dir, run_id, payload
        self.failures: list[str] = []
        self.receipt: tuple[str, dict[str, Any]] | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        deadline = time.monotonic() + 60
        try:
            while self.receipt is None:
                try:
                    with Client(self.state_dir, client_id="crash-sender", timeout=5, retries=0) as client:
                        answer = client.request("message.send", {"run_id": self.run_id, "topic": "go",
                                                                 "payload": self.payload}, idempotency_key="go-1")
                    if answer.ok:
                        self.receipt = (answer.outcome, answer.receipt)
                        return
                    if answer.outcome != "unavailable":  # a host not serving yet answers unavailable
                        raise AssertionError(f"message refused: {answer.outcome} {answer.error}")
                    self.failures.append("unavailable")
                except (HostNotRunning, OSError, TimeoutError) as exc:
                    self.failures.append(type(exc).__name__)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no receipt within 60 s: {self.failures[-5:]}")
                time.sleep(0.02)  # between tries of a send, not a synchronisation
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self, timeout: float) -> tuple[str, dict[str, Any]]:
        self.join(timeout)
        assert not self.is_alive() and self.error is None and self.receipt is not None, self.error
        return self.receipt


def _waiting_on(state_dir: Path, run_id: str, what: str) -> dict[str, Any] | None:
    """The run's pending wait of `kind` (sleep, message) or its pending decision, once it parked on it."""
    run = run_row(state_dir, run_id)
    assert run["status"] not in FINISHED, run
    if (run["status"], run["park_reason"]) != ("parked", "waiting"):
        return None
    if what == "decision":
        found = rows(state_dir, "SELECT request_id, node_id, revision FROM interactive_request WHERE run_id = ? "
                                "AND kind = 'decision' AND status IN ('pending', 'presenting')", (run_id,))
    else:
        found = rows(state_dir, "SELECT wait_id, node_id, wake_at FROM run_wait WHERE run_id = ? AND kind = ? "
                                "AND status = 'pending'", (run_id, what))
    return found[0] if found else None


def test_a_function_sleeping_waiting_for_a_message_and_a_decision_across_host_sigkills(guard, state_dir) -> None:
    oracle_path = state_dir / "oracle"
    began = time.monotonic()
    script = piwf_host(guard, state_dir)
    # The sleep lasts long enough for the next host to serve before it ends, so that a wake-up too
    # early would show: a few times what a host's start takes on this machine now, and on PostgreSQL
    # the dead host's lease, which the next host waits out.
    nap_s = max(3.0, 2.5 * (time.monotonic() - began)) + (replaced_host_lease_s() if hosts_on_postgres() else 0)
    with Client(state_dir) as client:
        run_id = client.start(spec("waiter"), {"oracle": str(oracle_path), "nap_s": nap_s})["run_id"]

    # Killed while it sleeps; the next host wakes it at its time, not before.
    sleeping = wait_for(lambda: _waiting_on(state_dir, run_id, "sleep"), 20, "the run to sleep")
    assert sleeping["node_id"] == "nap" and sleeping["wake_at"] > time.time(), sleeping
    killed = [sigkill(guard, script)]
    dead_host_settled(state_dir)
    assert _waiting_on(state_dir, run_id, "sleep") == sleeping
    script = piwf_host(guard, state_dir)
    # The scenario: the next host serves before the wake-up (and would show a wake-up too early).
    assert time.time() < sleeping["wake_at"], \
        f"the next host served only {time.time() - sleeping['wake_at']:.1f} s after the wake-up: a slow machine?"

    # Killed while it waits for the message; the message is sent while no host runs, and again (under
    # its key) until the next host takes it.
    waiting = wait_for(lambda: _waiting_on(state_dir, run_id, "message"), nap_s + 20,
                       lambda: f"the run to wait for its message; host log:\n{script.log()[-4000:]}")
    assert waiting["node_id"] == "message", waiting
    killed.append(sigkill(guard, script))
    dead_host_settled(state_dir)
    sender = _Sender(state_dir, run_id, {"n": 7})
    sender.start()
    wait_for(lambda: sender.failures or sender.receipt, 10, "the message to meet the dead host")
    script = piwf_host(guard, state_dir)
    outcome, receipt = sender.finish(30)
    assert sender.failures and outcome == "accepted", (sender.failures, outcome, receipt)

    # Killed while the decision is open; answered after the restart.
    decision = wait_for(lambda: _waiting_on(state_dir, run_id, "decision"), 20,
                        lambda: f"the decision to open; host log:\n{script.log()[-4000:]}")
    assert decision["node_id"] == "approve", decision
    killed.append(sigkill(guard, script))
    dead_host_settled(state_dir)
    assert _waiting_on(state_dir, run_id, "decision") == decision
    script = piwf_host(guard, state_dir)
    with Client(state_dir) as client:
        answer = client.request("decision.answer", {"request_id": decision["request_id"],
                                                    "response": {"choice": "yes"}})
    assert answer.ok, (answer.outcome, answer.error)

    run = settled(state_dir, run_id, timeout=30, script=script)
    assert run["status"] == "done", run
    with Client(state_dir) as client:
        view = client.get(run_id)
    assert view["output"] == {"steps": ["before_sleep", "before_message", "before_decision", "after_decision"],
                              "message": {"n": 7}, "choice": "yes", "answered_by_a_person": True}, view

    # Each step ran once, each wait's step before its kill, the step after the sleep not before its time.
    lines = {line.label: line for line in oracle(oracle_path)}
    assert starts(oracle(oracle_path)) == dict.fromkeys(lines, 1), f"a step ran again: {oracle(oracle_path)}"
    assert list(lines) == ["before_sleep", "before_message", "before_decision", "after_decision"]
    assert lines["before_sleep"].at < killed[0] < lines["before_message"].at < killed[1] \
        < lines["before_decision"].at < killed[2] < lines["after_decision"].at, (lines, killed)
    assert lines["before_message"].at >= sleeping["wake_at"], "the sleep woke before its recorded time"
    assert lines["before_message"].at >= lines["before_sleep"].at + nap_s, "the sleep was shorter than asked"
    waits = rows(state_dir, "SELECT kind, status FROM run_wait WHERE run_id = ? ORDER BY kind", (run_id,))
    assert waits == [{"kind": "message", "status": "consumed"}, {"kind": "sleep", "status": "consumed"}], waits
    assert [(m["message_id"], m["status"]) for m in rows(
        state_dir, "SELECT message_id, status FROM run_message WHERE run_id = ?", (run_id,))] == \
        [(receipt["message_id"], "consumed")]
