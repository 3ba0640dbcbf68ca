"""Durable functions under real SIGKILLs (docs/functions.md "Crashes, effects, retries"), with real
`bin/piwf-host` processes and an oracle file outside the database that every step execution
appends to (workflows in `wf/function_crash_flows.py`):

1. a 20-step function (two loops with local state, pure steps, non-idempotent and idempotent effect
   steps, a step that fails after its retries inside a try/except): the host and, separately, the
   step's worker are SIGKILLed at seeded random points of one run (the host restarted after each of
   its kills). The run ends `done` with a clean run's output. From the oracle and the attempts
   committed at each kill: no step whose result was committed ran again; a step cut off by a kill
   ran again at most once per such kill (a pure or idempotent one by itself, a non-idempotent
   effect only when the person said `retry`); every non-idempotent effect a kill cut off parked the
   run `ambiguous_effect` with nothing run again, and the test, playing the person, confirmed it
   (the oracle shows it acted) or had it retried (it did not).
2. a function that sleeps, waits for a message and waits for a decision, with the host SIGKILLed at
   each wait: the message is sent while no host runs (the sender meets the dead host) until the
   next one takes it, the decision answered after the restart. It finishes with the right output,
   each step before each wait ran once, and the step after the sleep ran no earlier than its
   wake-up time.

Every kill is shown to have landed (test 1: kills inside a pure step and inside a non-idempotent
effect, read from the oracle against what the database had committed), so no test passes by its
kills missing. The kill plan of test 1 comes from a seed that every failure message prints;
`PIWF_CRASH_SEED=<seed>` replays that plan. Runs on SQLite, and on PostgreSQL under
`PIWF_TEST_DATABASE=postgresql`.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from testsupport import dead_host_settled, hosts_on_postgres, replaced_host_lease_s
from wf import harness
from wf.function_crash_flows import FRAGILE_RETRIES, charged
from wf.harness import WF, alive, rows, wait_for
from wf.piwf_hosts import piwf_host, sigkill

from piwf_actors.client import Client
from piwf_actors.client.connection import HostNotRunning

guard = harness.guard  # the fixture every test here uses (see wf/harness.py)

FINISHED = ("done", "failed", "cancelled")
#: Kills of test 1: this many of the host and this many of the step's worker, in a seeded order (the
#: slow variant: more, in a few runs).
HOST_KILLS = 3
WORKER_KILLS = 3
SLOW_HOST_KILLS = 5
SLOW_WORKER_KILLS = 5
SEED_ENV = "PIWF_CRASH_SEED"


def spec(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/function_crash_flows.py."""
    return f"{WF / 'function_crash_flows.py'}:{attr}"


@contextlib.contextmanager
def reported(seed: int) -> Iterator[None]:
    """Failures inside say the seed that reproduces them."""
    try:
        yield
    except (AssertionError, pytest.fail.Exception) as exc:
        raise AssertionError(f"[kill plan seed {seed}: {SEED_ENV}={seed} replays it] {exc}") from exc


# --- the oracle -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    label: str
    word: str
    pid: int
    at: float
    rest: tuple[str, ...]


def oracle(path: Path) -> list[Line]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        label, word, pid, at, *rest = line.split(" ")
        found.append(Line(label, word, int(pid), float(at), tuple(rest)))
    return found


def starts(lines: list[Line]) -> Counter[str]:
    """Executions per node id (a `start` line each)."""
    return Counter(line.label for line in lines if line.word == "start")


# --- the database, read by the test -------------------------------------------------------------------


def _run(state_dir: Path, run_id: str) -> dict[str, Any]:
    (found,) = rows(state_dir, "SELECT status, park_reason, park_detail FROM run WHERE run_id = ?", (run_id,))
    return found


def _finished_attempts(state_dir: Path, run_id: str, generation: int | None = None) -> Counter[str]:
    """Committed attempts per node id (succeeded or failed), of claims up to `generation` if given."""
    sql = "SELECT node_id FROM node_attempt WHERE run_id = ? AND status IN ('succeeded', 'failed')"
    params: tuple[Any, ...] = (run_id,)
    if generation is not None:
        sql += " AND generation <= ?"
        params += (generation,)
    return Counter(row["node_id"] for row in rows(state_dir, sql, params))


def _settled(state_dir: Path, run_id: str, timeout: float, script: Any = None) -> dict[str, Any]:
    """The run's row once it finished or parked for anything but a wait."""

    def done() -> dict[str, Any] | None:
        run = _run(state_dir, run_id)
        if run["status"] in FINISHED or (run["status"] == "parked" and run["park_reason"] != "waiting"):
            return run
        return None

    def describe() -> str:
        said = f"run {run_id} to settle (is {_run(state_dir, run_id)})"
        if script is not None:
            said += f"; host exit status {script.proc.poll()}; its log:\n{script.log()[-6000:]}"
        return said

    return wait_for(done, timeout, describe, poll=0.05)


# --- 1. twenty steps, host and worker SIGKILLs -----------------------------------------------------


@dataclass(frozen=True)
class Target:
    """Where a kill lands: once a worker still alive writes the line `word` of step `label`."""

    kind: str  # host | worker
    label: str
    word: str  # start | applied | end (or the start of a later step, see `landed`)


@dataclass
class Kill:
    target: Target
    line: Line  # the oracle line it came after
    killed_at: float
    pids: set[int]  # the worker processes the kill ended (a host kill: every worker of that host)
    committed: Counter[str]  # committed attempts per node id at the kill
    final: set[str] = field(default_factory=set)  # node ids whose result was committed at the kill
    reserved: set[str] = field(default_factory=set)  # non-idempotent effects reserved, unsettled at the kill


def _plan(rng: random.Random, order: list[str], effects: set[str], host_kills: int,
          worker_kills: int) -> tuple[list[Target], list[str]]:
    """Seeded kill targets at distinct steps, in the order the run reaches them. Whatever the draw,
    three of them land inside a step: a pure one, a non-idempotent effect before it acts (a worker's
    kill: a dead host's worker would go on and act; the person will have it retried) and another after
    it acted (the person will confirm it); these are also
    returned, for the run to make them slow, so that a kill cannot come after they ended. The rest
    land anywhere but in the last step (the run must have work left after a kill)."""
    kinds = ["host"] * host_kills + ["worker"] * (worker_kills - 1)
    rng.shuffle(kinds)
    candidates = range(len(order) - 1)
    before_acting, after_acting = rng.sample([p for p in candidates if order[p] in effects], 2)
    # (No kill in the step before the one to cut before it acts: a kill there may go on into it.)
    inside_pure = rng.choice([p for p in candidates if _is_pure(order[p]) and p != before_acting - 1])
    forced = {inside_pure: "start", before_acting: "start", after_acting: "applied"}
    others = rng.sample([p for p in candidates if p not in forced and p != before_acting - 1],
                        host_kills + worker_kills - len(forced))
    kinds.insert(sorted([*forced, *others]).index(before_acting), "worker")
    targets = []
    for kind, position in zip(kinds, sorted([*forced, *others]), strict=True):
        label = order[position]
        if position in forced:
            word = forced[position]
        elif label in effects:
            word = rng.choice(["start", "applied"])  # an effect cut off: before or after it acts
        elif label.startswith("publish"):
            word = rng.choice(["start", "applied", "end"])
        else:
            word = rng.choice(["start", "end"])
        targets.append(Target(kind, label, word))
    return targets, [order[position] for position in forced]


def _words(lines: list[Line], label: str, kill: Kill) -> Counter[str]:
    """The lines of step `label` that the workers `kill` ended wrote before it, per word."""
    return Counter(line.word for line in lines
                   if line.label == label and line.pid in kill.pids and line.at <= kill.killed_at)


def _is_pure(label: str) -> bool:
    return not label.startswith(("charge", "publish"))


class Person:
    """Settles what a crash leaves for a person: an ambiguous effect (looking at the oracle, the outside
    world, once the workers a kill ended are gone: confirmed with what it did when the cut-off
    execution acted, else retried) and a run parked `no_progress` (resumed)."""

    def __init__(self, state_dir: Path, oracle_path: Path, run_id: str) -> None:
        self.state_dir, self.oracle_path, self.run_id = state_dir, oracle_path, run_id
        self.parked_on: list[str] = []  # node ids of the effects the run parked on, in order
        self.retried: Counter[str] = Counter()
        self.confirmed: list[str] = []
        self.unstarted: Counter[str] = Counter()  # cut off after its reservation, before its function ran
        self.looked: Counter[str] = Counter()  # oracle lines per effect the person has looked at
        self.resumed = 0

    def settle(self, run: dict[str, Any], dead: set[int]) -> None:
        wait_for(lambda: not any(_alive_pid(pid) for pid in dead), 20, "the workers the kills ended to be gone")
        if run["park_reason"] == "no_progress":
            self._request("run.resume", {}, run_id=self.run_id)
            self.resumed += 1
            return
        assert run["park_reason"] == "ambiguous_effect", run
        (effect,) = rows(self.state_dir, "SELECT node_id, status, idempotent FROM effect WHERE effect_id = ?",
                         (run["park_detail"],))
        assert effect["status"] == "ambiguous" and not effect["idempotent"], effect
        label = effect["node_id"]
        lines = [line for line in oracle(self.oracle_path) if line.label == label]
        new, self.looked[label] = lines[self.looked[label]:], len(lines)
        # Not run again by itself: at most one execution since the person last decided (none when the
        # kill came between the effect's reservation and its function's start).
        assert starts(new)[label] <= 1, f"the cut-off effect {label} ran again before the person decided: {lines}"
        self.parked_on.append(label)
        applied = [line for line in new if line.word == "applied"]
        if applied:  # it acted: the person confirms what it did
            self._request("effect.resolve", {"effect_id": run["park_detail"], "action": "confirm",
                                             "output": charged(label, int(applied[0].rest[0]))})
            self.confirmed.append(label)
        else:
            self._request("effect.resolve", {"effect_id": run["park_detail"], "action": "retry"})
            self.retried[label] += 1
            self.unstarted[label] += not new

    def _request(self, operation: str, payload: dict[str, Any], run_id: str | None = None) -> None:
        with Client(self.state_dir) as client:
            answer = client.request(operation, payload, run_id=run_id)
        assert answer.ok, (operation, answer.outcome, answer.error)


def _alive_pid(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def _clean_run(state_dir: Path) -> tuple[dict[str, Any], list[str], Counter[str]]:
    """A run without kills (and without the holds that give kills their time: the output does not
    depend on them): its view, its step ids in call order and its executions per step."""
    clean_oracle = state_dir / "clean-oracle"
    with Client(state_dir) as client:
        run_id = client.start(spec("ledger"), {"oracle": str(clean_oracle), "hold_s": 0, "effect_hold_s": 0})["run_id"]
        view = client.wait(run_id, timeout=60)
    assert view["status"] == "done", view
    order = list(dict.fromkeys(row["node_id"] for row in rows(  # a retried step has an attempt per try
        state_dir, "SELECT node_id FROM node_attempt WHERE run_id = ? ORDER BY step, started_at", (run_id,))))
    assert order[-1] == "return" and len(order) == 21, order
    lines = oracle(clean_oracle)
    executions = starts(lines)
    # The labels the steps write are the engine's node ids, in the order it calls them.
    assert list(dict.fromkeys(line.label for line in lines)) == order[:-1], (order, lines)
    assert executions == {label: FRAGILE_RETRIES + 1 if label == "fragile" else 1 for label in order[:-1]}
    assert view["output"]["calls"] == 20 and view["output"]["caught"]["code"] == "node_error", view["output"]
    return view, order[:-1], executions


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


class Killer:
    """Drives one run of `ledger` through the kill plan: waits for each kill point, kills, and reads
    what the database had committed at the kill (settling, as the person, what the run parks on)."""

    def __init__(self, guard, state_dir: Path, script: Any, order: list[str], person: Person) -> None:
        self.guard, self.state_dir, self.script, self.order, self.person = guard, state_dir, script, order, person
        self.run_id = person.run_id
        self.dead: set[int] = set()  # every worker a kill ended
        self.kills: list[Kill] = []
        self.reserved: set[str] = set()

    def landed(self, target: Target) -> Line | None:
        """The oracle line a live worker wrote at `target` (or, when the kill before went on into
        the target's step so that no live worker writes that line, the start of a later step)."""
        at = self.order.index(target.label)
        for line in oracle(self.person.oracle_path):
            if line.pid in self.dead:
                continue
            if (line.label, line.word) == (target.label, target.word) or \
                    (self.order.index(line.label) > at and line.word == "start"):
                return line
        run = _run(self.state_dir, self.run_id)
        if run["status"] in FINISHED:
            pytest.fail(f"the run ended ({run}) before the kill at {target}; workers killed {sorted(self.dead)}; "
                        f"oracle: {oracle(self.person.oracle_path)[-12:]}")
        if run["status"] == "parked" and run["park_reason"] != "waiting":
            self.person.settle(run, self.dead)
        return None

    def kill(self, target: Target, final_attempts: Counter[str]) -> None:
        line = wait_for(lambda: self.landed(target), 60,
                        lambda: f"the kill point {target} (kills so far {self.kills})", poll=0.002)
        killed_at, pids, committed = (self._host if target.kind == "host" else self._worker)(line)
        self.dead |= pids
        final = {label for label in self.order if committed[label] >= final_attempts[label]}
        self.kills.append(Kill(target, line, killed_at, pids, committed, final, self.reserved))

    def _host(self, _line: Line) -> tuple[float, set[int], Counter[str]]:
        pids = {worker.pid for worker in self.script.descendants()}
        killed_at = sigkill(self.guard, self.script)
        dead_host_settled(self.state_dir)
        committed = _finished_attempts(self.state_dir, self.run_id)
        self.reserved = self._unsettled_effects()
        self.script = piwf_host(self.guard, self.state_dir, workers=2)
        # The next host reaps the dead one's workers (they may have gone on a little meanwhile).
        wait_for(lambda: not any(_alive_pid(pid) for pid in pids), 20, "the dead host's workers to be reaped")
        return killed_at, pids, committed

    def _worker(self, line: Line) -> tuple[float, set[int], Counter[str]]:
        worker = self.guard.track(line.pid)
        launches = rows(self.state_dir, "SELECT generation, worker_id FROM run_worker WHERE run_id = ? AND pid = ? "
                                        "AND status = 'live'", (self.run_id, line.pid))
        assert len(launches) == 1, f"worker {line.pid} of {line} serves no launch of the run: {launches}"
        (launch,) = launches
        killed_at = time.time()
        os.kill(line.pid, signal.SIGKILL)
        wait_for(lambda: not alive(worker), 10, "the worker to die")
        # Once the host settled the launch, everything the worker sent before it died is decided. (The
        # launch is the host's to end: had its worker ended it, its row would be gone and the kill late.)
        wait_for(lambda: rows(self.state_dir, "SELECT status FROM run_worker WHERE worker_id = ?",
                              (launch["worker_id"],)) == [{"status": "exited"}], 20,
                 lambda: f"the host to settle the killed worker's launch {launch}")
        self.reserved = self._unsettled_effects()
        return killed_at, {line.pid}, _finished_attempts(self.state_dir, self.run_id, launch["generation"])

    def _unsettled_effects(self) -> set[str]:
        """Non-idempotent effects reserved and not settled: `applying` after a host's death, `ambiguous`
        once the host settled a worker's (any earlier one was resolved before this kill)."""
        return {row["node_id"] for row in rows(
            self.state_dir, "SELECT node_id FROM effect WHERE run_id = ? AND status IN ('applying', 'ambiguous') "
                            "AND idempotent = 0", (self.run_id,))}


def _twenty_steps_under_kills(guard, state_dir: Path, rng: random.Random, host_kills: int,
                              worker_kills: int) -> None:
    script = piwf_host(guard, state_dir, workers=2)
    clean, order, clean_executions = _clean_run(state_dir)
    charges = {label for label in order if label.startswith("charge")}
    oracle_path = state_dir / "oracle"
    targets, slow = _plan(rng, order, charges, host_kills, worker_kills)
    with Client(state_dir) as client:
        run_id = client.start(spec("ledger"), {"oracle": str(oracle_path), "slow": slow})["run_id"]
    person = Person(state_dir, oracle_path, run_id)
    killer = Killer(guard, state_dir, script, order, person)
    for target in targets:
        killer.kill(target, clean_executions)
    kills, dead = killer.kills, killer.dead

    while (run := _settled(state_dir, run_id, timeout=60, script=killer.script))["status"] not in FINISHED:
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
    inside = [label for kill in kills for label in order if _is_pure(label) and label not in kill.final and
              _words(lines, label, kill)["start"] > _words(lines, label, kill)["end"]]
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
    run = _run(state_dir, run_id)
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

    run = _settled(state_dir, run_id, timeout=30, script=script)
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
