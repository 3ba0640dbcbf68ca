"""Soak: random SIGKILLs of hosts, workers and runner hosts, on SQLite and PostgreSQL, with an oracle.

Per engine (`--engines sqlite,postgresql`, the duration split between them):

  processes  one active host (`bin/piwf-host --state-dir D/host --database URL --lease-s 2`) and
             `--runners` runner hosts (`--role runner`), each with `--workers` warm workers, on
             one database: a SQLite file they share, or a database in a throw-away PostgreSQL
             cluster (tests/pg_cluster.py, fsync on) stopped at the end. Every process started
             carries PIWF_SOAK_TAG=<uuid> in its environment (workers and shell commands
             inherit it), which is how leftovers are found.
  clients    `--clients` threads, each: `run.start` of a shape drawn by `--shapes` (bench/soak_shapes.py),
             then `run.get` every 0.25 s until the run ends. The shapes: `soak`, bench/soak_workflows.py
             (rounds of compute → compute → action → compute → shell → compute → loop); `fan`, a
             parent with a child run per item, at most 2 at once (its client resumes children parked
             `no_progress`); `taker`, a run that takes 3 messages, which its client sends under keys
             of their own, again until answered (hang-ups included), across kills; `sleeper`, a
             durable sleep until a time a few seconds ahead; `limited`, runs under `limit(2, key=…)`. A request left unanswered (connection lost,
             host gone, `unavailable` from a standby) is sent again with the same client id
             and idempotency key until it is answered; `--drop-rate` of the starts are first
             sent on a connection closed before the answer is read, then sent again. Every `run.get` answer is a sample:
             each node output it shows committed is recorded with the oracle's size at
             that moment.
  the person a run parked `ambiguous_effect` is settled from the oracle: if the attempt's
             `effect` line is there, `effect.resolve confirm` with the output in that line,
             else `retry` (a `resolve` line is written to the oracle first). It waits while
             any process that could still act for that attempt is alive (the worker of its
             `exec` line, a process whose command line names the attempt). `no_progress`
             parks are resumed. Clients do this for their own runs during the soak; the
             final host's settle loop for everything left.
  kills      Poisson, `--kill-rate` per second, the kind drawn by `--mix` among those that
             can be killed now: `host` (the active host, once it has answered `host.status`
             as active for `--min-uptime` s; a replacement on the same state directory is
             started at once and waits as a standby until the dead host's lease runs out),
             `runner` (a ready runner host; replaced by a runner with a new id), `worker`
             (a worker process of the host or a runner, one serving a run when there is
             one). All SIGKILL.
  the end    no new runs; the active host and the runner hosts are SIGKILLed (counted),
             a final host settles everything (the person answers, `no_progress` runs are
             resumed) until no run is queued, running or parked; `state.verify` through it;
             SIGTERM; then no tagged process may be alive. The database is read (read-only)
             and compared with the oracle and the samples.

The oracle (bench/soak_workflows.py) has one line per node execution (`exec`), shell start,
effect and resolution, each written with one O_APPEND write, outside the database.

Columns (each per engine and in total; the ones marked * make the exit status 1):
  * acknowledged starts lost  a `run.start` answered accepted/adopted whose run is not in the
                              database at the end
  * duplicate runs            more than one run for one client idempotency key
  * committed outputs lost    a node output a sample showed committed whose attempt is not
                              committed (succeeded) at the end
  * committed outputs changed ... committed with another output, or a later sample showed
                              another attempt or output for the same (run, node, step)
  * nodes succeeded twice     the oracle shows an execution of a (run, node, step) that started
                              after its committed attempt's commit time (`finished_at`, the same
                              machine's clock) or after a sample had shown it committed, or the
                              end shows two succeeded attempts of it (pure nodes re-run because
                              their result was not committed yet start before that commit: they
                              are fine and only counted as "re-runs")
  * silent effect repeats     two `effect` lines of one (run, node, step) without a `resolve
                              … retry` line between them
  * effects missing           a finished run with no `effect` line for an effect node's step
  * outputs unlike a clean run a finished run's committed outputs differ from a run nothing
                              disturbed (the chain digests of soak_workflows.clean_outputs)
  * runs not settled          a run not done at the end (failed, cancelled, still open)
  * fan-out children wrong    a done parent without exactly one child run per index, or whose
                              output is not each child's output once in item order, or a child
                              whose node committed other than once
  * messages not taken once   a done taker that did not take each message once, in send order
                              (mailbox rows, committed outputs and the oracle's `took` lines)
  * sleepers woken early / twice  an execution after the sleep that started before the run's
                              wake-up time (oracle `woke` lines), or a sleep committed other than once
  * limits exceeded           at some moment more runs of one key (or one fan-out) between their
                              first `enter` and last `leave` oracle lines than the limit allows
  * PRAGMA quick_check / state verify / leftover processes
  restart-to-ready            a host's SIGKILL → its replacement answering `host.status` as
                              the active host (p50 / max), and the same for runner hosts
                              (→ answering as a runner)

Defaults fit 10 minutes on 2 cores: 500 s of kills split between the engines, plus start,
settle and analysis (~5-10 s per engine). At the default rate (1 kill/s drawn; fewer land, since
a host or runner that is not ready yet cannot be killed) that is ~430 kills; `--duration 1200`
gives ~1,000.

Run: .venv/bin/python bench/soak.py [--duration 500] [--engines sqlite,postgresql]
     [--kill-rate 1.0] [--mix host=1,worker=2,runner=1] [--seed N] [--clients 4] [--drop-rate 0.2] [--runners 1]
     [--workers 2] [--rounds 2] [--lease-s 2] [--min-uptime 1] [--settle-timeout 180] [--keep]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

import soak_shapes  # noqa: E402  (bench/ is the script's directory)
import soak_workflows as wf  # noqa: E402
from common import pct  # noqa: E402

from piwf_actors.client import Client  # noqa: E402
from piwf_actors.errors import PiwfError  # noqa: E402
from piwf_actors.wire import recv_frame, send_frame  # noqa: E402

TAG_VAR = "PIWF_SOAK_TAG"
TERMINAL = ("done", "failed", "cancelled")
OPEN = ("queued", "starting", "running", "parked")
PERSON = "soak-person"
KINDS = ("host", "worker", "runner")
WORKER_MARK = "piwf_actors.worker.main"
#: Mutations whose resends and answers the report counts.
COUNTED = ("run.start", "effect.resolve", "run.resume", "message.send")
#: How long the person waits for a process that could still act for an ambiguous attempt.
PERSON_PATIENCE_S = 30.0
#: How long a client follows one run before it starts the next (the end settles the rest).
FOLLOW_CAP_S = 120.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# --- the oracle ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Line:
    offset: int  # byte offset of the line's start in the file
    kind: str
    run_id: str
    node_id: str
    step: int
    attempt_id: str
    rest: list[str]


class Oracle:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def size(self) -> int:
        return self.path.stat().st_size

    def append(self, line: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)

    def lines(self, containing: str | None = None) -> list[Line]:
        data = self.path.read_bytes()
        found, offset = [], 0
        for raw in data.split(b"\n"):
            start, offset = offset, offset + len(raw) + 1
            if not raw or (containing is not None and containing.encode() not in raw):
                continue
            parts = raw.decode(errors="replace").split(" ")
            if len(parts) < 5:
                continue
            with contextlib.suppress(ValueError):
                found.append(Line(start, parts[0], parts[1], parts[2], int(parts[3]), parts[4], parts[5:]))
        return found


# --- processes ------------------------------------------------------------------------------------


class HostProc:
    """One `bin/piwf-host` process (active-host slot or runner host), in its own session."""

    def __init__(self, phase: Phase, role: str, state_dir: Path, host_id: str, max_workers: int,
                 kill_t: float | None = None) -> None:
        self.role, self.state_dir, self.host_id = role, state_dir, host_id
        self.socket_path = str(state_dir / "host.sock")
        self.kill_t = kill_t  # the SIGKILL this process replaces (restart-to-ready)
        self.killed = False
        self.killed_at = 0.0
        self.ready_at: float | None = None
        self.started_at = time.monotonic()
        state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = phase.base / "logs" / f"{host_id}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in close())
        argv = [str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--database", phase.database,
                "--host-id", host_id, "--max-workers", str(max_workers), "--lease-s", f"{phase.args.lease_s:g}",
                "--log-level", "WARNING"]
        if role == "runner":
            argv += ["--role", "runner"]
        # bin/piwf-host execs the venv's python: this pid is the host itself.
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=phase.env, start_new_session=True)
        self.pid = self.proc.pid
        threading.Thread(target=self._watch_ready, args=(phase,), daemon=True, name=f"ready-{host_id}").start()

    def _watch_ready(self, phase: Phase) -> None:
        want = "runner" if self.role == "runner" else "active"
        client = Client(socket_path=self.socket_path, client_id="soak-ready", retries=0, timeout=2)
        try:
            while self.proc.poll() is None and not phase.abort.is_set():
                try:
                    receipt = client.request("host.status").receipt or {}
                    if receipt.get("role") == want and int(receipt.get("pid") or 0) == self.pid:
                        self.ready_at = time.monotonic()
                        if self.kill_t is not None:
                            phase.record_restart(self.role, self.ready_at - self.kill_t)
                        return
                except (PiwfError, OSError, TimeoutError):
                    client.close()
                time.sleep(0.05)
        finally:
            client.close()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def uptime(self) -> float:
        return 0.0 if self.ready_at is None else time.monotonic() - self.ready_at

    def sigkill(self) -> bool:
        self.killed = True
        self.killed_at = time.monotonic()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        self.proc.wait()
        return True

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM, wait; SIGKILL if it does not stop. Returns the exit code (None if it had to be killed)."""
        self.killed = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode

    def log_tail(self, lines: int = 8) -> str:
        self._log.flush()
        with contextlib.suppress(OSError):
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])
        return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.proc.wait()
        self._log.close()


def tagged_processes(tag: str) -> list[psutil.Process]:
    """Live (non-zombie) processes other than this one whose environment carries the soak's tag."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(TAG_VAR) == tag:
                found.append(proc)
    return found


def describe(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return f"pid {proc.pid} ({' '.join(proc.cmdline())[:120]})"
    return f"pid {proc.pid}"


def _alive(pid: int, create_time: float | None = None) -> bool:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return create_time is None or create_time <= 0 or abs(proc.create_time() - create_time) < 0.05
    except psutil.Error:
        return False


# --- one engine -----------------------------------------------------------------------------------


@dataclass
class Observation:
    attempt_id: str
    output: Any
    oracle_size: int


@dataclass
class Result:
    engine: str
    kills: collections.Counter = field(default_factory=collections.Counter)
    host_restart_s: list[float] = field(default_factory=list)
    runner_restart_s: list[float] = field(default_factory=list)
    started: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    problems: dict[str, list[str]] = field(default_factory=lambda: collections.defaultdict(list))
    quick_check: str = "n/a"
    verify: str = "n/a"
    leftovers: list[str] = field(default_factory=list)
    unexpected_exits: list[str] = field(default_factory=list)
    person: collections.Counter = field(default_factory=collections.Counter)
    resent: collections.Counter = field(default_factory=collections.Counter)  # operation -> sends after the first
    answers: collections.Counter = field(default_factory=collections.Counter)  # (operation, outcome) -> answers
    samples: int = 0
    observed: int = 0
    executions: int = 0
    reruns: int = 0
    unanswered_starts: int = 0
    shapes: collections.Counter = field(default_factory=collections.Counter)  # shape -> acknowledged starts
    shape_counts: collections.Counter = field(default_factory=collections.Counter)  # soak_shapes.check's counts
    messages_acked: dict[str, int] = field(default_factory=dict)  # taker run -> message sends acknowledged
    hang_ups: int = 0  # run.start requests sent on a connection closed before the answer
    hang_ups_by_op: collections.Counter = field(default_factory=collections.Counter)
    soak_s: float = 0.0
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # the phase could not run to its end


#: The problem columns, in print order: (key, label). Every one of them counts for the exit status.
PROBLEMS = [
    ("lost_starts", "acknowledged starts lost"),
    ("duplicate_runs", "duplicate runs (one start key)"),
    ("lost_outputs", "committed outputs lost"),
    ("changed_outputs", "committed outputs changed"),
    ("succeeded_twice", "nodes succeeded twice"),
    ("silent_repeats", "silent effect repeats"),
    ("missing_effects", "effects missing in done runs"),
    ("unclean_outputs", "outputs unlike a clean run"),
    ("unsettled", "runs not settled (not done)"),
    *soak_shapes.PROBLEMS,
]


class Phase:
    def __init__(self, engine: str, args: argparse.Namespace, base: Path, seed: int, soak_s: float) -> None:
        self.engine, self.args, self.base, self.soak_s = engine, args, base, soak_s
        self.rng = random.Random(seed)
        self.result = Result(engine)
        self.tag = uuid.uuid4().hex
        self.env = {**os.environ, TAG_VAR: self.tag}
        self.lock = threading.RLock()
        self.abort = threading.Event()
        self.stop_kills = threading.Event()
        self.stop_starting = threading.Event()
        self.database = ""
        self.cluster: Any = None
        self.host: HostProc | None = None
        self.runners: list[HostProc | None] = []
        self.runner_generation = 0
        self.oracle: Oracle | None = None
        self.acked: dict[str, str] = {}  # run_id -> start key
        self.observed: dict[tuple[str, str, int], Observation] = {}
        self.decisions: dict[str, tuple[str, Any]] = {}  # effect_id -> (action, output)
        self.deferred_since: dict[str, float] = {}
        self.resumes: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.client_rngs: dict[int, random.Random] = {}

    # --- set-up -----------------------------------------------------------------------------

    def setup(self) -> None:
        (self.base / "logs").mkdir(parents=True)
        self.oracle = Oracle(self.base / "oracle")
        if self.engine == "postgresql":
            sys.path.insert(0, str(REPO / "tests"))
            from pg_cluster import PgCluster

            self.cluster = PgCluster.start(durable=True)
            self.database = self.cluster.create_database("piwf_soak")
        else:
            (self.base / "db").mkdir()
            self.database = f"sqlite://{self.base / 'db' / 'state.db'}"
        self.host = self._new_host()
        self._wait_ready(self.host, 60)
        self.runners = [self._new_runner(slot) for slot in range(self.args.runners)]
        for runner in self.runners:
            assert runner is not None
            self._wait_ready(runner, 60)

    def _new_host(self, kill_t: float | None = None, max_workers: int | None = None) -> HostProc:
        index = sum(1 for _ in (self.base / "logs").glob("host-*.log")) + 1
        return HostProc(self, "host", self.base / "host", f"host-{index:04d}", max_workers or self.args.workers,
                        kill_t)

    def _new_runner(self, slot: int, kill_t: float | None = None) -> HostProc:
        self.runner_generation += 1
        return HostProc(self, "runner", self.base / f"runner-{slot}", f"runner-{slot}-{self.runner_generation:04d}",
                        self.args.workers, kill_t)

    def _wait_ready(self, proc: HostProc, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while proc.ready_at is None:
            if not proc.alive:
                raise RuntimeError(f"{proc.host_id} exited with {proc.proc.returncode}: {proc.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.host_id} not ready within {timeout:g} s: {proc.log_tail()}")
            if self.abort.wait(0.05):
                raise KeyboardInterrupt
        return None

    def record_restart(self, role: str, seconds: float) -> None:
        with self.lock:
            (self.result.runner_restart_s if role == "runner" else self.result.host_restart_s).append(seconds)

    # --- requests ---------------------------------------------------------------------------

    def call(self, client: Client, operation: str, payload: dict[str, Any] | None = None, *,
             run_id: str | None = None, key: str | None = None, patience: float | None = None) -> Any:
        """Send until answered with anything but `unavailable`, always with the same key; None when
        `patience` seconds pass first or the soak is aborted."""
        key = key or uuid.uuid4().hex
        deadline = None if patience is None else time.monotonic() + patience
        sends = 0
        while not self.abort.is_set():
            sends += 1
            try:
                answer = client.request(operation, payload, run_id=run_id, idempotency_key=key)
                if answer.outcome != "unavailable":
                    if operation in COUNTED:
                        with self.lock:
                            self.result.resent[operation] += sends - 1
                            self.result.answers[(operation, answer.outcome)] += 1
                    return answer
            except (PiwfError, OSError, TimeoutError):
                client.close()
            if deadline is not None and time.monotonic() > deadline:
                return None
            time.sleep(0.1)
        return None

    def client(self, client_id: str) -> Client:
        assert self.host is not None
        return Client(socket_path=self.host.socket_path, client_id=client_id, retries=0, timeout=10)

    # --- clients ----------------------------------------------------------------------------

    def client_loop(self, index: int) -> None:
        try:
            self._client_loop(index)
        except Exception as exc:  # a bug of the soak: say so, and fail the phase
            import traceback

            traceback.print_exc()
            with self.lock:
                self.result.error = f"client {index} crashed: {type(exc).__name__}: {exc}"

    def _client_loop(self, index: int) -> None:
        client = self.client(f"soak-{self.engine}-{index}")
        person = self.client(PERSON)
        assert self.oracle is not None
        try:
            n = 0
            rng = self.rng_for(index)
            shapes, weights = zip(*self.args.shapes.items(), strict=True)
            while not self.stop_starting.is_set() and not self.abort.is_set():
                n += 1
                key = f"{client.client_id}-{n}"
                shape = rng.choices(shapes, weights)[0]
                if shape == "soak":
                    run_input = {"oracle": str(self.oracle.path), "rounds": self.args.rounds, "sleep": 0.02,
                                 "act_sleep": 0.05, "sh_sleep": 0.05, "key": key}
                else:
                    run_input = soak_shapes.start_input(shape, rng, str(self.oracle.path), key)
                payload = {"workflow": soak_shapes.workflow_spec(str(BENCH), shape), "input": run_input}
                if rng.random() < self.args.drop_rate:
                    self.send_and_hang_up(client.client_id, "run.start", payload, key)
                answer = self.call(client, "run.start", payload, key=key)
                if answer is None:
                    with self.lock:
                        self.result.unanswered_starts += 1
                    return
                if not answer.ok:
                    with self.lock:
                        self.result.notes.append(f"run.start {key} answered {answer.outcome}: {answer.error}")
                    time.sleep(0.5)
                    continue
                run_id = answer.receipt["run_id"]
                with self.lock:
                    self.acked[run_id] = key
                    self.result.started += 1
                    self.result.shapes[shape] += 1
                self.follow(client, person, soak_shapes.Driver(self, shape, run_id, key, rng))
        finally:
            client.close()
            person.close()

    def rng_for(self, index: int) -> random.Random:
        with self.lock:
            if index not in self.client_rngs:
                self.client_rngs[index] = random.Random(self.rng.random())
            return self.client_rngs[index]

    def send_and_hang_up(self, client_id: str, operation: str, payload: dict[str, Any], key: str) -> None:
        """A client that loses its connection right after sending: the request goes out, the answer is
        never read. The caller then sends it again with the same client id and key."""
        assert self.host is not None
        frame = {"schema": "piwf.client.v1", "type": "request", "request_id": uuid.uuid4().hex,
                 "client_id": client_id, "idempotency_key": key, "operation": operation, "payload": payload}
        with contextlib.suppress(OSError, PiwfError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(self.host.socket_path)
            if recv_frame(sock) is not None:
                send_frame(sock, frame)
                with self.lock:
                    self.result.hang_ups_by_op[operation] += 1
                    if operation == "run.start":
                        self.result.hang_ups += 1
                time.sleep(0.02)  # let the host read it before the connection goes away

    def follow(self, client: Client, person: Client, driver: soak_shapes.Driver) -> None:
        deadline = time.monotonic() + FOLLOW_CAP_S
        try:
            while not self.stop_starting.is_set() and time.monotonic() < deadline:
                view = self.get(client, driver.run_id)
                if view is not None:
                    if view["status"] in TERMINAL:
                        return
                    if view["status"] == "parked":
                        self.play_person(person, view)
                driver.step(client, person, view)
                time.sleep(0.25)
        finally:
            driver.finish(client)

    def get(self, client: Client, run_id: str) -> dict[str, Any] | None:
        answer = self.call(client, "run.get", run_id=run_id, patience=2)
        if answer is None or not answer.ok:
            return None
        self.observe(answer.receipt)
        return answer.receipt

    def observe(self, view: dict[str, Any]) -> None:
        """Record every node output the view shows committed (with the oracle's size now)."""
        assert self.oracle is not None
        size = self.oracle.size()
        run_id, workflow = view["run_id"], view.get("workflow")
        with self.lock:
            self.result.samples += 1
            for node in view.get("nodes") or ():
                output = node.get("output")
                if node.get("status") != "succeeded" or not isinstance(output, dict):
                    continue
                if workflow != "soak":
                    step = soak_shapes.step_of(str(workflow), node["node_id"], output)
                    if step is None:
                        continue  # a node of the other shapes that writes no `exec` lines
                else:
                    try:
                        _link, step = wf.link_of(node["node_id"], output)
                    except (KeyError, ValueError, TypeError, AttributeError):
                        self.result.problems["unclean_outputs"].append(
                            f"{run_id} {node['node_id']}: committed output without a chain link: {output!r}")
                        continue
                key = (run_id, node["node_id"], step)
                seen = self.observed.get(key)
                if seen is None:
                    self.observed[key] = Observation(node["attempt_id"], output, size)
                elif seen.attempt_id != node["attempt_id"] or seen.output != output:
                    self.result.problems["changed_outputs"].append(
                        f"{run_id} {node['node_id']} step {step}: sampled committed as {seen.attempt_id} "
                        f"{seen.output!r}, later as {node['attempt_id']} {output!r}")
                    self.observed[key] = Observation(node["attempt_id"], output, seen.oracle_size)

    # --- the person ---------------------------------------------------------------------------

    def play_person(self, client: Client, view: dict[str, Any]) -> None:
        reason, run_id = view.get("park_reason"), view["run_id"]
        if reason == "ambiguous_effect":
            self.resolve(client, view)
        elif reason in ("no_progress", "paused"):
            key = f"resume-{run_id}-{view['revision']}"
            answer = self.call(client, "run.resume", run_id=run_id, key=key, patience=10)
            if answer is not None and answer.outcome == "accepted":
                with self.lock:
                    if key not in self.resumes:
                        self.resumes.add(key)
                        self.result.person["resume"] += 1
        elif reason == "waiting":
            return  # a sleep, a message wait or its children: the shapes' own business
        else:
            with self.lock:
                note = f"{run_id} parked for an unexpected reason: {reason} {view.get('park_detail')}"
                if note not in self.result.notes:
                    self.result.notes.append(note)

    def resolve(self, client: Client, view: dict[str, Any]) -> None:
        assert self.oracle is not None
        run_id, effect_id = view["run_id"], view.get("park_detail")
        effect = next((e for e in view.get("effects") or () if e["effect_id"] == effect_id), None)
        if effect is None or effect.get("status") != "ambiguous":
            return
        node_id = effect["node_id"]
        node = next((n for n in view["nodes"] if n["node_id"] == node_id), None)
        if node is None:
            return
        attempt_id = node["attempt_id"]
        with self.lock:
            decision = self.decisions.get(effect_id)
        if decision is None:
            lines = [line for line in self.oracle.lines(attempt_id) if line.attempt_id == attempt_id]
            acting = self.still_acting(attempt_id, lines)
            now = time.monotonic()
            if acting:
                with self.lock:
                    since = self.deferred_since.setdefault(effect_id, now)
                if now - since < PERSON_PATIENCE_S:
                    return  # ask again later: its outcome may still change
                with self.lock:
                    self.result.notes.append(f"{run_id} {node_id} {attempt_id}: decided while {acting} was alive")
            effects = [line for line in lines if line.kind == "effect"]
            step = next((line.step for line in lines), None)
            if step is None:
                loop = next((n for n in view["nodes"] if n["node_id"] == "loop" and n["status"] == "succeeded"), None)
                step = int(loop["output"]["next_step"]) if loop else 0
            with self.lock:
                decision = self.decisions.get(effect_id)
                if decision is None:
                    if effects:
                        decision = ("confirm", json.loads(" ".join(effects[-1].rest)))
                    else:
                        decision = ("retry", None)
                    self.decisions[effect_id] = decision
                    self.result.person[decision[0]] += 1
                    # Written before the request: a retry allows the next execution of the effect.
                    self.oracle.append(f"resolve {run_id} {node_id} {step} {attempt_id} {decision[0]} {effect_id}")
        action, output = decision
        payload: dict[str, Any] = {"effect_id": effect_id, "action": action}
        if action == "confirm":
            payload["output"] = output
        answer = self.call(client, "effect.resolve", payload, key=f"resolve-{effect_id}", patience=10)
        if answer is not None and not answer.ok:
            with self.lock:
                self.result.notes.append(f"effect.resolve {effect_id} ({run_id} {node_id}) {action}: "
                                         f"{answer.outcome}: {answer.error}")

    def still_acting(self, attempt_id: str, lines: list[Line]) -> str | None:
        """A process that may still act for this attempt: the worker of its `exec` line, the shell of its
        `shstart` line, or any process whose command line names the attempt (a shell that started
        before it wrote its line)."""
        for line in lines:
            if line.kind == "exec" and len(line.rest) >= 2 and _alive(int(line.rest[0]), float(line.rest[1])):
                return f"worker pid {line.rest[0]}"
            if line.kind == "shstart" and line.rest and _alive(int(line.rest[0])):
                return f"shell pid {line.rest[0]}"
        for proc in psutil.process_iter(["pid", "cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if attempt_id in " ".join(proc.info["cmdline"] or ()) and proc.status() != psutil.STATUS_ZOMBIE:
                    return f"pid {proc.pid}"
        return None

    # --- kills ----------------------------------------------------------------------------------

    def killer(self) -> None:
        weights = self.args.mix
        while not self.stop_kills.is_set():
            if self.stop_kills.wait(self.rng.expovariate(self.args.kill_rate)):
                return
            with self.lock:
                eligible = [kind for kind in KINDS if weights.get(kind, 0) > 0 and self._can_kill(kind)]
                if not eligible:
                    continue
                kind = self.rng.choices(eligible, [weights[k] for k in eligible])[0]
                try:
                    self.kill(kind)
                except Exception as exc:  # a kill that failed is a note, never the end of the soak
                    self.result.notes.append(f"kill {kind} failed: {exc!r}")

    def _can_kill(self, kind: str) -> bool:
        minimum = self.args.min_uptime
        if kind == "host":
            return self.host is not None and self.host.alive and self.host.ready_at is not None \
                and self.host.uptime() >= minimum
        if kind == "runner":
            return any(r is not None and r.alive and r.ready_at is not None and r.uptime() >= minimum
                       for r in self.runners)
        return bool(self._workers())

    def _workers(self) -> list[tuple[HostProc, psutil.Process]]:
        found = []
        for owner in [self.host, *self.runners]:
            if owner is None or not owner.alive or owner.ready_at is None:
                continue
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(owner.pid).children():
                    with contextlib.suppress(psutil.Error):
                        if WORKER_MARK in " ".join(child.cmdline()):
                            found.append((owner, child))
        return found

    def kill(self, kind: str) -> None:
        if kind == "host":
            assert self.host is not None
            old = self.host
            if old.sigkill():
                self.result.kills["host"] += 1
            old.close()
            self.host = self._new_host(kill_t=old.killed_at)
        elif kind == "runner":
            slots = [i for i, r in enumerate(self.runners) if r is not None and r.alive and r.ready_at is not None
                     and r.uptime() >= self.args.min_uptime]
            slot = self.rng.choice(slots)
            old = self.runners[slot]
            assert old is not None
            if old.sigkill():
                self.result.kills["runner"] += 1
            old.close()
            self.runners[slot] = self._new_runner(slot, kill_t=old.killed_at)
        else:
            workers = self._workers()
            busy: set[int] = set()
            for owner in {owner for owner, _ in workers}:
                with contextlib.suppress(PiwfError, OSError, TimeoutError), \
                        Client(socket_path=owner.socket_path, client_id="soak-killer", retries=0, timeout=2) as client:
                    status = client.status()
                    busy.update(int(a["pid"]) for a in (status.get("workers") or {}).get("active", ())
                                if a.get("pid"))
            serving = [w for w in workers if w[1].pid in busy]
            _owner, victim = self.rng.choice(serving or workers)
            try:
                os.kill(victim.pid, signal.SIGKILL)
                self.result.kills["worker"] += 1
            except ProcessLookupError:
                pass

    def supervise(self) -> None:
        """Restart a host or runner that exited without being killed by the soak (and say so)."""
        while not self.abort.is_set() and not self.stop_kills.wait(0.25):
            with self.lock:
                if self.host is not None and not self.host.alive and not self.host.killed:
                    self._unexpected(self.host)
                    self.host.close()
                    self.host = self._new_host()
                for slot, runner in enumerate(self.runners):
                    if runner is not None and not runner.alive and not runner.killed:
                        self._unexpected(runner)
                        runner.close()
                        self.runners[slot] = self._new_runner(slot)

    def _unexpected(self, proc: HostProc) -> None:
        self.result.unexpected_exits.append(f"{proc.host_id} exited with {proc.proc.returncode}: {proc.log_tail(3)}")

    # --- the soak -------------------------------------------------------------------------------

    def run(self) -> Result:
        began = time.monotonic()
        try:
            self.setup()
            log(f"{self.engine}: host and {self.args.runners} runner host(s) ready on {self.database}; "
                f"soaking {self.soak_s:.0f} s")
            soak_began = time.monotonic()
            for index in range(self.args.clients):
                self._thread(self.client_loop, index, name=f"client-{index}")
            self._thread(self.killer, name="killer")
            self._thread(self.supervise, name="supervise")
            deadline = soak_began + self.soak_s
            next_report = soak_began + 30
            while time.monotonic() < deadline:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
                if time.monotonic() >= next_report:
                    next_report += 30
                    with self.lock:
                        log(f"{self.engine}: {time.monotonic() - soak_began:.0f} s, kills {dict(self.result.kills)}, "
                            f"runs started {self.result.started}, person {dict(self.result.person)}")
            self.result.soak_s = time.monotonic() - soak_began
            self.finish()
        finally:
            self.abort.set()
            self.stop_kills.set()
            self.stop_starting.set()
            self.cleanup()
            self.result.wall_s = time.monotonic() - began
        return self.result

    def _thread(self, target: Any, *args: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=name)
        thread.start()
        self.threads.append(thread)

    def finish(self) -> None:
        self.stop_starting.set()
        self.stop_kills.set()
        for thread in self.threads:
            if thread.name in ("killer", "supervise"):
                thread.join(30)
        # The last crash: the active host and every runner host, SIGKILLed.
        with self.lock:
            assert self.host is not None
            if self.host.sigkill():
                self.result.kills["host"] += 1
            kill_t = self.host.killed_at
            self.host.close()
            for slot, runner in enumerate(self.runners):
                if runner is not None:
                    if runner.sigkill():
                        self.result.kills["runner"] += 1
                    runner.close()
                    self.runners[slot] = None
            self.host = self._new_host(kill_t=kill_t, max_workers=max(self.args.workers, 4))
        log(f"{self.engine}: soak over (kills {dict(self.result.kills)}); a final host settles everything")
        self._wait_ready(self.host, 60)
        for thread in self.threads:  # clients finish the starts they were resending
            if thread.name.startswith("client-"):
                thread.join(60)
                if thread.is_alive():
                    self.result.notes.append(f"{thread.name} still resending after 60 s")
        settled = self.settle()
        client = self.client("soak-final")
        try:
            answer = self.call(client, "state.verify", patience=60)
            if answer is None or not answer.ok:
                self.result.verify = f"no answer ({answer and answer.outcome})"
            else:
                receipt = answer.receipt
                violations = receipt.get("violations") or []
                self.result.verify = "ok" if receipt.get("ok") and not violations else \
                    f"{len(violations)} violation(s): " + ", ".join(sorted({v.get('code', '?') for v in violations}))
                for violation in violations[:20]:
                    self.result.notes.append(f"state.verify: {violation}")
        finally:
            client.close()
        code = self.host.terminate(60)
        if code != 0:
            self.result.notes.append(f"the final host's SIGTERM stop exited with {code}: {self.host.log_tail(3)}")
        self.result.leftovers = self.leftovers()
        if not settled:
            self.result.notes.append("the settle loop timed out")
        self.analyse()

    def settle(self) -> bool:
        client, person = self.client("soak-settle"), self.client(PERSON)
        deadline = time.monotonic() + self.args.settle_timeout
        try:
            while time.monotonic() < deadline and not self.abort.is_set():
                with self.lock:  # the final host can die too
                    assert self.host is not None
                    if not self.host.alive and not self.host.killed:
                        self._unexpected(self.host)
                        self.host.close()
                        self.host = self._new_host(max_workers=max(self.args.workers, 4))
                answer = self.call(client, "host.status", patience=5)
                if answer is None or not answer.ok:
                    continue
                counts = answer.receipt.get("runs") or {}
                if answer.receipt.get("role") == "active" and not any(counts.get(s, 0) for s in OPEN):
                    return True
                if counts.get("parked"):
                    listing = self.call(client, "run.list", {"status": "parked", "limit": 1000}, patience=5)
                    for row in (listing.receipt.get("runs") or ()) if listing is not None and listing.ok else ():
                        view = self.get(client, row["run_id"])
                        if view is not None and view["status"] == "parked":
                            self.play_person(person, view)
                time.sleep(0.3)
            return False
        finally:
            client.close()
            person.close()

    def leftovers(self) -> list[str]:
        deadline = time.monotonic() + 3.0
        while True:
            alive = tagged_processes(self.tag)
            if not alive or time.monotonic() > deadline:
                return [describe(p) for p in alive]
            time.sleep(0.2)

    def cleanup(self) -> None:
        for proc in [self.host, *self.runners]:
            if proc is not None:
                proc.close()
        for proc in tagged_processes(self.tag):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        with contextlib.suppress(Exception):
            psutil.wait_procs(tagged_processes(self.tag), timeout=5)
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    # --- analysis -------------------------------------------------------------------------------

    def read_database(self) -> dict[str, list[dict[str, Any]]]:
        """The tables the analysis reads (`runs`, `attempts`, `waits`, `messages`), values decoded."""
        queries = {
            "runs": "SELECT run_id, workflow, parent_run_id, status, park_reason, error_code, input_json, "
                    "input_sha256 FROM run",
            "attempts": "SELECT run_id, node_id, attempt_id, status, started_at, finished_at, output_json, "
                        "output_sha256 FROM node_attempt ORDER BY run_id, started_at",
            "waits": "SELECT wait_id, run_id, node_id, kind, status, wake_at FROM run_wait",
            "messages": "SELECT message_id, run_id, topic, seq, status, wait_id, payload_json, payload_sha256 "
                        "FROM run_message",
        }
        blob_sql = "SELECT data FROM blob WHERE sha256 = ?"
        if self.database.startswith("postgresql://"):
            import psycopg

            with psycopg.connect(self.database, autocommit=True) as conn:
                tables = {name: _dicts(conn.execute(sql)) for name, sql in queries.items()}
                blob = lambda key: conn.execute(blob_sql.replace("?", "%s"), (key,)).fetchone()  # noqa: E731
                _inline_values(tables, blob)
            return tables
        path = self.database.removeprefix("sqlite://")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("PRAGMA quick_check").fetchall()
            self.result.quick_check = "ok" if [tuple(r) for r in rows] == [("ok",)] else \
                "; ".join(str(r[0]) for r in rows[:5])
            tables = {name: _dicts(conn.execute(sql)) for name, sql in queries.items()}
            _inline_values(tables, lambda key: conn.execute(blob_sql, (key,)).fetchone())
        finally:
            conn.close()
        return tables

    def analyse(self) -> None:
        assert self.oracle is not None
        result, problems = self.result, self.result.problems
        tables = self.read_database()
        runs, attempts = tables["runs"], tables["attempts"]
        lines = self.oracle.lines()
        by_run = {run["run_id"]: run for run in runs}
        result.statuses = collections.Counter(run["status"] for run in runs)
        soak_runs = {run["run_id"] for run in runs if run["workflow"] == "soak"}

        # Acknowledged starts, and one run per start key.
        for run_id, key in sorted(self.acked.items()):
            if run_id not in by_run:
                problems["lost_starts"].append(f"{run_id} (start key {key}) was acknowledged and is not in the database")
        keys = collections.Counter((run.get("input") or {}).get("key") for run in runs)
        for key, count in keys.items():
            if key is not None and count > 1:  # a fan-out's children carry no start key
                problems["duplicate_runs"].append(f"start key {key}: {count} runs "
                                                  f"{[r['run_id'] for r in runs if (r.get('input') or {}).get('key') == key]}")
        for run in runs:
            if run["status"] != "done":
                problems["unsettled"].append(f"{run['run_id']} is {run['status']} "
                                             f"({run.get('park_reason') or run.get('error_code') or ''})")

        # Committed attempts at the end, by (run, node, step).
        succeeded: dict[tuple[str, str, int], list[dict[str, Any]]] = collections.defaultdict(list)
        by_attempt = {a["attempt_id"]: a for a in attempts}
        for attempt in attempts:
            if attempt["status"] != "succeeded":
                continue
            if attempt["run_id"] not in soak_runs:
                run = by_run.get(attempt["run_id"])
                shape_step = soak_shapes.step_of(run["workflow"] if run else "", attempt["node_id"], attempt["output"])
                if shape_step is not None:
                    succeeded[(attempt["run_id"], attempt["node_id"], shape_step)].append(attempt)
                continue
            try:
                _link, step = wf.link_of(attempt["node_id"], attempt["output"])
            except (KeyError, ValueError, TypeError, AttributeError):
                problems["unclean_outputs"].append(f"{attempt['run_id']} {attempt['node_id']} {attempt['attempt_id']}: "
                                                   f"committed output without a chain link: {attempt['output']!r}")
                continue
            succeeded[(attempt["run_id"], attempt["node_id"], step)].append(attempt)
        execs: dict[tuple[str, str, int], list[Line]] = collections.defaultdict(list)
        for line in lines:
            if line.kind == "exec":
                execs[(line.run_id, line.node_id, line.step)].append(line)
        result.executions = sum(len(v) for v in execs.values())
        result.reruns = sum(max(0, len(v) - 1) for v in execs.values())
        twice: dict[tuple[str, str, int], list[str]] = collections.defaultdict(list)
        for key, found in sorted(succeeded.items()):
            if len(found) > 1:
                twice[key].append(f"{len(found)} succeeded attempts at the end {[a['attempt_id'] for a in found]}")
                continue
            # An execution that started after the attempt's commit (the host's clock: same machine) ran a
            # committed node again: every legitimate re-run starts before (its result was not committed).
            committed_at = float(found[0]["finished_at"] or 0)
            later = [line for line in execs.get(key, ()) if line.attempt_id != found[0]["attempt_id"]
                     and len(line.rest) >= 3 and float(line.rest[2]) > committed_at]
            if later:
                twice[key].append(f"committed as {found[0]['attempt_id']} at {committed_at:.6f}, executed again "
                                  f"afterwards: {[(x.attempt_id, 'pid ' + x.rest[0], x.rest[2]) for x in later]}")

        # What the samples saw committed, against the end and against the oracle.
        result.observed = len(self.observed)
        for key, seen in sorted(self.observed.items()):
            run_id, node_id, step = key
            end = by_attempt.get(seen.attempt_id)
            if end is None or end["status"] != "succeeded":
                problems["lost_outputs"].append(
                    f"{run_id} {node_id} step {step}: attempt {seen.attempt_id} was sampled committed "
                    f"({seen.output!r}); at the end it is {end['status'] if end else 'gone'}")
            elif end["output"] != seen.output:
                problems["changed_outputs"].append(
                    f"{run_id} {node_id} step {step}: attempt {seen.attempt_id} sampled as {seen.output!r}, "
                    f"at the end {end['output']!r}")
            later = [line for line in execs.get(key, ()) if line.offset >= seen.oracle_size]
            if later:
                twice[key].append(f"sampled committed as {seen.attempt_id} at oracle byte {seen.oracle_size}, "
                                  f"executed again afterwards: {[(x.attempt_id, 'pid ' + x.rest[0]) for x in later]}")
        for (run_id, node_id, step), found in sorted(twice.items()):
            problems["succeeded_twice"].append(f"{run_id} {node_id} step {step}: {'; '.join(found)}")

        # Effects: never twice without a retry between, and present in every finished run.
        walks: dict[tuple[str, str, int], list[Line]] = collections.defaultdict(list)
        for line in lines:
            if line.kind == "effect" or (line.kind == "resolve" and line.rest[:1] == ["retry"]):
                walks[(line.run_id, line.node_id, line.step)].append(line)
        effected: set[tuple[str, str, int]] = set()
        for key, walk in sorted(walks.items()):
            applied: Line | None = None
            for line in walk:
                if line.kind == "resolve":
                    applied = None
                    continue
                effected.add(key)
                if applied is not None:
                    problems["silent_repeats"].append(
                        f"{key[0]} {key[1]} step {key[2]}: effect of attempt {applied.attempt_id} and again of "
                        f"attempt {line.attempt_id} with no retry between (oracle bytes {applied.offset}, {line.offset})")
                applied = line
        for run in runs:
            if run["status"] != "done" or run["run_id"] not in soak_runs:
                continue
            rounds = int((run.get("input") or {}).get("rounds", self.args.rounds))
            clean = wf.clean_outputs(run["run_id"], rounds)
            for (node_id, step), want in clean.items():
                if node_id in wf.EFFECT_NODES and (run["run_id"], node_id, step) not in effected:
                    problems["missing_effects"].append(f"{run['run_id']} {node_id} step {step}: done, no effect line")
                got = succeeded.get((run["run_id"], node_id, step))
                if not got:
                    problems["unclean_outputs"].append(f"{run['run_id']} {node_id} step {step}: done without a "
                                                       "succeeded attempt of it")
                    continue
                output = got[0]["output"]
                if node_id == "sh":
                    output = {"stdout": output.get("stdout")}
                if output != want:
                    problems["unclean_outputs"].append(f"{run['run_id']} {node_id} step {step}: {output!r}, a clean "
                                                       f"run gives {want!r}")

        # The other shapes: children, messages, sleepers, limits (bench/soak_shapes.py).
        soak_shapes.check(runs, attempts, lines, tables["waits"], tables["messages"], self.result.messages_acked,
                          problems, result.shape_counts)


def _dicts(cursor: Any) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _inline_values(tables: dict[str, list[dict[str, Any]]], blob: Any) -> None:
    """`input` / `output` / `payload` from the inline JSON or the blob table."""

    def value(text: Any, key: Any) -> Any:
        if text is None and key is not None:
            row = blob(key)
            text = None if row is None else bytes(row[0]).decode()
        if text is None:
            return None
        return json.loads(text) if isinstance(text, str | bytes) else text

    for run in tables["runs"]:
        run["input"] = value(run.pop("input_json"), run.pop("input_sha256"))
    for attempt in tables["attempts"]:
        attempt["output"] = value(attempt.pop("output_json"), attempt.pop("output_sha256"))
    for message in tables["messages"]:
        message["payload"] = value(message.pop("payload_json"), message.pop("payload_sha256"))


# --- the report --------------------------------------------------------------------------------------


def _p50_max(samples: list[float]) -> str:
    return "—" if not samples else f"{pct(samples, 0.5):.2f} / {max(samples):.2f}"


def report(results: list[Result], args: argparse.Namespace) -> int:
    names = [r.engine for r in results]
    width = max(12, *(len(n) + 2 for n in names))
    rows: list[tuple[str, list[str], str]] = []

    def row(label: str, values: list[Any], total: Any = "") -> None:
        rows.append((label, [str(v) for v in values], str(total)))

    for kind in KINDS:
        row(f"kills: {kind}", [r.kills[kind] for r in results], sum(r.kills[kind] for r in results))
    row("kills: all", [sum(r.kills.values()) for r in results], sum(sum(r.kills.values()) for r in results))
    row("runs started (acknowledged)", [r.started for r in results], sum(r.started for r in results))
    row("  soak / fan / taker / sleeper / limited",
        [" / ".join(str(r.shapes[s]) for s in soak_shapes.SHAPES) for r in results],
        " / ".join(str(sum(r.shapes[s] for r in results)) for s in soak_shapes.SHAPES))
    for label in ("fan children", "messages sent", "limit peak key", "limit peak fan"):
        peak = label.startswith("limit peak")
        row(f"  {label}", [r.shape_counts[label] for r in results],
            max((r.shape_counts[label] for r in results), default=0) if peak
            else sum(r.shape_counts[label] for r in results))
    row("message.send hang-ups / resends / adopted",
        [f"{r.hang_ups_by_op['message.send']} / {r.resent['message.send']} / "
         f"{r.answers[('message.send', 'adopted')]}" for r in results],
        f"{sum(r.hang_ups_by_op['message.send'] for r in results)} / "
        f"{sum(r.resent['message.send'] for r in results)} / "
        f"{sum(r.answers[('message.send', 'adopted')] for r in results)}")
    row("runs finished (done)", [r.statuses["done"] for r in results], sum(r.statuses["done"] for r in results))
    row("node executions (oracle)", [r.executions for r in results], sum(r.executions for r in results))
    row("  re-runs of uncommitted nodes", [r.reruns for r in results], sum(r.reruns for r in results))
    row("committed outputs sampled", [r.observed for r in results], sum(r.observed for r in results))
    row("run.start hang-ups / resends / adopted",
        [f"{r.hang_ups} / {r.resent['run.start']} / {r.answers[('run.start', 'adopted')]}" for r in results],
        f"{sum(r.hang_ups for r in results)} / {sum(r.resent['run.start'] for r in results)} / "
        f"{sum(r.answers[('run.start', 'adopted')] for r in results)}")
    row("person: confirm / retry / resume",
        [f"{r.person['confirm']} / {r.person['retry']} / {r.person['resume']}" for r in results])
    for key, label in PROBLEMS:
        row(f"{label} *", [len(r.problems[key]) for r in results], sum(len(r.problems[key]) for r in results))
    row("PRAGMA quick_check *", [r.quick_check for r in results])
    row("state verify *", [r.verify for r in results])
    row("leftover processes *", [len(r.leftovers) for r in results], sum(len(r.leftovers) for r in results))
    row("restart-to-ready host p50 / max s", [_p50_max(r.host_restart_s) for r in results],
        _p50_max([s for r in results for s in r.host_restart_s]))
    row("restart-to-ready runner p50 / max s", [_p50_max(r.runner_restart_s) for r in results],
        _p50_max([s for r in results for s in r.runner_restart_s]))
    row("unexpected host exits", [len(r.unexpected_exits) for r in results],
        sum(len(r.unexpected_exits) for r in results))
    row("soak / wall time s", [f"{r.soak_s:.0f} / {r.wall_s:.0f}" for r in results])

    label_width = max(len(label) for label, _, _ in rows) + 2
    width = max(width, *(len(v) + 2 for _, values, total in rows for v in (*values, total)))
    print()
    print(f"{'':<{label_width}}" + "".join(f"{n:>{width}}" for n in names) + f"{'total':>{width}}")
    for label, values, total in rows:
        print(f"{label:<{label_width}}" + "".join(f"{v:>{width}}" for v in values) + f"{total:>{width}}")
    print("(* counts for the exit status)")

    failed = False
    for r in results:
        details = [(label, r.problems[key]) for key, label in PROBLEMS if r.problems[key]]
        if r.quick_check not in ("ok", "n/a"):
            details.append(("PRAGMA quick_check", [r.quick_check]))
        if r.verify != "ok":
            details.append(("state verify", [r.verify]))
        if r.leftovers:
            details.append(("leftover processes", r.leftovers))
        if r.error:
            details.append(("the soak itself failed", [r.error]))
        failed = failed or bool(details)
        for label, items in details + [("unexpected host exits", r.unexpected_exits), ("notes", r.notes)]:
            if items:
                print(f"\n{r.engine}: {label} ({len(items)}):")
                for item in items[:args.details]:
                    print(f"  {item}")
                if len(items) > args.details:
                    print(f"  … {len(items) - args.details} more")
    return 1 if failed else 0


# --- main ----------------------------------------------------------------------------------------------


def _mix(text: str) -> dict[str, float]:
    mix = dict.fromkeys(KINDS, 0.0)
    for part in filter(None, text.split(",")):
        kind, _, weight = part.partition("=")
        if kind not in mix:
            raise argparse.ArgumentTypeError(f"unknown kind {kind!r} (host, worker, runner)")
        mix[kind] = float(weight or 1)
    if not any(mix.values()):
        raise argparse.ArgumentTypeError("every weight is 0")
    return mix


DEFAULT_SHAPES = "soak=3,fan=1,taker=1,sleeper=1,limited=2"


def _shapes(text: str) -> dict[str, float]:
    shapes: dict[str, float] = {}
    for part in filter(None, text.split(",")):
        shape, _, weight = part.partition("=")
        if shape not in soak_shapes.SHAPES:
            raise argparse.ArgumentTypeError(f"unknown shape {shape!r} ({', '.join(soak_shapes.SHAPES)})")
        shapes[shape] = float(weight or 1)
    if not any(shapes.values()):
        raise argparse.ArgumentTypeError("every weight is 0")
    return {shape: weight for shape, weight in shapes.items() if weight > 0}


def _engines(text: str) -> list[str]:
    engines = [e.strip() for e in text.split(",") if e.strip()]
    for engine in engines:
        if engine not in ("sqlite", "postgresql"):
            raise argparse.ArgumentTypeError(f"unknown engine {engine!r} (sqlite, postgresql)")
    if not engines:
        raise argparse.ArgumentTypeError("no engine")
    return engines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=500.0,
                        help="seconds of kills in all, split between the engines (default 500)")
    parser.add_argument("--engines", type=_engines, default=["sqlite", "postgresql"],
                        help="comma-separated: sqlite, postgresql (default both)")
    parser.add_argument("--kill-rate", type=float, default=1.0,
                        help="kills drawn per second (Poisson; default 1.0)")
    parser.add_argument("--mix", type=_mix, default=_mix("host=1,worker=2,runner=1"),
                        help="relative weights of the kinds (default host=1,worker=2,runner=1)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random, printed)")
    parser.add_argument("--clients", type=int, default=4, help="client threads starting runs (default 4)")
    parser.add_argument("--drop-rate", type=float, default=0.2,
                        help="share of run.start requests first sent on a connection the client closes before the "
                        "answer, then sent again with the same key (default 0.2)")
    parser.add_argument("--runners", type=int, default=1, help="runner hosts beside the active host (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="--max-workers of every host (default 2)")
    parser.add_argument("--shapes", type=_shapes, default=_shapes(DEFAULT_SHAPES),
                        help=f"relative weights of the shapes a client starts (default {DEFAULT_SHAPES}; "
                        "see bench/soak_shapes.py)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the workflow's loop per run (default 2)")
    parser.add_argument("--lease-s", type=float, default=2.0, help="host and runner lease (default 2 s)")
    parser.add_argument("--min-uptime", type=float, default=1.0,
                        help="a host or runner is killed only once it has been ready this long (default 1 s)")
    parser.add_argument("--settle-timeout", type=float, default=180.0,
                        help="seconds the final host has to settle every run (default 180)")
    parser.add_argument("--details", type=int, default=20, help="detail lines printed per problem (default 20)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, oracle, SQLite)")
    args = parser.parse_args()
    if args.kill_rate <= 0:
        parser.error("--kill-rate must be positive")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    base = Path(tempfile.mkdtemp(prefix="piwf-soak-"))
    per_engine = args.duration / len(args.engines)
    print(f"soak: {', '.join(args.engines)}, {per_engine:.0f} s of kills each, {args.kill_rate:g} kills/s "
          f"(mix {', '.join(f'{k}={v:g}' for k, v in args.mix.items())}), seed {seed}; {args.clients} clients, "
          f"{args.runners} runner host(s), {args.workers} workers per host, {args.rounds} rounds per run, "
          f"shapes {', '.join(f'{k}={v:g}' for k, v in args.shapes.items())}, "
          f"lease {args.lease_s:g} s; {os.cpu_count()} cores, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{base}", flush=True)

    def on_term(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    results: list[Result] = []
    try:
        for index, engine in enumerate(args.engines):
            phase = Phase(engine, args, base / engine, seed + index, per_engine)
            try:
                results.append(phase.run())
            except Exception as exc:  # the other engines still run; the exit status says it failed
                import traceback

                traceback.print_exc()
                phase.result.error = f"{type(exc).__name__}: {exc}"
                results.append(phase.result)
    except KeyboardInterrupt:
        print("\ninterrupted; processes and the temporary directory are cleaned up", file=sys.stderr)
        return 130
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return report(results, args)


if __name__ == "__main__":
    sys.exit(main())
