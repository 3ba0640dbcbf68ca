"""The client protocol end to end: a host in its own process, clients talking to its Unix socket.

Every figure goes through `piwf_actors.client.Client` and a real host started
as a subprocess (`bin/piwf-host --state-dir D --max-workers m`, durable:
synchronous=FULL unless --synchronous says otherwise), so the clients' CPU
never shares the host's GIL. Prints, from one run:

  1. requests   round trips/s and p50/p99 latency of `host.status` and of
                `run.get` (of an existing, finished 3-node run) with 1, 8 and
                32 concurrent clients, each on its own connection, each
                sending its next request when the previous answer arrived
                (closed loop) for --seconds. Clients are processes (fork) by
                default; `--client-mode thread` runs them as threads of this
                process instead, `both` prints both. Host CPU is the host
                process's user+sys time over the figure (psutil), per request;
                clients' CPU is their own thread time, per request.
  2. watch      from a node commit to the `run` watch event that first shows
                that node succeeded: one watcher connection per run, opened
                before `run.start`, watching the run as soon as `run.start`
                answers; runs one after another until --commits node commits
                were seen. Latency = event arrival (time.time() here) minus
                the `node_finished` event's created_at from `run.events`
                (time.time() in the host's writer, taken when it starts the
                batch, so the figure includes the commit's fsync). Nodes
                already committed when the watch's first snapshot was taken
                are not counted. For scale: one raw sqlite3 INSERT+COMMIT
                in the same directory and synchronous mode, while a fresh WAL
                file grows and once it is reused.
  3. runs       start→done of trivial 3-node compute runs through the socket,
                one host per --workers value (max_workers=m, warm_workers=m),
                closed loop: m client threads, each `run.start` → wait until
                the run is seen done → next, --runs runs per value after a
                short warm-up. "Seen done" comes from one `runs` watch on a
                separate connection (shared by the clients). Prints runs/s,
                start→done p50/p99 (client wall clock, run.start sent → done
                event here) and created_at → finished_at from `run.get`, and
                host/worker CPU per run. Twice per m (--done-via): the
                `runs` watch sends at most one event per 20 ms (the host
                coalesces a list view's changes), so a run can be seen
                done through it up to 20 ms late, and its events cost the
                host a little; so the same closed loop is repeated with
                completion seen by polling the state database read-only
                from this process every 1 ms instead, which costs the host
                nothing.
                Then what one `runs` watcher costs the host, directly: the
                db-polling loop again, alternately without and with one
                more connection holding a `runs` watch (its events are only
                counted), --pairs times on the same host; the figure is the
                median over the pairs of host CPU per run with the watcher
                minus without (CPU of the host's threads from
                /proc/PID/task/*/schedstat, to the nanosecond: psutil's
                10 ms ticks are too coarse for a fraction of a millisecond
                per run).

Machine busy is the share of all cores in use over the figure (everything on
the machine, not just the bench: other load shows up there); "waited for a
cpu" is the time the host's threads spent runnable but not running, summed
over its threads (/proc schedstat), as a share of the figure's wall time.

Run: .venv/bin/python bench/protocol.py [--seconds 2] [--commits 200] [--runs 120]
     [--workers 1 2 8] [--clients 1 8 32] [--client-mode process|thread|both]
     [--done-via runs|db|both] [--pairs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import WORKFLOW_SOURCE, pct  # noqa: E402  (bench/ is the script's directory)

from piwf_actors.client.connection import Client, HostNotRunning  # noqa: E402

FINAL = ("done", "failed", "cancelled")
WAIT_S = 60.0




def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# --- the host, in its own process ------------------------------------------------------------


class HostProcess:
    def __init__(self, state_dir: Path, max_workers: int, synchronous: str) -> None:
        self.state_dir = state_dir
        self.max_workers = max_workers
        self.socket_path = str(state_dir / "host.sock")
        self._log = open(state_dir.parent / f"{state_dir.name}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", str(max_workers),
             "--synchronous", synchronous, "--log-level", "WARNING"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the socket answers and the scheduler holds max_workers started workers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with Client(socket_path=self.socket_path, retries=0, timeout=5) as client:
                    workers = client.status()["workers"]
                    if workers["idle"] + len(workers["active"]) >= self.max_workers:
                        return
            except HostNotRunning:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"piwf-host not ready within {timeout} s: {self.log_tail()}")

    def cpu(self) -> tuple[float, float]:
        """(host process cpu s, its child processes' cpu s — the workers)."""
        times = self.ps.cpu_times()
        workers = 0.0
        for child in self.ps.children(recursive=True):
            try:
                t = child.cpu_times()
                workers += t.user + t.system
            except psutil.Error:
                pass
        return times.user + times.system, workers

    def thread_cpu(self) -> float:
        """CPU seconds of the host's live threads, to the nanosecond (Linux schedstat, summed).

        Finer than `cpu()` (clock ticks of 10 ms), for differences of a fraction of a millisecond
        per run; the time of threads that already ended is not in it."""
        total = 0.0
        for tid in os.listdir(f"/proc/{self.proc.pid}/task"):
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0]) / 1e9
            except (OSError, IndexError, ValueError):
                continue
        return total

    def runqueue_wait(self) -> float | None:
        """Seconds the host's threads spent runnable but waiting for a CPU (Linux schedstat), summed."""
        total = 0.0
        try:
            tasks = os.listdir(f"/proc/{self.proc.pid}/task")
        except OSError:
            return None
        for tid in tasks:
            try:
                with open(f"/proc/{self.proc.pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                continue
        return total

    def log_tail(self) -> str:
        self._log.flush()
        text = (self.state_dir.parent / f"{self.state_dir.name}.log").read_text(errors="replace")
        return " | ".join(text.strip().splitlines()[-5:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def finish_one(socket_path: str, spec: str) -> str:
    """Start one run and wait until it is done; its run_id."""
    with Client(socket_path=socket_path) as client:
        run_id = client.start(spec, {"i": 0})["run_id"]
        view = client.wait(run_id, timeout=WAIT_S)
        if view["status"] != "done":
            raise RuntimeError(f"run {run_id} ended {view['status']}: {view.get('error')}")
        return run_id


# --- 1. request round trips ---------------------------------------------------------------------


def request_loop(socket_path: str, operation: str, run_id: str | None, seconds: float, go: Any,
                 results: Any) -> None:
    """One client: warm up, wait for the others, then request/answer in a loop for `seconds`."""
    try:
        client = Client(socket_path=socket_path)
        client.connect()
        for _ in range(20):
            client.request(operation, run_id=run_id)
        go.wait()
        latencies = []
        cpu0 = time.thread_time()
        started = time.time()
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        failures = 0
        while now < end:
            answer = client.request(operation, run_id=run_id)
            after = time.perf_counter()
            if not answer.ok:
                failures += 1
            latencies.append(after - now)
            now = after
        finished = time.time()
        cpu = time.thread_time() - cpu0
        client.close()
        results.put((started, finished, latencies, failures, cpu, None))
    except BaseException as exc:  # reported by the parent
        results.put((0.0, 0.0, [], 0, 0.0, f"{type(exc).__name__}: {exc}"))


@dataclass
class RequestFigure:
    operation: str
    clients: int
    mode: str
    count: int
    elapsed_s: float
    latencies_s: list[float]
    failures: int
    host_cpu_s: float
    host_wait_s: float | None
    clients_cpu_s: float
    machine_busy: float

    def line(self) -> str:
        ms = [s * 1000 for s in self.latencies_s]
        rate = self.count / self.elapsed_s
        wait = "" if self.host_wait_s is None else f", waited for a cpu {self.host_wait_s / self.elapsed_s:4.0%}"
        return (f"  {self.operation:<11} {self.clients:3d} client{'s' if self.clients > 1 else ' '} ({self.mode:<7}) "
                f"{rate:7,.0f} req/s  p50 {pct(ms, 0.5):6.2f} ms  p99 {pct(ms, 0.99):6.2f} ms  "
                f"host {self.host_cpu_s * 1e6 / self.count:4.0f} µs/req ({self.host_cpu_s / self.elapsed_s:4.0%} of a "
                f"core{wait}), clients {self.clients_cpu_s * 1e6 / self.count:4.0f} µs/req, machine busy "
                f"{self.machine_busy:4.0%}" + (f"   {self.failures} NOT ok" if self.failures else ""))


def request_figure(host: HostProcess, operation: str, run_id: str | None, clients: int, mode: str,
                   seconds: float) -> RequestFigure:
    if mode == "process":
        ctx = multiprocessing.get_context("fork")  # this process runs no threads here; the host is elsewhere
        go: Any = ctx.Barrier(clients + 1)
        results: Any = ctx.Queue()
        workers: list[Any] = [ctx.Process(target=request_loop, args=(host.socket_path, operation, run_id, seconds,
                                                                     go, results), daemon=True)
                              for _ in range(clients)]
    else:
        import queue

        go = threading.Barrier(clients + 1)
        results = queue.Queue()
        workers = [threading.Thread(target=request_loop, args=(host.socket_path, operation, run_id, seconds, go,
                                                               results), daemon=True)
                   for _ in range(clients)]
    for worker in workers:
        worker.start()
    go.wait(timeout=60)
    cpu_before, _ = host.cpu()
    wait_before = host.runqueue_wait()
    machine_before = psutil.cpu_times()
    collected = [results.get(timeout=seconds + 60) for _ in range(clients)]
    machine_after = psutil.cpu_times()
    wait_after = host.runqueue_wait()
    cpu_after, _ = host.cpu()
    for worker in workers:
        worker.join(timeout=30)
    errors = [error for *_, error in collected if error]
    if errors:
        raise RuntimeError(f"{operation} client failed: {errors[0]}")
    latencies = [s for _, _, lat, _, _, _ in collected for s in lat]
    elapsed = max(f for _, f, *_ in collected) - min(s for s, *_ in collected)
    idle = (machine_after.idle + machine_after.iowait) - (machine_before.idle + machine_before.iowait)
    total = sum(machine_after) - sum(machine_before)
    return RequestFigure(operation, clients, mode, len(latencies), elapsed, latencies,
                         sum(f for _, _, _, f, _, _ in collected), cpu_after - cpu_before,
                         None if wait_before is None or wait_after is None else wait_after - wait_before,
                         sum(c for *_, c, _ in collected), 1 - idle / total if total > 0 else 0.0)


# --- 2. watch latency ----------------------------------------------------------------------------


def watch_latency(host: HostProcess, spec: str, commits: int) -> tuple[list[float], list[float], int, int]:
    """(node commit → event latencies s, run done commit → event s, nodes skipped, runs)."""
    samples: list[float] = []
    done_samples: list[float] = []
    skipped = 0
    runs = 0
    control = Client(socket_path=host.socket_path)
    control.connect()
    try:
        while len(samples) < commits:
            runs += 1
            if runs > 4 * commits:
                raise RuntimeError(f"only {len(samples)} node commits observed after {runs} runs")
            with Client(socket_path=host.socket_path) as watcher:
                run_id = control.start(spec, {"i": runs})["run_id"]
                arrivals: list[tuple[float, dict[str, Any]]] = []
                for event in watcher.watch("run", run_id=run_id, timeout=WAIT_S):
                    arrivals.append((time.time(), event.get("payload") or {}))
                    if arrivals[-1][1].get("status") in FINAL:
                        break
            answer = control.request("run.events", run_id=run_id)
            if not answer.ok:
                raise RuntimeError(f"run.events {run_id}: {answer.outcome} {answer.error}")
            for record in answer.receipt["events"]:
                if record["kind"] == "run_finished":
                    for index, (arrived, view) in enumerate(arrivals):
                        if view.get("status") in FINAL:
                            if index > 0:
                                done_samples.append(arrived - record["created_at"])
                            break
                if record["kind"] != "node_finished":
                    continue
                for index, (arrived, view) in enumerate(arrivals):
                    node = next((n for n in view.get("nodes", ()) if n["node_id"] == record["node_id"]), None)
                    if node is not None and node["status"] == "succeeded":
                        if index == 0:
                            skipped += 1  # committed before the watch's first snapshot
                        else:
                            samples.append(arrived - record["created_at"])
                        break
    finally:
        control.close()
    return samples, done_samples, skipped, runs


def raw_commit_ms(directory: Path, synchronous: str, count: int = 100) -> tuple[list[float], list[float]]:
    """One INSERT + COMMIT per transaction on a WAL database in `directory`: (WAL growing, WAL reused) ms.

    While a fresh WAL file grows, every commit's fsync also has to persist the
    file's new size (a filesystem journal commit on ext4); once the WAL has
    been checkpointed and restarts from its beginning, commits overwrite pages
    in place, which can be cheaper. A fresh state dir (as here) starts in the
    first regime; a long-lived host is mostly in the second. Both depend on
    what else is writing to the disk.
    """
    path = directory / "raw-commit.db"
    conn = sqlite3.connect(path, isolation_level=None)

    def commit(i: int) -> float:
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (payload, created_at) VALUES (?, ?)", (f'{{"i":{i}}}', time.time()))
        conn.execute("COMMIT")
        return (time.perf_counter() - t0) * 1000

    try:
        conn.execute("PRAGMA journal_mode=wal")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, payload TEXT, created_at REAL)")
        growing = [commit(i) for i in range(count)]  # far below the 1000-page auto-checkpoint
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=20")  # from here the WAL wraps every ~20 commits
        for i in range(50):  # grow it to its working size once, not counted
            commit(i)
        reused = [commit(i) for i in range(count)]
        return growing, reused
    finally:
        conn.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)


# --- 3. runs start → done --------------------------------------------------------------------------


class DoneWatcher:
    """One `runs` watch on its own connection; wakes the client waiting for a run when it is final."""

    def __init__(self, socket_path: str) -> None:
        self._client = Client(socket_path=socket_path)
        self._client.connect()
        self._cond = threading.Condition()
        self._final: dict[str, tuple[str, float]] = {}  # run_id -> (status, perf_counter seen)
        self.events = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="bench-runs-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for event in self._client.watch("runs"):
                seen = time.perf_counter()
                self.events += 1
                with self._cond:
                    for run in (event.get("payload") or {}).get("runs", ()):
                        if run["status"] in FINAL and run["run_id"] not in self._final:
                            self._final[run["run_id"]] = (run["status"], seen)
                    self._cond.notify_all()
        except BaseException as exc:  # the host closed the connection at stop, or a real failure
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def wait(self, run_id: str, timeout: float = WAIT_S) -> tuple[str, float]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while run_id not in self._final:
                if self._error is not None:
                    raise RuntimeError(f"runs watch failed: {self._error}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"run {run_id} not seen done within {timeout} s")
                self._cond.wait(remaining)
            return self._final[run_id]

    def close(self) -> None:
        self._client.close()


class DbPoller:
    """Sees runs finish by polling the state database read-only from this process: no host CPU spent on it."""

    def __init__(self, db_path: Path, interval_s: float = 0.001) -> None:
        self._conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)
        self._interval_s = interval_s
        self._cond = threading.Condition()
        self._waiting: set[str] = set()
        self._final: dict[str, tuple[str, float]] = {}
        self._stop = threading.Event()
        self.events = 0  # polls that found a run final
        self._thread = threading.Thread(target=self._run, name="bench-db-poll", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            with self._cond:
                waiting = tuple(self._waiting)
            if not waiting:
                continue
            rows = self._conn.execute(f"SELECT run_id, status FROM run WHERE run_id IN ({','.join('?' * len(waiting))})",
                                      waiting).fetchall()
            seen = time.perf_counter()
            with self._cond:
                for run_id, status in rows:
                    if status in FINAL:
                        self._final[run_id] = (status, seen)
                        self._waiting.discard(run_id)
                        self.events += 1
                self._cond.notify_all()

    def wait(self, run_id: str, timeout: float = WAIT_S) -> tuple[str, float]:
        deadline = time.monotonic() + timeout
        with self._cond:
            self._waiting.add(run_id)
            while run_id not in self._final:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"run {run_id} not seen done within {timeout} s")
                self._cond.wait(remaining)
            return self._final[run_id]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._conn.close()


class EventSink:
    """The watcher whose cost is measured: one `runs` watch on its own connection, events only counted."""

    def __init__(self, socket_path: str) -> None:
        self._client = Client(socket_path=socket_path)
        self._client.connect()
        self.events = 0
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-runs-sink", daemon=True)
        self._thread.start()
        if not self._first.wait(WAIT_S):
            raise TimeoutError("the `runs` watch sent no first event")

    def _run(self) -> None:
        with contextlib.suppress(Exception):  # ends when close() closes the connection
            for _ in self._client.watch("runs"):
                self.events += 1
                self._first.set()

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=10)


@dataclass
class WatcherCost:
    without_ms: list[float]  # host cpu ms per run, per pair
    with_ms: list[float]
    events_per_run: list[float]

    def line(self) -> str:
        diffs = sorted(w - o for o, w in zip(self.without_ms, self.with_ms, strict=True))
        pairs = ", ".join(f"{o:.2f}→{w:.2f}" for o, w in zip(self.without_ms, self.with_ms, strict=True))
        return (f"    one `runs` watcher costs the host {pct(diffs, 0.5):5.2f} ms cpu/run (median of {len(diffs)} pairs, "
                f"from {diffs[0]:.2f} to {diffs[-1]:.2f}; with minus without, done seen by polling the db; "
                f"host ms/run per pair {pairs}; "
                f"{sum(self.events_per_run) / len(self.events_per_run):3.1f} `runs` events/run)")


def watcher_cost(host: HostProcess, spec: str, runs: int, clients: int, pairs: int) -> WatcherCost:
    """Host CPU per run of the db-polling loop without, then with, one extra `runs` watcher, `pairs` times."""
    poller = DbPoller(host.state_dir / "state.db")
    cost = WatcherCost([], [], [])
    try:
        for _ in range(pairs):
            without = closed_loop(host, poller, spec, runs, clients)
            sink = EventSink(host.socket_path)
            try:
                seen_before = sink.events
                with_sink = closed_loop(host, poller, spec, runs, clients)
                events = sink.events - seen_before
            finally:
                sink.close()
            cost.without_ms.append(without.host_thread_cpu_s * 1000 / without.runs)
            cost.with_ms.append(with_sink.host_thread_cpu_s * 1000 / with_sink.runs)
            cost.events_per_run.append(events / with_sink.runs)
    finally:
        poller.close()
    return cost


@dataclass
class RunsFigure:
    workers: int
    runs: int
    elapsed_s: float
    latencies_s: list[float]
    db_latencies_s: list[float]
    not_done: int
    host_cpu_s: float
    host_thread_cpu_s: float
    workers_cpu_s: float
    watch_events: int
    machine_busy: float


def closed_loop(host: HostProcess, watcher: DoneWatcher | DbPoller, spec: str, runs: int,
                clients: int) -> RunsFigure:
    per_client = [runs // clients + (1 if n < runs % clients else 0) for n in range(clients)]
    results: list[tuple[float, float, str, str]] = []  # (started, seen, run_id, status)
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(clients + 1)

    def client(count: int) -> None:
        try:
            with Client(socket_path=host.socket_path) as conn:
                go.wait()
                for i in range(count):
                    started = time.perf_counter()
                    run_id = conn.start(spec, {"i": i})["run_id"]
                    status, seen = watcher.wait(run_id)
                    with lock:
                        results.append((started, seen, run_id, status))
        except BaseException as exc:  # reported below
            errors.append(exc)
            go.abort()

    threads = [threading.Thread(target=client, args=(c,), name=f"bench-client-{n}", daemon=True)
               for n, c in enumerate(per_client)]
    for t in threads:
        t.start()
    events_before = watcher.events
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed: raised below
        go.wait(timeout=60)
    cpu_before = host.cpu()
    threads_before = host.thread_cpu()
    machine_before = psutil.cpu_times()
    began = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    elapsed = max(seen for _, seen, _, _ in results) - began
    cpu_after = host.cpu()
    threads_after = host.thread_cpu()
    machine_after = psutil.cpu_times()
    idle = (machine_after.idle + machine_after.iowait) - (machine_before.idle + machine_before.iowait)
    total = sum(machine_after) - sum(machine_before)
    db = []
    with Client(socket_path=host.socket_path) as conn:
        for _, _, run_id, _ in results:
            view = conn.get(run_id)
            if view.get("finished_at") is not None:
                db.append(view["finished_at"] - view["created_at"])
    return RunsFigure(clients, len(results), elapsed, [seen - started for started, seen, _, _ in results], db,
                      sum(1 for *_, status in results if status != "done"), cpu_after[0] - cpu_before[0],
                      threads_after - threads_before, cpu_after[1] - cpu_before[1], watcher.events - events_before,
                      1 - idle / total if total > 0 else 0.0)


# --- main -------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per request figure (default 2)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--client-mode", choices=["process", "thread", "both"], default="process")
    parser.add_argument("--commits", type=int, default=200, help="node commits for the watch figure (default 200)")
    parser.add_argument("--runs", type=int, default=120, help="runs per max_workers value (default 120)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--done-via", choices=["runs", "db", "both"], default="both",
                        help="how section 3 sees runs finish: a `runs` watch, polling the db, or both (default)")
    parser.add_argument("--pairs", type=int, default=5,
                        help="without/with pairs for the cost of one `runs` watcher (default 5; 0 skips it)")
    parser.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    parser.add_argument("--dir", default=None, help="directory for the state dirs (default: a temp dir)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="piwf-bench-proto-", dir=args.dir))
    total = time.perf_counter()
    try:
        workflow_file = base / "trivial3.py"
        workflow_file.write_text(WORKFLOW_SOURCE)
        spec = f"{workflow_file}:trivial"
        print(f"host: bin/piwf-host subprocess (synchronous={args.synchronous}); clients: this process (pid "
              f"{os.getpid()}), section 1 from {args.client_mode} clients, 2 and 3 from threads; {os.cpu_count()} cores, "
              f"load average {load()}, python {sys.version.split()[0]}, state under {base}")

        # 1 + 2 share one host (max_workers=1).
        host = HostProcess(base / "requests", 1, args.synchronous)
        try:
            host.wait_ready()
            run_id = finish_one(host.socket_path, spec)
            modes = ["process", "thread"] if args.client_mode == "both" else [args.client_mode]
            print(f"1. request round trips, closed loop, {args.seconds:g} s per figure, one connection per client "
                  f"(host max_workers=1, idle; run.get of a done 3-node run)")
            for operation, rid in (("host.status", None), ("run.get", run_id)):
                for clients in args.clients:
                    for mode in modes:
                        print(request_figure(host, operation, rid, clients, mode, args.seconds).line(), flush=True)

            samples, done_samples, skipped, runs = watch_latency(host, spec, args.commits)
            ms = [s * 1000 for s in samples]
            done_ms = [s * 1000 for s in done_samples]
            raw = raw_commit_ms(base, args.synchronous)
            print(f"2. watch latency, node_finished created_at (writer batch start) → `run` watch event received, "
                  f"{runs} runs one at a time")
            print(f"  node commits   p50 {pct(ms, 0.5):7.2f} ms  p90 {pct(ms, 0.9):7.2f} ms  p99 {pct(ms, 0.99):7.2f} ms"
                  f"  max {max(ms):7.2f} ms  (n={len(ms)}; {skipped} committed before the watch's first snapshot, "
                  f"not counted)")
            print(f"  run done       p50 {pct(done_ms, 0.5):7.2f} ms  p99 {pct(done_ms, 0.99):7.2f} ms  "
                  f"(the last node's commit, status done, n={len(done_ms)})")
            growing, reused = raw
            print(f"  for scale, raw sqlite3 INSERT+COMMIT in the same dir, synchronous={args.synchronous}: "
                  f"WAL file growing p50 {pct(growing, 0.5):5.2f} ms p99 {pct(growing, 0.99):5.2f} ms; "
                  f"WAL reused p50 {pct(reused, 0.5):5.2f} ms p99 {pct(reused, 0.99):5.2f} ms")
        finally:
            host.stop()

        print(f"3. runs start→done through the socket, closed loop: m client threads (run.start, wait until the run "
              f"is seen done, next), {args.runs} runs per m and method after a warm-up, same host for both methods")
        methods = ["runs", "db"] if args.done_via == "both" else [args.done_via]
        for workers in args.workers:
            host = HostProcess(base / f"runs-{workers}", workers, args.synchronous)
            figures = {}
            cost: WatcherCost | None = None
            try:
                host.wait_ready()
                for method in methods:
                    watcher: DoneWatcher | DbPoller = (DoneWatcher(host.socket_path) if method == "runs"
                                                       else DbPoller(host.state_dir / "state.db"))
                    try:
                        closed_loop(host, watcher, spec, max(2 * workers, 4), workers)  # warm-up, not reported
                        figures[method] = closed_loop(host, watcher, spec, args.runs, workers)
                    finally:
                        watcher.close()
                if args.pairs > 0:
                    cost = watcher_cost(host, spec, args.runs, workers, args.pairs)
            finally:
                host.stop()
            print(f"  max_workers={workers}, {workers} client{'s' if workers > 1 else ''}:")
            for method, fig in figures.items():
                lat = [s * 1000 for s in fig.latencies_s]
                db = [s * 1000 for s in fig.db_latencies_s]
                failed = f", {fig.not_done} NOT done" if fig.not_done else ""
                label = "done seen via `runs` watch" if method == "runs" else "done seen by polling the db"
                events = f"; {fig.watch_events / fig.runs:3.1f} `runs` events/run" if method == "runs" else ""
                print(f"    {label:<28} {fig.runs / fig.elapsed_s:6.1f} runs/s   start→done p50 {pct(lat, 0.5):6.1f} ms  "
                      f"p99 {pct(lat, 0.99):6.1f} ms   created_at→finished_at p50 {pct(db, 0.5):6.1f} ms  "
                      f"p99 {pct(db, 0.99):6.1f} ms{failed}")
                print(f"    {'':<28} cpu ms/run: host {fig.host_cpu_s * 1000 / fig.runs:5.2f}, workers "
                      f"{fig.workers_cpu_s * 1000 / fig.runs:4.2f}; host busy {fig.host_cpu_s / fig.elapsed_s:4.0%} of a "
                      f"core; machine busy {fig.machine_busy:4.0%}{events}")
            if cost is not None:
                print(cost.line())
        print(f"total {time.perf_counter() - total:.0f} s; load average now {load()}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
