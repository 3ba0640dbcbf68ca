"""Growth: what 100,000 finished runs and 1,000,000 events cost a host, next to an empty state.

Every latency goes through `piwf_actors.client.Client` over the Unix socket of a real host started
as a subprocess (`bin/piwf-host --state-dir D --max-workers 2`, durable defaults), one client, one
request after the other (closed loop), after a warm-up. Prints, from one run:

  1. latency   p50/p99 of `run.start` of a trivial 3-node run (bench/common.py; the timed figure
               is the call only: after each start the bench waits, untimed, until the run is
               done, so every start meets an idle host), then `host.status`, `run.get` of the
               newest run and `run.list` (default limit 100, no filter), for the empty state and
               for the big one, and the ratio big/empty. "Empty" is a new state holding only the
               runs this measurement starts (--starts + 6, so run.list answers a full page there
               too).
  2. bytes     bytes per trivial run: what the real runs of the fill added to each table and
               index (SQLite's `dbstat`: pages used, and the payload bytes in them), divided by
               the number of runs; and the big state's file size per run.
  3. memory    RSS and USS (psutil) of the idle host and of each warm worker, on the empty state
               and on the big one; the host's RSS while it ran the real runs of the fill (growth
               per run) and after the big state has been served for a while (the latency loops
               and a batch of further real runs): nothing should grow with the runs served.

How the big state is filled: first a few thousand real trivial runs go through the host
(`run.start` over the socket, run by its workers, 3 compute nodes each: 10 events, 3 attempts,
4 worker messages, ...). Then the host is stopped and those runs are multiplied with SQL
`INSERT … SELECT` into every table that holds rows of a run (run, run_event, node_attempt,
run_worker, run_generation, worker_message, host_command), under fresh time-ordered ids (runs,
attempts, launch ids, idempotency keys), with their times moved back so the copies are older
than the real runs, until there are --runs runs and --events events. Blob references (workflow
source, inputs, outputs) are copied as they are and stay valid (the copies share the blobs of
the runs they copy). The `run_count` counters follow by their triggers. `state verify` then
checks the filled file (printed, with how long it took), and a host is started on it.

Run: .venv/bin/python bench/growth.py [--quick] [--runs 100000] [--events 1000000]
     [--real-runs 3000] [--calls 2000] [--starts 300] [--keep]
`--quick`: 20,000 runs and 200,000 events from 1,000 real runs, fewer calls (about a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import WORKFLOW_SOURCE, pct  # noqa: E402  (bench/ is the script's directory)

from piwf_actors.client.connection import Client, HostNotRunning  # noqa: E402
from piwf_actors.ids import new_id  # noqa: E402
from piwf_actors.store import state_report  # noqa: E402

FINAL = ("done", "failed", "cancelled")
MAX_WORKERS = 2
MIB = 1024 * 1024


# --- the host, in its own process ------------------------------------------------------------------


class HostProcess:
    """`bin/piwf-host` on a state directory; its log goes next to the directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.socket_path = str(state_dir / "host.sock")
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115  (closed in stop)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", str(MAX_WORKERS),
             "--log-level", "WARNING"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Until the socket answers and every worker slot holds a started worker; seconds since spawn."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with Client(socket_path=self.socket_path, retries=0, timeout=10) as client:
                    workers = client.status()["workers"]
                    if workers["idle"] + len(workers["active"]) >= MAX_WORKERS:
                        return time.perf_counter() - self.started
            except HostNotRunning:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"piwf-host not ready within {timeout} s: {self.log_tail()}")

    def log_tail(self) -> str:
        self._log.flush()
        return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-5:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextlib.contextmanager
def running_host(state_dir: Path) -> Iterator[HostProcess]:
    host = HostProcess(state_dir)
    try:
        yield host
    finally:
        host.stop()


# --- memory ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    rss: int
    uss: int

    def __str__(self) -> str:
        return f"RSS {self.rss / MIB:6.1f} MiB  USS {self.uss / MIB:6.1f} MiB"


def memory(pid: int) -> Memory:
    info = psutil.Process(pid).memory_full_info()
    return Memory(info.rss, info.uss)


def worker_pids(client: Client) -> list[int]:
    return list(client.status()["workers"].get("idle_pids") or [])


def print_memory(label: str, host: HostProcess, client: Client) -> Memory:
    """The host's memory (with its thread and file-descriptor counts: neither may grow with runs)
    and each warm worker's."""
    host_memory = memory(host.proc.pid)
    print(f"  {label:<34} host     {host_memory}  threads {host.ps.num_threads()}  fds {host.ps.num_fds()}")
    for pid in worker_pids(client):
        with contextlib.suppress(psutil.Error):
            print(f"  {'':<34} worker   {memory(pid)}  (pid {pid})")
    return host_memory


# --- latency ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    p50_ms: float
    p99_ms: float
    calls: int


def timed_calls(call: Callable[[], Any], count: int, warmup: int) -> Figure:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return Figure(pct(samples, 0.50) * 1000, pct(samples, 0.99) * 1000, count)


def wait_done(client: Client, run_id: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.request("run.get", run_id=run_id)
        if answer.ok and answer.receipt["status"] in FINAL:
            if answer.receipt["status"] != "done":
                raise RuntimeError(f"run {run_id} ended {answer.receipt['status']}: {answer.receipt.get('error')}")
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} not done within {timeout} s")
        time.sleep(0.002)


def measure(host: HostProcess, spec: str, calls: int, starts: int) -> dict[str, Figure]:
    """The four figures, on one connection (a second one waits for each started run).

    run.start goes first, so that run.list has a full page (its default limit, 100) to answer on
    the empty state too: the comparison is of what the history costs, not of page sizes."""
    with Client(socket_path=host.socket_path) as client, Client(socket_path=host.socket_path) as waiter:

        def ok(operation: str, payload: dict[str, Any] | None = None, run_id: str | None = None) -> Any:
            answer = client.request(operation, payload, run_id=run_id)
            if not answer.ok:
                raise RuntimeError(f"{operation}: {answer.outcome} {answer.error}")
            return answer.receipt

        samples = []
        newest = ""
        for n in range(starts + 5):
            t0 = time.perf_counter()
            newest = ok("run.start", {"workflow": spec, "input": {"start": n}})["run_id"]
            elapsed = time.perf_counter() - t0
            wait_done(waiter, newest)
            if n >= 5:  # the first few warm up
                samples.append(elapsed)
        return {
            "run.start": Figure(pct(samples, 0.50) * 1000, pct(samples, 0.99) * 1000, starts),
            "host.status": timed_calls(lambda: ok("host.status"), calls, 50),
            "run.get": timed_calls(lambda: ok("run.get", run_id=newest), calls, 50),
            "run.list": timed_calls(lambda: ok("run.list", {}), calls, 50),
        }


# --- real runs -------------------------------------------------------------------------------------


def run_real(host: HostProcess, spec: str, count: int, on_progress: Callable[[int], None] | None = None,
             clients: int = 4) -> float:
    """`count` trivial runs through the socket (`clients` closed loops, each start → done); seconds."""
    done = 0
    lock = threading.Lock()
    errors: list[BaseException] = []
    progress_every = max(1, count // 10)

    def loop(share: int) -> None:
        nonlocal done
        try:
            with Client(socket_path=host.socket_path) as client, Client(socket_path=host.socket_path) as waiter:
                for n in range(share):
                    run_id = client.start(spec, {"fill": n, "client": threading.get_ident()})["run_id"]
                    wait_done(waiter, run_id)
                    with lock:
                        done += 1
                        if on_progress is not None and done % progress_every == 0:
                            on_progress(done)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    shares = [count // clients + (1 if i < count % clients else 0) for i in range(clients)]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(share,), daemon=True) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


# --- bytes -----------------------------------------------------------------------------------------


def dbstat(db_path: Path) -> dict[str, tuple[str, int, int]]:
    """b-tree name → (its table, bytes of pages, payload bytes), read from SQLite's dbstat."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        owner = {name: table for name, table in conn.execute("SELECT name, tbl_name FROM sqlite_master")}
        return {name: (owner.get(name, name), int(pages), int(payload)) for name, pages, payload in conn.execute(
            "SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name")}
    finally:
        conn.close()


def print_bytes_per_run(before: dict[str, tuple[str, int, int]], after: dict[str, tuple[str, int, int]],
                        runs: int) -> None:
    grown: dict[str, dict[str, tuple[int, int]]] = {}
    for name, (table, pages, payload) in after.items():
        _t, pages0, payload0 = before.get(name, (table, 0, 0))
        if pages - pages0 or payload - payload0:
            grown.setdefault(table, {})[name] = (pages - pages0, payload - payload0)
    total_pages = sum(p for names in grown.values() for p, _ in names.values())
    total_payload = sum(q for names in grown.values() for _, q in names.values())
    print(f"  {'table / index':<44} {'bytes/run':>10} {'payload/run':>12} {'share':>6}")
    for table, names in sorted(grown.items(), key=lambda item: -sum(p for p, _ in item[1].values())):
        pages = sum(p for p, _ in names.values())
        payload = sum(q for _, q in names.values())
        print(f"  {table:<44} {pages / runs:>10.0f} {payload / runs:>12.0f} {pages / total_pages:>6.1%}")
        for name, (p, q) in sorted(names.items(), key=lambda item: -item[1][0]):
            kind = "rows" if name == table else "index"
            label = f"  {kind} {name}" if name != table else "  rows"
            print(f"  {label:<44} {p / runs:>10.0f} {q / runs:>12.0f}")
    print(f"  {'total':<44} {total_pages / runs:>10.0f} {total_payload / runs:>12.0f}")


# --- multiplying runs with SQL ---------------------------------------------------------------------


#: Tables holding rows of a finished trivial run, and how their key columns get fresh values.
#: `m_run`, `m_att`, `m_epoch` map old → new run ids, attempt ids and launch ids of one round.
COPIED: dict[str, dict[str, str]] = {
    "run": {"run_id": "m.new",
            "parent_run_id": "coalesce((SELECT new FROM m_run WHERE old = t.parent_run_id), t.parent_run_id)"},
    "run_event": {"run_id": "m.new", "attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)"},
    "node_attempt": {"attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)", "run_id": "m.new"},
    "run_worker": {"worker_id": "(SELECT new FROM m_epoch WHERE old = t.worker_id)", "run_id": "m.new",
                   "launch_id": "(SELECT new FROM m_epoch WHERE old = t.launch_id)"},
    "worker_message": {"launch_id": "(SELECT new FROM m_epoch WHERE old = t.launch_id)", "run_id": "m.new"},
    "host_command": {"run_id": "m.new", "idempotency_key": "t.idempotency_key || :suffix",
                     "request_id": "t.request_id || :suffix"},
}
#: Tables that hold rows of a run but not of a finished trivial one (checked empty for the copied runs).
NOT_COPIED = ("run_claim", "effect", "interactive_request", "session_message")


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _copy_sql(conn: sqlite3.Connection, table: str) -> str:
    """INSERT … SELECT copying `table`'s rows of the runs in m_run: keys mapped, times moved back."""
    overrides = COPIED[table]
    columns = _columns(conn, table)
    values = []
    for column in columns:
        if column in overrides:
            values.append(overrides[column])
        elif column.endswith("_at"):
            values.append(f"t.{column} - :shift")
        else:
            values.append(f"t.{column}")
    return (f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} "
            f"FROM {table} t JOIN m_run m ON m.old = t.run_id")


def multiply(db_path: Path, target_runs: int, target_events: int) -> tuple[int, int, float]:
    """Copy the runs in the file until there are `target_runs` runs and `target_events` events.
    Returns (runs, events, seconds). The host must be stopped."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a bench fill: nothing here needs to survive a crash
        conn.execute("PRAGMA cache_size = -200000")
        base = conn.execute("SELECT run_id, created_at FROM run WHERE status IN ('done', 'failed', 'cancelled') "
                            "ORDER BY created_at").fetchall()
        base_ids = [run_id for run_id, _ in base]
        marks = ",".join("?" * len(base_ids))
        for table in NOT_COPIED:
            if conn.execute(f"SELECT count(*) FROM {table} WHERE run_id IN ({marks})", base_ids).fetchone()[0]:
                raise RuntimeError(f"{table} holds rows of the runs to copy; the bench would not copy them")
        attempts = conn.execute(f"SELECT attempt_id, run_id, started_at FROM node_attempt WHERE run_id IN ({marks})",
                                base_ids).fetchall()
        epochs = [row[0] for row in conn.execute(
            f"SELECT worker_id FROM run_worker WHERE run_id IN ({marks}) UNION "
            f"SELECT launch_id FROM worker_message WHERE run_id IN ({marks})", base_ids + base_ids)]
        span = base[-1][1] - base[0][1] + 1.0
        conn.execute("CREATE TEMP TABLE m_run (old TEXT PRIMARY KEY, new TEXT)")
        conn.execute("CREATE TEMP TABLE m_att (old TEXT PRIMARY KEY, new TEXT)")
        conn.execute("CREATE TEMP TABLE m_epoch (old TEXT PRIMARY KEY, new TEXT)")
        # (A table the state no longer has, like worker_message rows that went with their launch, is
        # copied only when it exists and holds rows.)
        statements = {table: _copy_sql(conn, table) for table in COPIED if _columns(conn, table)}
        runs, events = _totals(conn)
        round_no = 0
        while runs < target_runs or events < target_events:
            round_no += 1
            shift = span * round_no
            wanted = max(1, target_runs - runs) if runs < target_runs else len(base)
            chosen = base[-wanted:] if wanted < len(base) else base
            chosen_ids = {run_id for run_id, _ in chosen}
            conn.execute("BEGIN")
            for table in ("m_run", "m_att", "m_epoch"):
                conn.execute(f"DELETE FROM {table}")
            conn.executemany("INSERT INTO m_run VALUES (?, ?)",
                             [(run_id, new_id("run", created - shift)) for run_id, created in chosen])
            conn.executemany("INSERT INTO m_att VALUES (?, ?)",
                             [(attempt_id, new_id("att", started - shift))
                              for attempt_id, run_id, started in attempts if run_id in chosen_ids])
            conn.executemany("INSERT INTO m_epoch VALUES (?, ?)", [(epoch, uuid.uuid4().hex) for epoch in epochs])
            for statement in statements.values():
                conn.execute(statement, {"shift": shift, "suffix": f"-copy{round_no}"})
            conn.execute("COMMIT")
            runs, events = _totals(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return runs, events, time.perf_counter() - t0


def _totals(conn: sqlite3.Connection) -> tuple[int, int]:
    runs = conn.execute("SELECT coalesce(sum(n), 0) FROM run_count").fetchone()[0]
    events = conn.execute("SELECT count(*) FROM run_event").fetchone()[0]
    return int(runs), int(events)


# --- the report ------------------------------------------------------------------------------------


def print_latencies(empty: dict[str, Figure], big: dict[str, Figure], runs: int, events: int) -> None:
    print(f"\nlatency through the socket, one client, closed loop (ms); big = {runs:,} runs, {events:,} events")
    print(f"  {'operation':<12} {'empty p50':>10} {'p99':>8} {'big p50':>10} {'p99':>8} {'ratio p50':>10} "
          f"{'p99':>6} {'calls':>7}")
    for operation in ("host.status", "run.start", "run.get", "run.list"):
        e, b = empty[operation], big[operation]
        print(f"  {operation:<12} {e.p50_ms:>10.3f} {e.p99_ms:>8.3f} {b.p50_ms:>10.3f} {b.p99_ms:>8.3f} "
              f"{b.p50_ms / e.p50_ms:>9.2f}x {b.p99_ms / e.p99_ms:>5.2f}x {b.calls:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 runs / 200,000 events, fewer calls")
    parser.add_argument("--runs", type=int, default=None, help="runs in the big state (default 100,000)")
    parser.add_argument("--events", type=int, default=None, help="events in the big state (default 1,000,000)")
    parser.add_argument("--real-runs", type=int, default=None, help="real runs before multiplying (default 3,000)")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per read operation (default 2,000)")
    parser.add_argument("--starts", type=int, default=None, help="timed run.start calls (default 300)")
    parser.add_argument("--keep", action="store_true", help="keep the state directories (printed)")
    args = parser.parse_args()
    quick = args.quick
    target_runs = args.runs or (20_000 if quick else 100_000)
    target_events = args.events or (200_000 if quick else 1_000_000)
    real_runs = args.real_runs or (1_000 if quick else 3_000)
    calls = args.calls or (500 if quick else 2_000)
    starts = args.starts or (100 if quick else 300)

    root = Path(tempfile.mkdtemp(prefix="pw-growth-", dir="/tmp"))  # short: AF_UNIX paths are limited
    try:
        workflow = root / "trivial3.py"
        workflow.write_text(WORKFLOW_SOURCE)
        spec = f"{workflow}:trivial"
        state_dir = root / "state"
        db_path = state_dir / "state.db"
        print(f"growth: {os.cpu_count()} cpus, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"host with --max-workers {MAX_WORKERS}; state in {state_dir}")

        # 1. The empty state: one run (for run.get), then the figures.
        print("\nmemory (psutil)")
        with running_host(state_dir) as host:
            ready_s = host.wait_ready()
            with Client(socket_path=host.socket_path) as client:
                print_memory("idle host, empty state", host, client)
                run_id = client.start(spec, {"first": True})["run_id"]
                wait_done(client, run_id)
            empty = measure(host, spec, calls, starts)

            # 2. The real runs of the fill, watching the host's memory as they go.
            before = dbstat(db_path)
            runs_before = _runs_in(db_path)
            rss_seen: list[tuple[int, int]] = []
            fill_s = run_real(host, spec, real_runs,
                              on_progress=lambda n: rss_seen.append((n, memory(host.proc.pid).rss)))
            after = dbstat(db_path)
            added = _runs_in(db_path) - runs_before
            with Client(socket_path=host.socket_path) as client:
                print_memory(f"host after {real_runs:,} more runs", host, client)
            first, last = rss_seen[0], rss_seen[-1]
            print(f"  {'':<34} host RSS {first[1] / MIB:.1f} MiB after {first[0]:,} fill runs, "
                  f"{last[1] / MIB:.1f} MiB after {last[0]:,}: "
                  f"{(last[1] - first[1]) / max(1, last[0] - first[0]):+.0f} bytes per run")
        print(f"  (empty host ready in {ready_s:.2f} s; {real_runs:,} real runs in {fill_s:.1f} s, "
              f"{real_runs / fill_s:.0f} runs/s)")

        # 3. Multiply them.
        runs, events, fill_sql_s = multiply(db_path, target_runs, target_events)
        t0 = time.perf_counter()
        report = state_report.verify(db_path, time.time())
        verify_s = time.perf_counter() - t0
        codes = sorted({v["code"] for v in report["violations"]})
        t0 = time.perf_counter()
        counted = state_report.state_status(db_path)["tables"]["run_event"]
        status_s = time.perf_counter() - t0
        print(f"  (multiplied to {runs:,} runs / {events:,} events with INSERT … SELECT in {fill_sql_s:.1f} s; "
              f"state verify {'ok' if report['ok'] else 'FAILED ' + ', '.join(codes)} in {verify_s:.1f} s; "
              f"state status (exact row counts, {counted:,} events) in {status_s:.2f} s)")

        # 4. The big state.
        with running_host(state_dir) as host:
            ready_s = host.wait_ready()
            with Client(socket_path=host.socket_path) as client:
                started = print_memory(f"idle host, {runs:,} runs", host, client)
            big = measure(host, spec, calls, starts)
            with Client(socket_path=host.socket_path) as client:
                served = print_memory(f"after {4 * calls + starts:,} requests", host, client)
            extra = max(200, real_runs // 3)
            run_real(host, spec, extra)
            with Client(socket_path=host.socket_path) as client:
                final = print_memory(f"after {extra:,} more runs", host, client)
            print(f"  {'':<34} host RSS since start: {(served.rss - started.rss) / MIB:+.1f} MiB after the "
                  f"requests, {(final.rss - served.rss) / MIB:+.1f} MiB after the runs "
                  f"({(final.rss - served.rss) / extra:+.0f} bytes per run)")
        print(f"  (host on {runs:,} runs ready in {ready_s:.2f} s)")

        print_latencies(empty, big, runs, events)
        print(f"\nbytes per trivial 3-node run (dbstat: what {added:,} real runs added, per run)")
        print_bytes_per_run(before, after, added)
        size = db_path.stat().st_size
        print(f"  big state file: {size / MIB:.1f} MiB for {runs:,} runs = {size / runs:.0f} bytes per run")
        if args.keep:
            print(f"\nkept: {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def _runs_in(db_path: Path) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM run").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    main()
