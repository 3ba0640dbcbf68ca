"""Trivial 3-node runs through the host's Unix socket, next to DBOS and to the ceiling, in one run.

The figures of issue 21, each measured here in the same run:

  piwf     a real host, `bin/piwf-host --state-dir D --max-workers m` in its own
           process (durable: synchronous=FULL unless --synchronous says
           otherwise; the host keeps m warm workers, its default), one fresh
           host per m in --workers (default 1, 2, 8). Clients are
           `piwf_actors.client.Client` connections, one per client, each in
           its own thread of this process (--client-mode thread, the default)
           or in its own spawned process (--client-mode process). Threads
           were chosen by measurement: a client costs ~0.6 ms of CPU per run
           (start, watch, unwatch), so at today's rates the clients use ~10 %
           of a core and the bench's GIL is not what they wait for; processes
           gave the same runs/s and cost more CPU on this 2-core machine. Each
           phase prints the clients' share of a core and says when to switch.
           After a short warm-up, two phases:

    closed loop  m clients, each: `run.start` → wait until the run is done →
                 next. start→done is the client's wall clock from just before
                 `run.start` to the moment it sees the run done; "db" is the
                 run's created_at → finished_at from `run.get`. How a client
                 sees its run done (--done-via):
                   watch  (default) a `run` watch on the client's own
                          connection, opened right after `run.start` answers
                          (its first event is the current view, so a run that
                          already finished is seen at once), then `unwatch`.
                          This is what `piwf` itself does, minus the second
                          connection `Client.wait` opens. It is the cheapest
                          correct way through the socket measured here, and
                          it is not free: ~6 events per run, each a fresh
                          run view (two statements for a run without waits,
                          effects or children, store/run_parts.py), packed
                          and handed to the socket thread, in the
                          ClientGateway and piwf-gateway-io threads (compare
                          with `db`).
                   runs   one `runs` watch shared by the thread clients: cheaper
                          than `watch` with 8 clients, dearer with 1 (every
                          event re-reads the 50 newest runs); threads only.
                   poll   `run.get` every --poll-ms (default 1) on the client's
                          connection: as dear as `watch` with 1 client, and
                          worse with 8.
                   db     reading the run's status from state.db (read-only,
                          in the client, every 0.5 ms): not through the socket
                          and costs the host nothing, the reference for what
                          the others cost it.
    burst        --runs runs submitted up front by 4 submitter connections
                 (threads), then nothing but one `host.status` every 20 ms until
                 the status counts show them all finished. runs/s = runs /
                 (first submit → the last run's finished_at); its latencies are
                 submit → finished_at (host clock), queueing included.

           Each phase is then run again on the same host with the same three
           steps written as a durable function (`@workflow` calling three
           `@step`s, docs/functions.md; its run records a fourth node, `return`,
           its output), and "function / graph" prints the ratio of their runs/s
           (--no-function skips it; `--runners` measures the graph only).

           Per phase: runs/s, steps/s (3 × runs/s), p50/p99, and CPU per run:
           the host process by thread (/proc/<pid>/task/*/stat, named by a
           `py-spy dump` taken after the phase; threads that ended during the
           phase, e.g. per-run threads, are summed as "ended threads"), the
           worker processes (the host's children, psutil, plus the children
           it reaped during the phase), host + workers, and the bench's own
           clients; and a `writer:` line: SQL statements per run (the growth of
           `writer.statements` in host.status over the phase, read once the
           writer's figures settled, as for the retries below: ±1 run's worth)
           and the writer thread's CPU per run.

  PostgreSQL  with `--database pg-temp` (a temporary cluster started here) or
           `--database postgresql://…` (a fresh database per host there), each m
           gets two hosts, one after the other: first a fresh SQLite host, as
           without --database, then a fresh host on its own PostgreSQL
           database, with the same phases; the summary compares their runs/s
           per m and phase. Each PostgreSQL phase also prints its SERIALIZABLE
           retries: the delta of `writer.conflict_retries` (write batches
           PostgreSQL refused for a serialization conflict and ran again) and
           `writer.conflicts_given_up` (given up after the last try) in
           `host.status`, and retries per 1,000 runs. The writer publishes them
           when it commits, at most every 0.2 s, so after a phase the bench
           polls host.status until they stop moving for 0.5 s and then starts
           one trivial run (outside any measurement) to have them republished
           with the phase's last commits. The same readings give the phase's
           "PostgreSQL round trips" per run: the delta of `writer.round_trips`
           (the writer connection's waits for the server: a statement sent
           alone, a queue of deferred statements sent together, an
           executemany; docs/postgresql.md), lease renewals and that one
           trivial run included. `--runners` prints them per host
           (each runner host waits for its lease renewal, within ~5 s, instead).

  DBOS     DBOS Transact on SQLite (the `bench` extra): three @DBOS.step
           functions in one @DBOS.workflow called from m threads of this
           process (closed loop; the caller's thread runs the workflow), right
           after piwf's phases for the same m (with --database, after both
           hosts'; the DBOS targets compare it with the SQLite host). WAL
           system database (`--dbos-journal delete` keeps the rollback journal
           DBOS creates by itself), synchronous=FULL. DBOS is launched once, before the piwf phases.

  ceiling  `<repo>/../shared/bench/ceiling.py --quick` (or --ceiling PATH) as a
           subprocess of this one with the venv's python, before anything else:
           the same 3-step durable runs with nothing but sqlite3, a writer
           thread and a warm pool of 16 pipe-connected workers. Its median
           `runs_per_s` for "warm-pool W=16 N=1000 FULL" is the ceiling for
           the 8-worker phases; "latency warm-pool W=1 FULL" the latency floor.

`--profile DIR`: after the measured burst of the largest m (of the PostgreSQL
host with --database), two more bursts of --profile-runs runs (default 1000, a
few seconds of samples), each recorded with `py-spy record --pid <host> --rate
250 --format raw --nonblocking --threads` (the second also with `--gil`);
writes DIR/host-burst.txt and DIR/host-burst-gil.txt and prints their top
entries (bench/profile_top.py). The measured burst itself is never profiled.

The summary at the end prints each target of issue 21 with the figure reached
and met / NOT met: at max_workers 8, closed loop and burst, ≥ 6× DBOS (8
threads) and ≥ 25 % of the ceiling; CPU per run host + workers ≤ 1.5 ms and host
alone ≤ 1 ms; at max_workers 1 (closed loop, 1 client) runs/s ≥ 1.5× DBOS's (1
thread) and start→done p50 ≤ 0.7× DBOS's; PostgreSQL (one host) ≥ 0.6× SQLite's
runs/s per m and phase (with --database; else it says how to measure it); and the
target of issue 33: the function workflow ≥ 0.9× the graph's runs/s per m and phase. The
fan-out, sleepers and messages targets are measured by bench/fanout.py,
bench/sleepers.py and bench/messages.py.

Run: .venv/bin/python bench/throughput.py [--runs 300] [--workers 1 2 8]
     [--client-mode thread|process] [--done-via watch|runs|poll|db] [--no-dbos] [--no-function]
     [--ceiling PATH | --no-ceiling] [--profile DIR [--profile-runs 1000]]
     [--database URL|pg-temp] [--runners K ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import FUNCTION_WORKFLOW_SOURCE, WORKFLOW_SOURCE, closing_line, pct, thread_group  # noqa: E402  (bench/ is the script's directory)
from profile_top import read_stacks, summarise  # noqa: E402

from piwf_actors.client import Client, HostNotRunning  # noqa: E402
from piwf_actors.errors import PiwfError  # noqa: E402

STEPS_PER_RUN = 3
FINAL = ("done", "failed", "cancelled")
WAIT_S = 120.0
SUBMITTERS = 4
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def venv_python() -> str:
    candidate = REPO / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def py_spy() -> str | None:
    candidate = Path(venv_python()).parent / "py-spy"
    return str(candidate) if candidate.exists() else shutil.which("py-spy")


# --- the host, in its own process ----------------------------------------------------------------


@dataclass
class HostCpu:
    """CPU seconds of the host process, its threads and its children at one moment (/proc and psutil)."""

    process_s: float
    reaped_children_s: float  # cutime + cstime: children the host has waited for
    threads: dict[int, float]  # tid -> cpu s
    children: dict[tuple[int, float], float]  # (pid, create_time) -> cpu s


@dataclass
class CpuUse:
    """CPU seconds spent between two HostCpu snapshots."""

    host_s: float
    by_thread: dict[str, float]  # thread group -> cpu s; "ended threads" for those gone by the end
    workers_s: float


def _stat_fields(path: str) -> list[str]:
    with open(path) as stat:
        return stat.read().rsplit(")", 1)[1].split()  # fields from 3 (state) on; comm may hold spaces


class HostProcess:
    """`bin/piwf-host` as a subprocess on its own state dir; stopped with SIGTERM."""

    def __init__(self, state_dir: Path, max_workers: int, synchronous: str, database: str | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.max_workers = max_workers
        self.socket_path = str(state_dir / "host.sock")
        self.database = state_dir / "state.db"
        self._log_path = state_dir.parent / f"{state_dir.name}.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115  (closed in stop())
        # bin/piwf-host execs the venv's python, so this pid is the host itself.
        self.proc = subprocess.Popen(
            [str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", str(max_workers),
             "--synchronous", synchronous, "--log-level", "WARNING",
             *(["--database", database] if database is not None else []), *extra],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the socket answers and host.status shows max_workers started workers (if it says)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with Client(socket_path=self.socket_path, retries=0, timeout=5) as client:
                    workers = client.status().get("workers") or {}
                    started = int(workers.get("idle", 0)) + len(workers.get("active", ()))
                    if "idle" not in workers or started >= self.max_workers:
                        return
            except HostNotRunning:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"piwf-host not ready within {timeout} s: {self.log_tail()}")

    def cpu(self) -> HostCpu:
        fields = _stat_fields(f"/proc/{self.pid}/stat")
        threads: dict[int, float] = {}
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                task = _stat_fields(f"/proc/{self.pid}/task/{tid}/stat")
                threads[int(tid)] = (int(task[11]) + int(task[12])) * _TICK_S
        children: dict[tuple[int, float], float] = {}
        for child in psutil.Process(self.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                times = child.cpu_times()
                children[(child.pid, child.create_time())] = times.user + times.system
        return HostCpu((int(fields[11]) + int(fields[12])) * _TICK_S, (int(fields[13]) + int(fields[14])) * _TICK_S,
                       threads, children)

    def thread_names(self) -> dict[int, str]:
        """tid -> Python thread name, from `py-spy dump --json` ({} without py-spy): /proc only says "python"."""
        spy = py_spy()
        if spy is None:
            return {}
        try:
            out = subprocess.run([spy, "dump", "--pid", str(self.pid), "--json"], capture_output=True, text=True,
                                 timeout=30, check=True).stdout
            return {int(t["os_thread_id"]): t["thread_name"] for t in json.loads(out)
                    if t.get("os_thread_id") and t.get("thread_name")}
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            return {}

    def log_tail(self) -> str:
        self._log.flush()
        return " | ".join(self._log_path.read_text(errors="replace").strip().splitlines()[-5:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def cpu_use(before: HostCpu, after: HostCpu, names: dict[int, str]) -> CpuUse:
    host = after.process_s - before.process_s
    by_thread: dict[str, float] = {}
    tracked = 0.0
    for tid, cpu in after.threads.items():
        spent = cpu - before.threads.get(tid, 0.0)
        group = thread_group(names.get(tid, "unnamed (no py-spy)"))
        by_thread[group] = by_thread.get(group, 0.0) + spent
        tracked += spent
    if host - tracked > 0.0005:
        by_thread["ended threads"] = host - tracked
    workers = sum(cpu - before.children.get(key, 0.0) for key, cpu in after.children.items())
    # Children gone by the end: their whole life is in the host's cutime once reaped; take off what was before.
    workers += (after.reaped_children_s - before.reaped_children_s
                - sum(cpu for key, cpu in before.children.items() if key not in after.children))
    return CpuUse(host, by_thread, max(workers, 0.0))


class MachineBusy:
    """Share of all cores in use (everyone's load, not just the bench's) between start() and stop()."""

    def __init__(self) -> None:
        self._before = psutil.cpu_times()

    def share(self) -> float:
        after = psutil.cpu_times()
        idle = (after.idle + after.iowait) - (self._before.idle + self._before.iowait)
        total = sum(after) - sum(self._before)
        return 1 - idle / total if total > 0 else 0.0


# --- clients ---------------------------------------------------------------------------------------


def _seen_via_watch(client: Client, run_id: str) -> tuple[str, float]:
    """A `run` watch on this connection until the run is final, then `unwatch`: (status, seen at)."""
    subscription = None
    for event in client.watch("run", run_id=run_id, timeout=WAIT_S):
        subscription = event.get("subscription_id") or subscription
        if event.get("topic") != "run":
            continue
        status = (event.get("payload") or {}).get("status")
        if status in FINAL:
            seen = time.perf_counter()
            if subscription is not None:
                client.request("unwatch", {"subscription_id": subscription})
            return status, seen
    raise RuntimeError(f"the host closed the watch of {run_id} before it finished")


def _seen_via_poll(client: Client, run_id: str, interval_s: float) -> tuple[str, float]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        status = client.get(run_id)["status"]
        if status in FINAL:
            return status, time.perf_counter()
        time.sleep(interval_s)
    raise TimeoutError(f"run {run_id} not done after {WAIT_S} s")


def _seen_via_db(db: sqlite3.Connection, run_id: str) -> tuple[str, float]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        row = db.execute("SELECT status FROM run WHERE run_id = ?", (run_id,)).fetchone()
        if row is not None and row[0] in FINAL:
            return row[0], time.perf_counter()
        time.sleep(0.0005)
    raise TimeoutError(f"run {run_id} not done after {WAIT_S} s")


class RunsWatch:
    """One `runs` watch on its own connection, shared by the thread clients of a closed loop (--done-via runs).

    Correct for a closed loop of at most 50 clients: the runs in flight are then
    always among the 50 newest that the view lists.
    """

    def __init__(self, socket_path: str) -> None:
        self._client = Client(socket_path=socket_path, timeout=WAIT_S)
        self._client.connect()
        self._cond = threading.Condition()
        self._final: dict[str, tuple[str, float]] = {}  # run_id -> (status, perf_counter seen)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-runs-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._client.watch("runs"):
                seen = time.perf_counter()
                with self._cond:
                    for run in (event.get("payload") or {}).get("runs", ()):
                        if run["status"] in FINAL and run["run_id"] not in self._final:
                            self._final[run["run_id"]] = (run["status"], seen)
                    self._cond.notify_all()
        except BaseException as exc:  # the host closed the connection at stop, or a real failure
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def wait(self, run_id: str) -> tuple[str, float]:
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while run_id not in self._final:
                if self._error is not None:
                    raise RuntimeError(f"runs watch failed: {self._error}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"run {run_id} not seen done within {WAIT_S} s")
                self._cond.wait(remaining)
            return self._final.pop(run_id)

    def close(self) -> None:
        self._client.close()


def client_loop(socket_path: str, database: str, spec: str, count: int, done_via: str, poll_s: float, go: Any,
                results: Any, shared: RunsWatch | None = None) -> None:
    """One closed-loop client (a thread or a spawned process): wait at `go`, then `count` × start → seen done.

    Puts one (samples, cpu s of this client, error or None) on `results`; a sample is
    (started, seen, run_id, status) with perf_counter times (CLOCK_MONOTONIC: comparable across processes).
    """
    client = Client(socket_path=socket_path, timeout=WAIT_S)
    db = None
    samples: list[tuple[float, float, str, str]] = []
    try:
        client.connect()
        if done_via == "db":
            db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
        seen_done: Callable[[str], tuple[str, float]] = {
            "watch": lambda run_id: _seen_via_watch(client, run_id),
            "poll": lambda run_id: _seen_via_poll(client, run_id, poll_s),
            "db": lambda run_id: _seen_via_db(db, run_id),  # type: ignore[arg-type]
            "runs": lambda run_id: shared.wait(run_id),  # type: ignore[union-attr]
        }[done_via]
        go.wait(timeout=120)
        cpu0 = time.thread_time()
        for i in range(count):
            started = time.perf_counter()
            run_id = client.start(spec, {"i": i})["run_id"]
            status, seen = seen_done(run_id)
            samples.append((started, seen, run_id, status))
        results.put((samples, time.thread_time() - cpu0, None))
    except BaseException as exc:  # reported by the parent
        results.put((samples, 0.0, f"{type(exc).__name__}: {exc}"))
        with contextlib.suppress(Exception):
            go.abort()
    finally:
        client.close()
        if db is not None:
            db.close()


# --- phases ------------------------------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    runs: int
    elapsed_s: float
    latencies_s: list[float]
    db_latencies_s: list[float]
    not_done: int
    cpu: CpuUse
    bench_cpu_s: float
    machine_busy: float
    notes: list[str] = field(default_factory=list)
    conflicts: Conflicts | None = None  # on PostgreSQL: the SERIALIZABLE retries during the phase
    round_trips: float | None = None  # on PostgreSQL: the writer's round trips per run during the phase

    @property
    def rate(self) -> float:
        return self.runs / self.elapsed_s

    def cpu_ms(self, seconds: float) -> float:
        return seconds * 1000 / self.runs

    @property
    def total_cpu_ms(self) -> float:
        return self.cpu_ms(self.cpu.host_s + self.cpu.workers_s)


def run_views(socket_path: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """run_id -> run.get view, read after a phase (outside its measurement)."""
    with Client(socket_path=socket_path, timeout=WAIT_S) as client:
        return {run_id: client.get(run_id) for run_id in run_ids}


def closed_loop(host: HostProcess, spec: str, runs: int, clients: int, mode: str, done_via: str,
                poll_s: float) -> Phase:
    per_client = [runs // clients + (1 if n < runs % clients else 0) for n in range(clients)]
    args = (host.socket_path, str(host.database), spec)
    workers: list[Any]
    shared: RunsWatch | None = None
    if mode == "process":
        # spawn, not fork: this process has threads (DBOS's) and fork would copy their locks.
        ctx = multiprocessing.get_context("spawn")
        go: Any = ctx.Barrier(clients + 1)
        results: Any = ctx.Queue()
        workers = [ctx.Process(target=client_loop, args=(*args, c, done_via, poll_s, go, results), daemon=True)
                   for c in per_client]
    else:
        go = threading.Barrier(clients + 1)
        results = queue.Queue()
        shared = RunsWatch(host.socket_path) if done_via == "runs" else None
        workers = [threading.Thread(target=client_loop, args=(*args, c, done_via, poll_s, go, results, shared),
                                    name=f"bench-client-{n}", daemon=True) for n, c in enumerate(per_client)]
    for worker in workers:
        worker.start()
    cpu_before = host.cpu()
    machine = MachineBusy()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed: its error is in results
        go.wait(timeout=120)
    collected = [results.get(timeout=WAIT_S * max(1, runs // clients)) for _ in per_client]
    busy = machine.share()
    cpu_after = host.cpu()
    for worker in workers:
        worker.join(timeout=30)
    if shared is not None:
        shared.close()
    errors = [error for _, _, error in collected if error]
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]}")
    samples = [sample for batch, _, _ in collected for sample in batch]
    views = run_views(host.socket_path, [run_id for _, _, run_id, _ in samples])
    phase = Phase(f"closed loop, {clients} client{'s' if clients > 1 else ''} ({mode} clients, done seen via {done_via})",
                  len(samples), max(seen for _, seen, _, _ in samples) - min(started for started, *_ in samples),
                  [seen - started for started, seen, _, _ in samples],
                  [v["finished_at"] - v["created_at"] for v in views.values() if v.get("finished_at")],
                  sum(1 for *_, status in samples if status != "done"),
                  cpu_use(cpu_before, cpu_after, host.thread_names()), sum(cpu for _, cpu, _ in collected), busy)
    share = phase.bench_cpu_s / phase.elapsed_s
    if mode == "thread" and share > 0.5:
        phase.notes.append(f"WARNING: the client threads used {share:.0%} of a core, all under this process's GIL: "
                           f"they may be what the runs wait for; compare with --client-mode process")
    return phase


def _finished(client: Client) -> int:
    counts = client.status().get("runs") or {}
    return sum(int(counts.get(status, 0)) for status in FINAL)


def _start_retrying(client: Client, spec: str, input: Any, attempts: int = 20) -> str:
    """`run.start`, sent again with the same idempotency key while it is answered `unavailable` (on
    PostgreSQL with several hosts writing, a batch can lose every retry against their transactions:
    nothing was written, and the protocol says to send the request again)."""
    key = uuid.uuid4().hex
    for attempt in range(attempts):
        try:
            return str(client.start(spec, input, idempotency_key=key)["run_id"])
        except PiwfError as exc:
            if not str(exc).startswith("unavailable") or attempt == attempts - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def burst(host: HostProcess, spec: str, runs: int, on_start: Callable[[], None] | None = None) -> Phase:
    """All runs submitted up front by SUBMITTERS connections; done when host.status counts them finished."""
    counts = [runs // SUBMITTERS + (1 if n < runs % SUBMITTERS else 0) for n in range(SUBMITTERS)]
    submitted: list[tuple[float, str]] = []  # (time.time() before run.start, run_id)
    submit_cpu: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(SUBMITTERS + 1)

    def submit(count: int) -> None:
        try:
            with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
                go.wait(timeout=60)
                cpu0 = time.thread_time()
                for i in range(count):
                    started = time.time()
                    run_id = _start_retrying(client, spec, {"i": i})
                    with lock:
                        submitted.append((started, run_id))
                submit_cpu.append(time.thread_time() - cpu0)
        except BaseException as exc:  # reported below
            errors.append(exc)
            go.abort()

    with Client(socket_path=host.socket_path, timeout=WAIT_S) as status_client:
        finished_before = _finished(status_client)
        threads = [threading.Thread(target=submit, args=(c,), name=f"bench-submit-{n}", daemon=True)
                   for n, c in enumerate(counts)]
        for t in threads:
            t.start()
        if on_start is not None:
            on_start()
        cpu_before = host.cpu()
        machine = MachineBusy()
        thread_cpu0 = time.thread_time()
        with contextlib.suppress(threading.BrokenBarrierError):
            go.wait(timeout=60)
        began = time.time()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        submit_s = time.time() - began
        deadline = time.monotonic() + WAIT_S
        while _finished(status_client) < finished_before + runs:
            if time.monotonic() > deadline:
                raise TimeoutError(f"burst not finished after {WAIT_S} s")
            time.sleep(0.02)
        busy = machine.share()
        cpu_after = host.cpu()
        poll_cpu = time.thread_time() - thread_cpu0
    views = run_views(host.socket_path, [run_id for _, run_id in submitted])
    finished_at = {run_id: v.get("finished_at") for run_id, v in views.items()}
    last = max(f for f in finished_at.values() if f is not None)
    phase = Phase(f"burst, {runs} runs up front from {SUBMITTERS} connections", len(submitted), last - began,
                  [finished_at[run_id] - started for started, run_id in submitted if finished_at[run_id]],
                  [v["finished_at"] - v["created_at"] for v in views.values() if v.get("finished_at")],
                  sum(1 for v in views.values() if v["status"] != "done"),
                  cpu_use(cpu_before, cpu_after, host.thread_names()), poll_cpu + sum(submit_cpu), busy)
    phase.notes.append(f"submitted in {submit_s:.2f} s ({runs / submit_s:.0f} run.start/s); latency = submit → "
                       f"finished_at (host clock)")
    return phase


# --- PostgreSQL's SERIALIZABLE retries (host.status → writer) -----------------------------------------

# The writer publishes its stats (host.status → writer) when it commits, at most every 0.2 s: after the last
# commit of a phase, the board can lag until the next commit. An idle host's next commit is its lease renewal,
# every lease_s / 3 (5 s by default); WRITER_REPUBLISH_S waits a little longer than that.
WRITER_QUIET_S = 0.5
WRITER_REPUBLISH_S = 6.5


@dataclass
class WriterCounters:
    """The writer's cumulative counters as one `host.status` showed them."""

    commits: int
    retries: int  # writer.conflict_retries: batches PostgreSQL refused for a serialization conflict, run again
    given_up: int  # writer.conflicts_given_up: batches given up after the last try
    fresh: bool = True  # False: not republished after the phase's last commits (its last ≤ 0.2 s may be missing)
    round_trips: int | None = None  # writer.round_trips: its connection's waits for the server (None: not reported)


@dataclass
class Conflicts:
    """SERIALIZABLE retries between two WriterCounters, over `runs` runs."""

    retries: int
    given_up: int
    runs: float
    fresh: bool

    @classmethod
    def between(cls, before: WriterCounters | None, after: WriterCounters | None, runs: float) -> Conflicts | None:
        if before is None or after is None:
            return None
        return cls(after.retries - before.retries, after.given_up - before.given_up, runs,
                   before.fresh and after.fresh)

    @staticmethod
    def total(parts: list[Conflicts], runs: float) -> Conflicts:
        return Conflicts(sum(c.retries for c in parts), sum(c.given_up for c in parts), runs,
                         all(c.fresh for c in parts))

    @property
    def per_1000(self) -> float:
        return self.retries * 1000 / self.runs if self.runs else float("nan")

    def describe(self, runs_name: str = "runs") -> str:
        text = (f"{self.retries} SERIALIZABLE retr{'y' if self.retries == 1 else 'ies'} "
                f"({self.per_1000:.1f} per 1,000 {runs_name}), {self.given_up} batch"
                f"{'' if self.given_up == 1 else 'es'} given up")
        if not self.fresh:
            text += " (the writer's stats were not republished after the phase: its last ≤ 0.2 s may be missing)"
        return text


def _writer_counters(client: Client) -> WriterCounters | None:
    writer = client.status().get("writer") or {}
    if writer.get("conflict_retries") is None or writer.get("commits") is None:
        return None  # a host that does not report them
    trips = writer.get("round_trips")
    return WriterCounters(int(writer["commits"]), int(writer["conflict_retries"]),
                          int(writer.get("conflicts_given_up") or 0), round_trips=None if trips is None else int(trips))


def settled_counters(socket_path: str, nudge: Callable[[Client], None] | None = None) -> WriterCounters | None:
    """The writer's counters once a phase has settled, covering its last commits.

    Polls host.status until the writer's figures have not moved for WRITER_QUIET_S; then, since the board
    may still lack the commits of the writer's last 0.2 s, waits for the next republication: `nudge` (one
    trivial run, outside any measurement) makes the writer commit at once; without it (a runner host), the
    lease renewal does within WRITER_REPUBLISH_S. None when the host does not report the counters.
    """
    with Client(socket_path=socket_path, timeout=WAIT_S) as client:
        last = _writer_counters(client)
        if last is None:
            return None
        quiet_since = time.monotonic()
        deadline = quiet_since + 20.0
        while time.monotonic() - quiet_since < WRITER_QUIET_S and time.monotonic() < deadline:
            time.sleep(0.05)
            now = _writer_counters(client)
            if now != last:
                last, quiet_since = now, time.monotonic()
        if last is None:
            return None
        if nudge is not None:
            nudge(client)
        deadline = time.monotonic() + WRITER_REPUBLISH_S
        while time.monotonic() < deadline:
            now = _writer_counters(client)
            if now is not None and now.commits != last.commits:
                return now
            time.sleep(0.05)
        return replace(last, fresh=False)


# --- PostgreSQL's round trips (host.status → writer.round_trips) ----------------------------------------


def round_trips_per_run(before: WriterCounters | None, after: WriterCounters | None, runs: float) -> float | None:
    """The writer's round trips to the database server per run between two settled counters: each
    statement the writer sent alone, each pipeline sync (docs/postgresql.md). They include what
    accompanies the runs: lease renewals, and the one nudge run settled_counters starts."""
    if before is None or after is None or before.round_trips is None or after.round_trips is None or not runs:
        return None
    return (after.round_trips - before.round_trips) / runs


def round_trips_line(phase: Phase) -> str | None:
    """The phase's output line for its round trips (None when not measured: SQLite, an older host)."""
    if phase.round_trips is None:
        return None
    return f"    PostgreSQL round trips: {phase.round_trips:.1f} per run (the writer's connection)"


def nudge_run(spec: str) -> Callable[[Client], None]:
    """One trivial run, started and waited for: it makes the host's writer commit (see settled_counters)."""
    def nudge(client: Client) -> None:
        client.wait(_start_retrying(client, spec, {"nudge": True}), timeout=WAIT_S)
    return nudge


# --- SQL statements per run (host.status → writer.statements) -----------------------------------------


def settled_statements(socket_path: str, nudge: Callable[[Client], None]) -> int | None:
    """The writer's cumulative `statements` (store/statement_count.py) once a phase has settled: the same
    wait as settled_counters (quiet, then one nudge run so the board is republished with the last commits).
    The nudge run's own statements fall on one side or the other of the reading: ±1 run's worth in a phase.
    None when the host does not report them."""
    with Client(socket_path=socket_path, timeout=WAIT_S) as client:
        if (client.status().get("writer") or {}).get("statements") is None:
            return None
    settled_counters(socket_path, nudge)
    with Client(socket_path=socket_path, timeout=WAIT_S) as client:
        value = (client.status().get("writer") or {}).get("statements")
    return None if value is None else int(value)


def writer_cpu_s(phase: Phase) -> float | None:
    """CPU of the host's writer thread(s) in the phase (the DatabaseWriter actor's thread group); None when
    the threads have no names (py-spy names them: without it /proc says only "python")."""
    named = [(name, s) for name, s in phase.cpu.by_thread.items() if "writer" in name.lower()]
    return sum(s for _, s in named) if named else None


def statements_note(phase: Phase, before: int | None, after: int | None) -> str:
    """One line: SQL statements per run and the writer's CPU per run in the phase."""
    writer_s = writer_cpu_s(phase)
    writer = ("writer CPU not measured (no py-spy to name the host's threads)" if writer_s is None
              else f"writer CPU {phase.cpu_ms(writer_s):.3f} ms/run")
    if before is None or after is None:
        return f"writer: statements per run not reported by this host; {writer}"
    return (f"writer: {(after - before) / phase.runs:.1f} SQL statements per run (writer.statements, ±1 run's "
            f"worth per phase), {writer}")


def print_phase(phase: Phase) -> None:
    lat = [s * 1000 for s in phase.latencies_s]
    db = [s * 1000 for s in phase.db_latencies_s]
    print(f"  {phase.label}" + (f"   {phase.not_done} NOT done" if phase.not_done else ""))
    print(f"    {phase.rate:7.1f} runs/s  {phase.rate * STEPS_PER_RUN:7.1f} steps/s   "
          f"start→done p50 {pct(lat, 0.5):6.1f} ms  p99 {pct(lat, 0.99):6.1f} ms   "
          f"db created→finished p50 {pct(db, 0.5):6.1f} ms  p99 {pct(db, 0.99):6.1f} ms")
    cpu = phase.cpu
    groups = sorted(cpu.by_thread.items(), key=lambda item: -item[1])
    shown = [(name, s) for name, s in groups if phase.cpu_ms(s) >= 0.01]
    threads = ", ".join(f"{name} {phase.cpu_ms(s):.2f}" for name, s in shown)
    print(f"    cpu ms/run: host {phase.cpu_ms(cpu.host_s):.2f} + workers {phase.cpu_ms(cpu.workers_s):.2f} = "
          f"{phase.total_cpu_ms:.2f}; bench clients {phase.cpu_ms(phase.bench_cpu_s):.2f} "
          f"({phase.bench_cpu_s / phase.elapsed_s:.0%} of a core); host busy "
          f"{cpu.host_s / phase.elapsed_s:.0%} of a core, machine busy {phase.machine_busy:.0%} of "
          f"{os.cpu_count()} cores")
    print(f"    host by thread, ms/run: {threads}")
    if phase.conflicts is not None:
        print(f"    PostgreSQL during the phase: {phase.conflicts.describe()}")
    trips = round_trips_line(phase)
    if trips is not None:
        print(trips)
    for note in phase.notes:
        print(f"    {note}")


# --- profile -------------------------------------------------------------------------------------------


class PySpyRecorder:
    """`py-spy record` of the host while a burst runs; stopped with SIGINT, which makes it write the file."""

    def __init__(self, spy: str, pid: int, out: Path, gil: bool) -> None:
        self.out = out
        self._log = out.with_suffix(".log")
        self._cmd = [spy, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--nonblocking",
                     "--threads", "--output", str(out)] + (["--gil"] if gil else [])
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self._log, "wb") as log:
            self.proc = subprocess.Popen(self._cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        time.sleep(0.5)  # it attaches before the first submit

    def stop(self) -> str:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        text = self._log.read_text(errors="replace")
        match = re.search(r"Samples: (\d+) Errors: (\d+)", text)
        if match:
            return f"{match.group(1)} samples, {match.group(2)} errors"
        return " | ".join(text.strip().splitlines()[-2:]) or f"py-spy exited {self.proc.returncode}"


def profile_bursts(host: HostProcess, spec: str, runs: int, directory: Path) -> None:
    spy = py_spy()
    if spy is None:
        print("  --profile: py-spy not found (`make bench` installs the `bench` extra); no profile")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, gil in (("host-burst.txt", False), ("host-burst-gil.txt", True)):
        recorder = PySpyRecorder(spy, host.pid, directory / name, gil)
        phase = burst(host, spec, runs, on_start=recorder.start)
        outcome = recorder.stop()
        kind = "only samples holding the GIL (--gil)" if gil else "all threads not idle"
        print(f"  profile of the host during another burst of {runs}, {kind}: {directory / name} ({outcome}; this "
              f"burst {phase.rate:.0f} runs/s while recorded)")
        if (directory / name).exists():
            for line in summarise(read_stacks(directory / name), 12, by_thread=True).splitlines():
                print(f"    {line}")


# --- piwf ----------------------------------------------------------------------------------------------


def bench_piwf(base: Path, spec: str, workers: int, args: argparse.Namespace,
               databases: PgDatabases | None = None, function_spec: str | None = None) -> dict[str, Phase]:
    """A fresh host with `workers` workers (on SQLite in its state dir, or on a fresh PostgreSQL database of
    `databases`): warm-up, closed loop, burst of the graph `spec`, each followed by the same phase of the
    function workflow `function_spec` when given (keys `closed_function`, `burst_function`). On
    PostgreSQL each phase gets its SERIALIZABLE retries."""
    database = None if databases is None else databases.fresh()
    host = HostProcess(base / (f"piwf-{workers}" if databases is None else f"piwf-pg-{workers}"), workers,
                       args.synchronous, database)
    on_pg = databases is not None

    def counters() -> WriterCounters | None:
        return settled_counters(host.socket_path, nudge_run(spec)) if on_pg else None

    def loop(workflow: str, runs: int) -> Phase:
        return closed_loop(host, workflow, runs, workers, args.client_mode, args.done_via, args.poll_ms / 1000)

    try:
        host.wait_ready()
        for workflow in (spec, function_spec) if function_spec is not None else (spec,):  # warm-up
            loop(workflow, max(2 * workers, 8))
        phases: dict[str, Phase] = {}
        # Each phase of the graph, then the same phase of the function on the same host (when measured):
        # the two figures of a kind come from one minute of the same machine's load.
        last = counters()
        statements = settled_statements(host.socket_path, nudge_run(spec))
        for key, measure in (("closed", lambda workflow: loop(workflow, args.runs)),
                             ("burst", lambda workflow: burst(host, workflow, args.runs))):
            for suffix, workflow in (("", spec), ("_function", function_spec)):
                if workflow is None:
                    continue
                phase = measure(workflow)
                statements_before, statements = statements, settled_statements(host.socket_path, nudge_run(spec))
                phase.notes.append(statements_note(phase, statements_before, statements))
                if suffix:
                    phase.label = f"function workflow, {phase.label}"
                if on_pg:
                    before, last = last, counters()
                    phase.conflicts = Conflicts.between(before, last, phase.runs)
                    phase.round_trips = round_trips_per_run(before, last, phase.runs)
                    if phase.conflicts is None:
                        phase.notes.append("the host's host.status has no writer.conflict_retries: retries not "
                                           "measured")
                phases[key + suffix] = phase
        engine = "SQLite, synchronous=" + args.synchronous if databases is None else f"PostgreSQL ({databases.label})"
        print(f"piwf through the socket, max_workers={workers} (host pid {host.pid}, {engine}):")
        for phase in phases.values():
            print_phase(phase)
        if "closed_function" in phases:
            print(f"piwf function / graph workflow at {workers}: {function_ratios(phases)}")
        # --profile records the hosts of the engine asked for: PostgreSQL's with --database, else SQLite's.
        if args.profile is not None and workers == max(args.workers) and on_pg == (args.database is not None):
            profile_bursts(host, spec, args.profile_runs, Path(args.profile))
        return phases
    finally:
        host.stop()


def function_ratios(phases: dict[str, Phase]) -> str:
    """runs/s of the function workflow / the graph's, per phase of one host: "closed loop 0.95× (…), burst …"."""
    return ", ".join(f"{name} {phases[key + '_function'].rate / phases[key].rate:.2f}× "
                     f"({phases[key + '_function'].rate:.0f} / {phases[key].rate:.0f} runs/s)"
                     for key, name in (("closed", "closed loop"), ("burst", "burst")))


# --- runner hosts (docs/runners.md) -------------------------------------------------------------------


def executed_counts(database: str) -> dict[str, int]:
    """Node attempts per executing host (node_attempt.executed_by), read from the shared database."""
    sql = "SELECT coalesce(executed_by, '?'), count(*) FROM node_attempt GROUP BY executed_by"
    if database.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            return {str(k): int(n) for k, n in conn.execute(sql).fetchall()}
    conn = sqlite3.connect(f"file:{database.removeprefix('sqlite://')}?mode=ro", uri=True, timeout=10)
    try:
        return {str(k): int(n) for k, n in conn.execute(sql).fetchall()}
    finally:
        conn.close()


def bench_runners(base: Path, spec: str, workers: int, runners: int, args: argparse.Namespace,
                  databases: PgDatabases | None) -> Phase:
    """The burst with the active host and `runners` runner hosts beside it, each with `workers` workers, on
    one database (PostgreSQL, or a SQLite file they share). Prints runs/s and, per host, the runs it
    executed and its CPU (host process, its workers) per run it executed."""
    database = databases.fresh() if databases is not None else f"sqlite://{base}/shared-{runners}/state.db"
    if databases is None:
        (base / f"shared-{runners}").mkdir()
    active = HostProcess(base / f"active-{runners}", workers, args.synchronous, database, ("--host-id", "host-a"))
    others: list[HostProcess] = []
    try:
        active.wait_ready()
        for index in range(1, runners + 1):
            others.append(HostProcess(base / f"runner-{runners}-{index}", workers, args.synchronous, database,
                                      ("--role", "runner", "--host-id", f"runner-{index}")))
        for runner in others:
            runner.wait_ready()
        burst(active, spec, max(4 * workers * (runners + 1), 16))  # warm-up
        hosts = {"host-a": active, **{f"runner-{i}": r for i, r in enumerate(others, 1)}}

        def counters() -> dict[str, WriterCounters | None]:
            """Each host's writer counters, settled (PostgreSQL only: on SQLite they stay 0)."""
            if databases is None:
                return {}
            # The active host first, with a nudge run; the runner hosts then in parallel, each until its
            # writer republishes (the nudge's claims or the lease renewal).
            found = {"host-a": settled_counters(active.socket_path, nudge_run(spec))}
            def read(name: str, host: HostProcess) -> None:
                found[name] = settled_counters(host.socket_path)

            readers = [threading.Thread(target=read, args=(name, host), name=f"bench-counters-{name}", daemon=True)
                       for name, host in hosts.items() if name != "host-a"]
            for t in readers:
                t.start()
            for t in readers:
                t.join()
            return found

        before_conflicts = counters()
        before_runs = executed_counts(database)
        before_cpu: dict[str, HostCpu] = {}
        phase = burst(active, spec, args.runs,
                      on_start=lambda: before_cpu.update({f"runner-{i}": r.cpu() for i, r in enumerate(others, 1)}))
        after_cpu = {f"runner-{i}": r.cpu() for i, r in enumerate(others, 1)}
        after_runs = executed_counts(database)
        executed = {host: (after_runs.get(host, 0) - before_runs.get(host, 0)) / STEPS_PER_RUN
                    for host in ["host-a", *after_cpu]}
        after_conflicts = counters()
        conflicts = {name: Conflicts.between(before_conflicts.get(name), after_conflicts.get(name), executed[name])
                     for name in hosts} if databases is not None else {}
        if conflicts and all(c is not None for c in conflicts.values()):
            phase.conflicts = Conflicts.total([c for c in conflicts.values() if c is not None], phase.runs)
            phase.notes.append("SERIALIZABLE retries: all hosts' writers together, per 1,000 runs of the burst; "
                               "per host below, per 1,000 runs it executed")
        elif conflicts:
            phase.notes.append("a host's host.status has no writer.conflict_retries: retries not measured")
        engine = "SQLite file shared" if databases is None else f"PostgreSQL ({databases.label})"
        print(f"piwf with {runners} runner host(s) beside the active host, {workers} worker(s) each ({engine}):")
        print_phase(phase)
        uses = {"host-a": phase.cpu, **{name: cpu_use(before_cpu[name], after_cpu[name], {}) for name in after_cpu}}
        for host, use in uses.items():
            runs = executed[host]

            def per(seconds: float, n: float = runs) -> float:
                return seconds * 1000 / n if n else float("nan")

            print(f"    {host:>9}: executed {runs:5.0f} runs ({runs / max(phase.elapsed_s, 1e-9):6.1f}/s); cpu ms per "
                  f"run it executed: host process {per(use.host_s):.2f} + workers {per(use.workers_s):.2f} = "
                  f"{per(use.host_s + use.workers_s):.2f}")
            host_conflicts = conflicts.get(host)
            if host_conflicts is not None:
                print(f"    {'':>9}  its writer: {host_conflicts.describe('runs it executed')}")
        return phase
    finally:
        for runner in others:
            runner.stop()
        active.stop()


# --- PostgreSQL ----------------------------------------------------------------------------------------


class PgDatabases:
    """Where `--database` puts each host's state: a fresh database per host on the server `url` names
    (its role needs CREATEDB), or with `pg-temp` on a cluster of its own started here
    (tests/pg_cluster.py, durable settings: fsync on, as a real server), stopped at the end."""

    def __init__(self, spec: str) -> None:
        self._cluster: Any = None
        self._created: list[str] = []
        if spec == "pg-temp":
            sys.path.insert(0, str(REPO / "tests"))
            from pg_cluster import PgCluster

            self._cluster = PgCluster.start(durable=True)
            self._admin_url = self._cluster.url("postgres")
            self.label = f"a temporary cluster, {self._cluster.bin_dir.parent.name}, fsync on"
        else:
            self._admin_url = spec
            self.label = f"on {spec.split('@')[-1]}"

    def fresh(self) -> str:
        import psycopg

        name = f"piwf_bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._created.append(name)
        return _with_dbname(self._admin_url, name)

    def close(self) -> None:
        import psycopg

        try:
            if self._cluster is None:
                with psycopg.connect(self._admin_url, autocommit=True) as conn:
                    for name in self._created:
                        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            if self._cluster is not None:
                self._cluster.stop()


def _with_dbname(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


# --- DBOS ----------------------------------------------------------------------------------------------


@dataclass
class DbosFigure:
    threads: int
    rate: float
    latencies_s: list[float]


class DbosBench:
    """DBOS Transact launched once on `base`/dbos.sqlite; `measure(runs, threads)` runs one closed loop."""

    def __init__(self, base: Path, journal: str) -> None:
        import logging

        from dbos import DBOS

        self._dbos = DBOS
        path = base / "dbos.sqlite"
        if journal == "wal":
            conn = sqlite3.connect(path)  # journal_mode=WAL is stored in the file; DBOS's connections inherit it
            conn.execute("PRAGMA journal_mode=WAL")
            conn.close()

        @DBOS.step()
        def step_a(n: int) -> int:
            return n + 1

        @DBOS.step()
        def step_b(n: int) -> int:
            return n + 1

        @DBOS.step()
        def step_c(n: int) -> int:
            return n + 1

        @DBOS.workflow()
        def trivial3(n: int) -> int:
            return step_c(step_b(step_a(n)))

        self.workflow: Callable[[int], int] = trivial3
        DBOS(config={"name": "piwf-bench", "system_database_url": f"sqlite:///{path}", "log_level": "WARNING"})
        logging.getLogger("dbos").setLevel(logging.WARNING)
        DBOS.launch()
        conn = sqlite3.connect(path)
        mode, sync = conn.execute("PRAGMA journal_mode").fetchone()[0], conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.close()
        sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(sync, sync)
        self.description = (f"DBOS Transact {_dist_version('dbos')} on SQLite ({path.name}: journal_mode={mode}, "
                            f"synchronous={sync}), the caller's threads run the workflows")
        for i in range(20):  # warm-up
            trivial3(i)

    def measure(self, runs: int, threads: int) -> DbosFigure:
        rate, latencies = _dbos_closed_loop(self.workflow, runs, threads)
        ms = [s * 1000 for s in latencies]
        print(f"DBOS, {threads} thread{'s' if threads > 1 else ''}, closed loop:")
        print(f"    {rate:7.1f} wf/s    {rate * STEPS_PER_RUN:7.1f} steps/s   "
              f"start→done p50 {pct(ms, 0.5):6.1f} ms  p99 {pct(ms, 0.99):6.1f} ms")
        return DbosFigure(threads, rate, latencies)

    def close(self) -> None:
        self._dbos.destroy()


def start_dbos(base: Path, journal: str) -> DbosBench | None:
    """A launched DbosBench, or None (with a line saying why) if dbos is missing or fails to start."""
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        print(f"DBOS: not importable ({exc}); comparison skipped. `make bench` installs it (the `bench` extra).")
        return None
    try:
        return DbosBench(base, journal)
    except Exception as exc:  # an incompatible DBOS version must not hide the piwf figures
        print(f"DBOS: failed to start ({type(exc).__name__}: {exc}); comparison skipped")
        return None


def _dist_version(name: str) -> str:
    from importlib.metadata import version

    try:
        return version(name)
    except Exception:
        return "?"


def _dbos_closed_loop(workflow: Callable[[int], int], runs: int, threads: int) -> tuple[float, list[float]]:
    per_thread = [runs // threads + (1 if n < runs % threads else 0) for n in range(threads)]
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(threads + 1)

    def client(count: int) -> None:
        try:
            go.wait()
            for i in range(count):
                started = time.perf_counter()
                if workflow(i) != i + 3:
                    raise RuntimeError("wrong result")
                with lock:
                    latencies.append(time.perf_counter() - started)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=client, args=(c,), name=f"dbos-client-{n}") for n, c in enumerate(per_thread)]
    for t in pool:
        t.start()
    go.wait()
    began = time.perf_counter()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return len(latencies) / (time.perf_counter() - began), latencies


# --- ceiling -------------------------------------------------------------------------------------------


CEILING_THROUGHPUT = "warm-pool W=16 N=1000 FULL"
CEILING_LATENCY = "latency warm-pool W=1 FULL"
_CEILING_ROW = re.compile(r"^(?P<config>\S.*?)\s+(?P<metric>[a-z_0-9]+)\s+(?P<median>[\d.]+)\s+(?P<min>[\d.]+)"
                          r"\s+(?P<max>[\d.]+)\s*$")


@dataclass
class Ceiling:
    runs_per_s: float  # median
    runs_per_s_range: tuple[float, float]
    latency_ms: float | None  # median of the W=1 p50s
    seconds: float


def run_ceiling(path: Path, base: Path) -> Ceiling | None:
    """`ceiling.py --quick` with the venv's python, its figures parsed from the table it prints last."""
    if not path.is_file():
        print(f"ceiling: {path} not found; piwf/ceiling not printed (--ceiling PATH to name it)")
        return None
    out_dir = base / "ceiling"
    out_dir.mkdir()
    started = time.perf_counter()
    try:
        done = subprocess.run([venv_python(), str(path), "--quick", "--dir", str(out_dir), "--results", str(out_dir)],
                              capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"ceiling: {path} did not run ({exc}); piwf/ceiling not printed")
        return None
    seconds = time.perf_counter() - started
    rows: dict[tuple[str, str], tuple[float, float, float]] = {}
    for line in done.stdout.splitlines():
        match = _CEILING_ROW.match(line)
        if match:
            rows[(match["config"], match["metric"])] = (float(match["median"]), float(match["min"]),
                                                        float(match["max"]))
    throughput = rows.get((CEILING_THROUGHPUT, "runs_per_s"))
    if done.returncode != 0 or throughput is None:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        print(f"ceiling: {path} exited {done.returncode} without a '{CEILING_THROUGHPUT}' runs_per_s row ({tail}); "
              f"piwf/ceiling not printed")
        return None
    latency = rows.get((CEILING_LATENCY, "run_latency_ms_p50"))
    return Ceiling(throughput[0], (throughput[1], throughput[2]), latency[0] if latency else None, seconds)


# --- summary -------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def print_summary(piwf: dict[int, dict[str, Phase]], dbos: dict[int, DbosFigure], ceiling: Ceiling | None,
                  done_via: str, pg: dict[int, dict[str, Phase]] | None = None) -> None:
    """Each target of issue 21 with the figure of this run, and the function form's (issue 33: ≥ 0.9× the
    graph's runs/s). `piwf`: the SQLite hosts' phases per m; `pg`: the PostgreSQL hosts' (with
    --database), compared with them."""
    print("targets of issue 21, figures from this run" + (" (SQLite hosts unless said)" if pg is not None else "")
          + ":")
    eight = piwf.get(8)
    if eight is None:
        print("  socket, max_workers 8: not measured (--workers has no 8)")
    else:
        for key, name in (("closed", "closed loop, 8 clients"), ("burst", f"burst, {eight['burst'].runs} runs up "
                                                                          f"front")):
            phase = eight[key]
            parts = [f"  socket, max_workers 8, {name}: {phase.rate:.0f} runs/s"]
            if 8 in dbos:
                ratio = phase.rate / dbos[8].rate
                parts.append(f" = {ratio:.2f}× DBOS's {dbos[8].rate:.0f} (8 threads; target ≥ 6×: "
                             f"{verdict(ratio >= 6)})")
            else:
                parts.append(" (DBOS not measured)")
            if ceiling is not None:
                share = phase.rate / ceiling.runs_per_s
                parts.append(f", {share:.0%} of the ceiling's {ceiling.runs_per_s:.0f} (target ≥ 25 %: "
                             f"{verdict(share >= 0.25)})")
            else:
                parts.append(", ceiling not measured")
            print("".join(parts))
        for key, name in (("closed", "closed loop"), ("burst", "burst")):
            phase = eight[key]
            host_ms = phase.cpu_ms(phase.cpu.host_s)
            print(f"  CPU per run, max_workers 8, {name}: host + workers {phase.total_cpu_ms:.2f} ms (host "
                  f"{host_ms:.2f} + workers {phase.cpu_ms(phase.cpu.workers_s):.2f}; target ≤ 1.5 ms: "
                  f"{verdict(phase.total_cpu_ms <= 1.5)}); host alone {host_ms:.2f} ms (target ≤ 1 ms: "
                  f"{verdict(host_ms <= 1.0)})")
        print(f"    (the closed loop's host CPU includes what seeing runs done costs it, --done-via {done_via}; "
              f"in the burst that is one host.status every 20 ms)")
    one = piwf.get(1)
    if one is None:
        print("  1 worker, 1 client: not measured (--workers has no 1)")
    else:
        closed = one["closed"]
        p50 = pct(closed.latencies_s, 0.5) * 1000
        floor = f"; the ceiling's W=1 p50 is {ceiling.latency_ms:.1f} ms" if ceiling and ceiling.latency_ms else ""
        if 1 in dbos:
            ratio = closed.rate / dbos[1].rate
            dbos_p50 = pct(dbos[1].latencies_s, 0.5) * 1000
            print(f"  1 worker, 1 client (closed loop, max_workers 1): {closed.rate:.0f} runs/s = {ratio:.2f}× DBOS's "
                  f"{dbos[1].rate:.0f} (1 thread; target ≥ 1.5×: {verdict(ratio >= 1.5)}); start→done p50 "
                  f"{p50:.1f} ms = {p50 / dbos_p50:.2f}× DBOS's {dbos_p50:.1f} ms (target ≤ 0.7×: "
                  f"{verdict(p50 <= 0.7 * dbos_p50)}){floor}")
        else:
            print(f"  1 worker, 1 client (closed loop, max_workers 1): {closed.rate:.0f} runs/s, start→done p50 "
                  f"{p50:.1f} ms (DBOS not measured){floor}")
    if pg is None:
        print("  PostgreSQL, one host, ≥ 0.6× SQLite's runs/s: not measured (SQLite only); `--database pg-temp` "
              "(or a postgresql:// URL) measures the same phases on PostgreSQL and on SQLite in one run")
    else:
        print("  PostgreSQL, one host, runs/s / SQLite's in this run (target ≥ 0.6× each):")
        for workers, phases in pg.items():
            for key, name in (("closed", "closed loop"), ("burst", "burst")):
                phase, base = phases[key], piwf[workers][key]
                ratio = phase.rate / base.rate
                retries = f"; {phase.conflicts.describe()}" if phase.conflicts is not None else ""
                trips = f"; {phase.round_trips:.1f} round trips per run" if phase.round_trips is not None else ""
                print(f"    max_workers {workers}, {name}: {phase.rate:.0f} / {base.rate:.0f} = {ratio:.2f}× "
                      f"({verdict(ratio >= 0.6)}){retries}{trips}")
    hosts = [("", piwf)] + ([(" (PostgreSQL)", pg)] if pg is not None else [])
    measured = [(tag, m, phases) for tag, by_m in hosts for m, phases in by_m.items() if "closed_function" in phases]
    if not measured:
        print("  function workflow ≥ 0.9× the graph's runs/s: not measured (--no-function)")
    else:
        print("  function workflow (3 steps and its return), runs/s / the 3-node graph's on the same host in this run "
              "(target ≥ 0.9× each):")
        for tag, workers, phases in measured:
            for key, name in (("closed", "closed loop"), ("burst", "burst")):
                function, graph = phases[key + "_function"], phases[key]
                ratio = function.rate / graph.rate
                print(f"    max_workers {workers}{tag}, {name}: {function.rate:.0f} / {graph.rate:.0f} = {ratio:.2f}× "
                      f"({verdict(ratio >= 0.9)}); CPU per run host + workers {function.total_cpu_ms:.2f} / "
                      f"{graph.total_cpu_ms:.2f} ms")
    print("  replay of a function run that resumes after a wait: measured by bench/replay.py, not here")
    print("  fan-out, sleepers and messages: measured by bench/fanout.py, bench/sleepers.py and bench/messages.py, "
          "not here")


# --- main ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="runs per phase (default 300)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--client-mode", choices=["thread", "process"], default="thread",
                        help="closed-loop clients as threads of this process (default) or spawned processes")
    parser.add_argument("--done-via", choices=["watch", "runs", "poll", "db"], default="watch",
                        help="how a closed-loop client sees its run done (default: a `run` watch)")
    parser.add_argument("--poll-ms", type=float, default=1.0, help="run.get interval for --done-via poll")
    parser.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS comparison")
    parser.add_argument("--no-function", action="store_true",
                        help="skip the function workflow's phases (the 3-step durable function beside the graph)")
    parser.add_argument("--dbos-journal", choices=["wal", "delete"], default="wal")
    parser.add_argument("--ceiling", type=Path, default=REPO.parent / "shared" / "bench" / "ceiling.py",
                        help="ceiling.py to run with --quick (default: <repo>/../shared/bench/ceiling.py)")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the ceiling")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="record two py-spy profiles of the host during extra bursts of the largest m into DIR")
    parser.add_argument("--profile-runs", type=int, default=1000, help="runs in each profiled burst (default 1000)")
    parser.add_argument("--dir", default=None, help="directory for state dirs and databases (default: a temp dir)")
    parser.add_argument("--runners", type=int, nargs="+", default=None, metavar="K",
                        help="instead of the phases above: the burst with K runner hosts (docs/runners.md) beside "
                        "the active host, for each K given (0..3), each host with the largest --workers; on "
                        "--database, else on a SQLite file they share; prints per-host CPU per run")
    parser.add_argument("--database", default=None, metavar="URL|pg-temp",
                        help="run the hosts on PostgreSQL: a fresh database per host on the server this "
                        "postgresql:// URL reaches (its role needs CREATEDB), or `pg-temp` for a temporary "
                        "cluster started from /usr/lib/postgresql/*/bin (default: SQLite in the state dir)")
    args = parser.parse_args()
    if args.database is not None and args.done_via == "db":
        parser.error("--done-via db reads a SQLite state.db: use watch, runs or poll with --database")
    if args.done_via == "runs" and args.client_mode == "process":
        parser.error("--done-via runs shares one watch between thread clients: use it with --client-mode thread")

    base = Path(tempfile.mkdtemp(prefix="piwf-bench-tp-", dir=args.dir))
    began = time.perf_counter()
    try:
        workflow_file = base / "trivial3.py"
        workflow_file.write_text(WORKFLOW_SOURCE)
        spec = f"{workflow_file}:trivial"
        function_spec = None
        if not args.no_function:
            function_file = base / "trivial3_function.py"
            function_file.write_text(FUNCTION_WORKFLOW_SOURCE)
            function_spec = f"{function_file}:trivial_function"
        print(f"{args.runs} runs per phase, 3 compute nodes per run"
              f"{'' if function_spec is None else ' (and per phase the same with a 3-step workflow function)'}; "
              f"{os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python {sys.version.split()[0]}, SQLite "
              f"{sqlite3.sqlite_version}, state under {base}")
        ceiling = None if args.no_ceiling else run_ceiling(args.ceiling, base)
        if ceiling is not None:
            latency = f", latency W=1 p50 {ceiling.latency_ms:.2f} ms" if ceiling.latency_ms is not None else ""
            print(f"ceiling ({args.ceiling} --quick, {ceiling.seconds:.0f} s): {CEILING_THROUGHPUT} "
                  f"{ceiling.runs_per_s:.0f} runs/s median (min {ceiling.runs_per_s_range[0]:.0f}, max "
                  f"{ceiling.runs_per_s_range[1]:.0f}){latency}")
        dbos = None
        if args.no_dbos:
            print("DBOS: skipped (--no-dbos)")
        else:
            dbos = start_dbos(base, args.dbos_journal)
            if dbos is not None:
                print(f"{dbos.description}; each concurrency is measured right after piwf's")
        piwf: dict[int, dict[str, Phase]] = {}
        pg: dict[int, dict[str, Phase]] | None = None if args.database is None else {}
        dbos_figures: dict[int, DbosFigure] = {}
        databases = None if args.database is None else PgDatabases(args.database)
        if databases is not None and args.runners is None:
            print(f"hosts on SQLite and on PostgreSQL ({databases.label}): per m, a fresh SQLite host, then a fresh "
                  f"PostgreSQL host (its own database), then DBOS")
        if args.runners is not None:
            try:
                rates = {k: bench_runners(base, spec, max(args.workers), k, args, databases).rate
                         for k in args.runners}
            finally:
                if databases is not None:
                    databases.close()
            print("runs/s by runner hosts: " + ", ".join(f"K={k}: {rate:.1f}" for k, rate in rates.items()))
            return
        tag = " (SQLite)" if pg is not None else ""
        try:
            for workers in args.workers:
                phases = piwf[workers] = bench_piwf(base, spec, workers, args, function_spec=function_spec)
                if pg is not None:
                    pg_phases = pg[workers] = bench_piwf(base, spec, workers, args, databases, function_spec)
                    print(f"piwf PostgreSQL / SQLite at {workers}: closed loop "
                          f"{pg_phases['closed'].rate / phases['closed'].rate:.2f}×, burst "
                          f"{pg_phases['burst'].rate / phases['burst'].rate:.2f}×")
                if dbos is not None:
                    figure = dbos_figures[workers] = dbos.measure(args.runs, workers)
                    closed, flood = phases["closed"], phases["burst"]
                    print(f"piwf{tag} / DBOS at {workers}: throughput {closed.rate / figure.rate:.2f}× (burst "
                          f"{flood.rate / figure.rate:.2f}×), p50 latency "
                          f"{pct(closed.latencies_s, 0.5) / pct(figure.latencies_s, 0.5):.2f}×")
                if ceiling is not None and workers == 8:
                    print(f"piwf{tag} / ceiling at 8: closed loop {phases['closed'].rate / ceiling.runs_per_s:.0%}, burst "
                          f"{phases['burst'].rate / ceiling.runs_per_s:.0%}")
        finally:
            if dbos is not None:
                dbos.close()
            if databases is not None:
                databases.close()
        print_summary(piwf, dbos_figures, ceiling, args.done_via, pg)
        print(closing_line(began))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
