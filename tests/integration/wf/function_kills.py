"""What the durable-function crash tests (test_function_crashes.py) use to kill a run at seeded points
and to judge it: the oracle the steps of `function_crash_flows.py` write, the database as the test
reads it, the kill plan, the `Killer` that carries it out and the `Person` who settles what a crash
leaves (an ambiguous effect, a run parked `no_progress`)."""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from testsupport import dead_host_settled
from wf.function_crash_flows import FRAGILE_RETRIES, charged
from wf.harness import WF, alive, rows, wait_for
from wf.piwf_hosts import piwf_host, sigkill

from piwf_actors.client import Client

FINISHED = ("done", "failed", "cancelled")


def spec(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/function_crash_flows.py."""
    return f"{WF / 'function_crash_flows.py'}:{attr}"


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


def run_row(state_dir: Path, run_id: str) -> dict[str, Any]:
    (found,) = rows(state_dir, "SELECT status, park_reason, park_detail FROM run WHERE run_id = ?", (run_id,))
    return found


def finished_attempts(state_dir: Path, run_id: str, generation: int | None = None) -> Counter[str]:
    """Committed attempts per node id (succeeded or failed), of claims up to `generation` if given."""
    sql = "SELECT node_id FROM node_attempt WHERE run_id = ? AND status IN ('succeeded', 'failed')"
    params: tuple[Any, ...] = (run_id,)
    if generation is not None:
        sql += " AND generation <= ?"
        params += (generation,)
    return Counter(row["node_id"] for row in rows(state_dir, sql, params))


def settled(state_dir: Path, run_id: str, timeout: float, script: Any = None) -> dict[str, Any]:
    """The run's row once it finished or parked for anything but a wait."""

    def done() -> dict[str, Any] | None:
        run = run_row(state_dir, run_id)
        if run["status"] in FINISHED or (run["status"] == "parked" and run["park_reason"] != "waiting"):
            return run
        return None

    def describe() -> str:
        said = f"run {run_id} to settle (is {run_row(state_dir, run_id)})"
        if script is not None:
            said += f"; host exit status {script.proc.poll()}; its log:\n{script.log()[-6000:]}"
        return said

    return wait_for(done, timeout, describe, poll=0.05)


# --- the kill plan and the person ------------------------------------------------------------------


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


def plan(rng: random.Random, order: list[str], effects: set[str], host_kills: int,
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
    inside_pure = rng.choice([p for p in candidates if is_pure(order[p]) and p != before_acting - 1])
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


def words(lines: list[Line], label: str, kill: Kill) -> Counter[str]:
    """The lines of step `label` that the workers `kill` ended wrote before it, per word."""
    return Counter(line.word for line in lines
                   if line.label == label and line.pid in kill.pids and line.at <= kill.killed_at)


def is_pure(label: str) -> bool:
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
        wait_for(lambda: not any(alive_pid(pid) for pid in dead), 20, "the workers the kills ended to be gone")
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


def alive_pid(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return False


def clean_run(state_dir: Path) -> tuple[dict[str, Any], list[str], Counter[str]]:
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
        run = run_row(self.state_dir, self.run_id)
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
        committed = finished_attempts(self.state_dir, self.run_id)
        self.reserved = self._unsettled_effects()
        self.script = piwf_host(self.guard, self.state_dir, workers=2)
        # The next host reaps the dead one's workers (they may have gone on a little meanwhile).
        wait_for(lambda: not any(alive_pid(pid) for pid in pids), 20, "the dead host's workers to be reaped")
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
        return killed_at, {line.pid}, finished_attempts(self.state_dir, self.run_id, launch["generation"])

    def _unsettled_effects(self) -> set[str]:
        """Non-idempotent effects reserved and not settled: `applying` after a host's death, `ambiguous`
        once the host settled a worker's (any earlier one was resolved before this kill)."""
        return {row["node_id"] for row in rows(
            self.state_dir, "SELECT node_id FROM effect WHERE run_id = ? AND status IN ('applying', 'ambiguous') "
                            "AND idempotent = 0", (self.run_id,))}
