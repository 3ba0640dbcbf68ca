"""End-to-end runs/s and latency of trivial 3-node compute runs through the embedding API.

For each `--workers` value (default 1, 2, 8) a fresh host is started on a
temp state dir (`HostConfig(max_workers=m, warm_workers=m)`, durable:
synchronous=FULL unless --synchronous says otherwise), warmed with a few
runs, then measured twice:

  closed loop  m client threads, each: `start_run` → wait until the run is
               seen done → next run. Latency "start→done" is wall clock from
               just before `start_run` to the moment the run is seen done;
               "db" is the run row's created_at → finished_at.
  burst        all `--runs` runs submitted up front from 4 threads, then
               wait for the last one. runs/s = runs / (first submit → last
               done); latencies include the time spent queued.

Each phase also prints where the CPU went, per run: the host process by
thread (writer, scheduler, runner supervisors + their frame-reader threads,
which live one run each and are counted as "runner threads" = process total
minus the long-lived threads, the bench's own clients and watcher) and the
worker processes (psutil). Read from /proc, so it costs nothing while the
phase runs.

Steps/s is 3 × runs/s (three compute nodes per run). "Seen done" comes from
a small pykka actor subscribed to the writer's ChangeNotice that reads the
status of the runs named in each notice (no per-run polling). Writer
figures are the writer's own counters over the phase: commands and commits
(fsyncs) per run.

If `dbos` is importable (it is NOT a project dependency: `pip install dbos`
into the venv), the same shape runs in DBOS Transact on SQLite: three
@DBOS.step functions in one @DBOS.workflow, called from m threads (closed
loop; the caller's thread runs the workflow), measured right after piwf's
phases for the same m so both see the same machine load. DBOS uses a WAL
system database (`--dbos-journal delete` keeps SQLite's default rollback
journal, which is what DBOS creates by itself) and SQLite's default
synchronous=FULL. It prints workflows/s, p50/p99 latency and the ratio
piwf/DBOS at equal concurrency. DBOS is launched once before the piwf
phases; its idle background threads run beside them.

Run: .venv/bin/python bench/throughput.py [--runs 300] [--workers 1 2 8] [--no-dbos]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pykka

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import WORKFLOW_SOURCE, pct  # noqa: E402  (bench/ is the script's directory)

from piwf_actors import HostConfig, HostHandle, start_host  # noqa: E402
from piwf_actors.actors.writer import Subscribe, Unsubscribe  # noqa: E402
from piwf_actors.store.reader import StoreReader  # noqa: E402
from piwf_actors.store.requests import ChangeNotice  # noqa: E402

STEPS_PER_RUN = 3
FINAL = ("done", "failed", "cancelled")
WAIT_S = 120.0


# --- seeing runs finish ------------------------------------------------------------------


@dataclass
class DoneSlot:
    """Filled by the watcher when the run reaches a final status."""

    event: threading.Event = field(default_factory=threading.Event)
    status: str | None = None
    seen_at: float = 0.0  # perf_counter


@dataclass(frozen=True, slots=True)
class Watch:
    run_id: str
    slot: DoneSlot


class DoneWatcher(pykka.ThreadingActor):
    """Subscribed to the writer's ChangeNotice; sets a run's slot once its row shows a final status."""

    def __init__(self, db_path: Path) -> None:
        super().__init__()
        self._db_path = db_path
        self._reader: StoreReader | None = None
        self._waiting: dict[str, DoneSlot] = {}

    def on_start(self) -> None:
        self._reader = StoreReader(self._db_path)

    def on_stop(self) -> None:
        if self._reader is not None:
            self._reader.close()

    def on_receive(self, message: Any) -> None:
        if isinstance(message, Watch):
            self._waiting[message.run_id] = message.slot
            self._check([message.run_id])  # it may have finished before we were told to watch it
        elif isinstance(message, ChangeNotice) and "run" in message.tables:
            watched = [run_id for run_id in message.runs if run_id in self._waiting]
            if watched:
                self._check(watched)

    def _check(self, run_ids: list[str]) -> None:
        assert self._reader is not None
        marks = ",".join("?" * len(run_ids))
        rows = self._reader.all(f"SELECT run_id, status FROM run WHERE run_id IN ({marks}) "
                                f"AND status IN ('done', 'failed', 'cancelled')", tuple(run_ids))
        now = time.perf_counter()
        for run_id, status in rows:
            slot = self._waiting.pop(run_id)
            slot.status = status
            slot.seen_at = now
            slot.event.set()


# --- where the CPU goes ----------------------------------------------------------------


_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
_GROUPS = (("DatabaseWriter", "writer"), ("Scheduler", "scheduler"), ("RunnerSupervisor", "runner threads"),
           ("runner-", "runner threads"), ("DoneWatcher", "bench watcher"), ("bench-", "bench clients"),
           ("MainThread", "bench clients"))


def _group(thread_name: str) -> str:
    for prefix, group in _GROUPS:
        if thread_name.startswith(prefix):
            return group
    return "other host threads"


@dataclass
class CpuSnapshot:
    process_s: float
    threads: dict[int, tuple[str, float]]  # native id -> (name, cpu s)
    workers: dict[int, float]  # pid -> cpu s


def cpu_snapshot() -> CpuSnapshot:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    threads: dict[int, tuple[str, float]] = {}
    for thread in threading.enumerate():
        try:
            with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        threads[thread.native_id or 0] = (thread.name, (int(fields[11]) + int(fields[12])) * _TICK_S)
    workers: dict[int, float] = {}
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            workers[child.pid] = times.user + times.system
        except psutil.Error:
            pass
    return CpuSnapshot(usage.ru_utime + usage.ru_stime, threads, workers)


def cpu_breakdown(before: CpuSnapshot, after: CpuSnapshot) -> tuple[float, dict[str, float], float]:
    """(host process cpu s, {group: cpu s}, worker processes cpu s) spent between the snapshots."""
    groups: dict[str, float] = {}
    tracked = 0.0
    for tid, (name, cpu) in after.threads.items():
        spent = cpu - (before.threads[tid][1] if tid in before.threads else 0.0)
        groups[_group(name)] = groups.get(_group(name), 0.0) + spent
        tracked += spent
    process = after.process_s - before.process_s
    # Threads that ended during the phase (one supervisor + one reader per run) are gone from /proc.
    groups["runner threads"] = groups.get("runner threads", 0.0) + max(process - tracked, 0.0)
    workers = sum(cpu - before.workers.get(pid, 0.0) for pid, cpu in after.workers.items())
    return process, groups, workers


# --- measuring -------------------------------------------------------------------------


@dataclass
class Phase:
    label: str
    runs: int
    elapsed_s: float
    latencies_s: list[float]
    db_latencies_s: list[float]
    commands: int
    commits: int
    failed: int
    cpu: tuple[float, dict[str, float], float] | None = None

    @property
    def rate(self) -> float:
        return self.runs / self.elapsed_s




def db_latencies(host: HostHandle, run_ids: list[str]) -> list[float]:
    reader = StoreReader(host.paths.database)
    try:
        out: list[float] = []
        for start in range(0, len(run_ids), 500):
            chunk = run_ids[start:start + 500]
            rows = reader.all(f"SELECT created_at, finished_at FROM run WHERE run_id IN ({','.join('?' * len(chunk))})"
                              " AND finished_at IS NOT NULL", tuple(chunk))
            out.extend(finished - created for created, finished in rows)
        return out
    finally:
        reader.close()


def submit_and_watch(host: HostHandle, watcher: pykka.ActorRef[Any], spec: str, i: int) -> tuple[str, DoneSlot]:
    receipt = host.start_run(spec, {"i": i})["receipt"]
    slot = DoneSlot()
    watcher.tell(Watch(receipt["run_id"], slot))
    return receipt["run_id"], slot


def wait_slot(run_id: str, slot: DoneSlot) -> None:
    if not slot.event.wait(WAIT_S):
        raise TimeoutError(f"run {run_id} not done after {WAIT_S} s")


def closed_loop(host: HostHandle, watcher: pykka.ActorRef[Any], spec: str, runs: int, clients: int) -> Phase:
    per_client = [runs // clients + (1 if n < runs % clients else 0) for n in range(clients)]
    results: list[tuple[float, float, str, str | None]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(clients + 1)

    def client(count: int) -> None:
        try:
            go.wait()
            for i in range(count):
                started = time.perf_counter()
                run_id, slot = submit_and_watch(host, watcher, spec, i)
                wait_slot(run_id, slot)
                with lock:
                    results.append((started, slot.seen_at, run_id, slot.status))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    before = host.writer.stats()
    cpu_before = cpu_snapshot()
    threads = [threading.Thread(target=client, args=(count,), name=f"bench-client-{n}") for n, count in enumerate(per_client)]
    for t in threads:
        t.start()
    go.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    elapsed = max(seen for _, seen, _, _ in results) - began
    cpu = cpu_breakdown(cpu_before, cpu_snapshot())
    after = host.writer.stats()
    return Phase(f"closed loop, {clients} client{'s' if clients > 1 else ''}", len(results), elapsed,
                 [seen - started for started, seen, _, _ in results],
                 db_latencies(host, [run_id for _, _, run_id, _ in results]),
                 after.commands - before.commands, after.commits - before.commits,
                 sum(1 for *_, status in results if status != "done"), cpu)


def burst(host: HostHandle, watcher: pykka.ActorRef[Any], spec: str, runs: int, submitters: int = 4) -> Phase:
    submitted: list[tuple[float, str, DoneSlot]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    go = threading.Barrier(submitters + 1)

    def submit(count: int) -> None:
        try:
            go.wait()
            for i in range(count):
                started = time.perf_counter()
                run_id, slot = submit_and_watch(host, watcher, spec, i)
                with lock:
                    submitted.append((started, run_id, slot))
        except BaseException as exc:
            errors.append(exc)

    before = host.writer.stats()
    cpu_before = cpu_snapshot()
    counts = [runs // submitters + (1 if n < runs % submitters else 0) for n in range(submitters)]
    threads = [threading.Thread(target=submit, args=(c,), name=f"bench-submit-{n}") for n, c in enumerate(counts)]
    for t in threads:
        t.start()
    go.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    submit_s = time.perf_counter() - began
    for _, run_id, slot in submitted:
        wait_slot(run_id, slot)
    elapsed = max(slot.seen_at for _, _, slot in submitted) - began
    cpu = cpu_breakdown(cpu_before, cpu_snapshot())
    after = host.writer.stats()
    phase = Phase(f"burst, {runs} up front", len(submitted), elapsed,
                  [slot.seen_at - started for started, _, slot in submitted],
                  db_latencies(host, [run_id for _, run_id, _ in submitted]),
                  after.commands - before.commands, after.commits - before.commits,
                  sum(1 for *_, slot in submitted if slot.status != "done"), cpu)
    phase.label += f" (submitted in {submit_s:.2f} s)"
    return phase


def wait_for_idle_workers(host: HostHandle, count: int, timeout: float = 30.0) -> None:
    """Poll (with a deadline) until the scheduler holds `count` started workers."""
    from piwf_actors.actors.scheduler import GetSchedulerStatus

    scheduler = host.actor("scheduler")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = scheduler.ask(GetSchedulerStatus(), timeout=5) if scheduler is not None else {}
        if len(status.get("idle_workers", ())) + len(status.get("active", ())) >= count:
            return
        time.sleep(0.05)


def print_phase(phase: Phase) -> None:
    lat = [s * 1000 for s in phase.latencies_s]
    db = [s * 1000 for s in phase.db_latencies_s]
    failed = f", {phase.failed} NOT done" if phase.failed else ""
    print(f"  {phase.label}")
    print(f"    {phase.rate:8.1f} runs/s  {phase.rate * STEPS_PER_RUN:8.1f} steps/s   "
          f"start→done p50 {pct(lat, 0.5):7.1f} ms  p99 {pct(lat, 0.99):7.1f} ms   "
          f"db created→finished p50 {pct(db, 0.5):7.1f} ms  p99 {pct(db, 0.99):7.1f} ms")
    print(f"    writer: {phase.commands / phase.runs:5.2f} commands/run, {phase.commits / phase.runs:5.2f} commits/run "
          f"({phase.commands / max(phase.commits, 1):4.2f} commands/commit){failed}")
    if phase.cpu is not None:
        process, groups, workers = phase.cpu
        order = ["writer", "scheduler", "runner threads", "other host threads", "bench watcher", "bench clients"]
        parts = ", ".join(f"{g} {groups.get(g, 0.0) * 1000 / phase.runs:.2f}" for g in order)
        cores = os.cpu_count() or 1
        print(f"    cpu ms/run: host {process * 1000 / phase.runs:.2f} ({parts}); "
              f"workers {workers * 1000 / phase.runs:.2f}; busy {(process + workers) / phase.elapsed_s / cores:.0%} "
              f"of {cores} cores")


def bench_piwf(base: Path, spec: str, workers: int, runs: int, synchronous: str) -> dict[str, Phase]:
    state_dir = base / f"piwf-{workers}"
    host = start_host(HostConfig(state_dir=state_dir, max_workers=workers, warm_workers=workers,
                                 synchronous=synchronous))
    watcher = DoneWatcher.start(host.paths.database)
    try:
        host.writer.ref.tell(Subscribe(watcher))
        wait_for_idle_workers(host, workers)
        closed_loop(host, watcher, spec, max(2 * workers, 4), workers)  # warm-up, not reported
        phases = {"closed": closed_loop(host, watcher, spec, runs, workers),
                  "burst": burst(host, watcher, spec, runs)}
        print(f"piwf, max_workers={workers} (warm_workers={workers}, synchronous={synchronous}):")
        for phase in phases.values():
            print_phase(phase)
        return phases
    finally:
        with contextlib.suppress(pykka.ActorDeadError):
            host.writer.ref.tell(Unsubscribe(watcher))
        host.stop("bench finished")
        watcher.stop()


# --- DBOS -------------------------------------------------------------------------------


class DbosBench:
    """DBOS Transact launched once on `base`/dbos.sqlite; `measure(threads)` runs one closed loop."""

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
        self.description = (f"DBOS Transact {_dist_version('dbos')} on SQLite ({path.name}: journal_mode={mode}, "
                            f"synchronous={sync}), the caller's threads run the workflows")
        for i in range(20):  # warm-up
            trivial3(i)

    def measure(self, runs: int, threads: int) -> tuple[float, list[float]]:
        rate, latencies = _dbos_closed_loop(self.workflow, runs, threads)
        ms = [s * 1000 for s in latencies]
        print(f"DBOS, {threads} thread{'s' if threads > 1 else ''}:")
        print(f"    {rate:8.1f} wf/s    {rate * STEPS_PER_RUN:8.1f} steps/s   "
              f"start→done p50 {pct(ms, 0.5):7.1f} ms  p99 {pct(ms, 0.99):7.1f} ms")
        return rate, latencies

    def close(self) -> None:
        self._dbos.destroy()


def start_dbos(base: Path, journal: str) -> DbosBench | None:
    """A launched DbosBench, or None (with a line saying why) if dbos is missing or fails to start."""
    try:
        import dbos  # noqa: F401
    except ImportError as exc:
        print(f"DBOS: not importable ({exc}); comparison skipped. "
              f"`.venv/bin/python -m pip install dbos` to include it (not a project dependency).")
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


# --- main -------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="runs per phase (default 300)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--no-dbos", action="store_true", help="skip the DBOS comparison")
    parser.add_argument("--dbos-journal", choices=["wal", "delete"], default="wal")
    parser.add_argument("--dir", default=None, help="directory for state dirs and databases (default: a temp dir)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="piwf-bench-tp-", dir=args.dir))
    try:
        workflow_file = base / "trivial3.py"
        workflow_file.write_text(WORKFLOW_SOURCE)
        spec = f"{workflow_file}:trivial"
        print(f"{args.runs} runs per phase, 3 compute nodes per run; {os.cpu_count()} cores, "
              f"python {sys.version.split()[0]}, state under {base}")
        dbos = None if args.no_dbos else start_dbos(base, args.dbos_journal)
        if args.no_dbos:
            print("DBOS: skipped (--no-dbos)")
        elif dbos is not None:
            print(f"{dbos.description}; each concurrency is measured right after piwf's")
        ratios = []
        try:
            for workers in args.workers:
                phases = bench_piwf(base, spec, workers, args.runs, args.synchronous)
                if dbos is None:
                    continue
                rate, latencies = dbos.measure(args.runs, workers)
                closed = phases["closed"]
                ratios.append(f"  {workers}: throughput {closed.rate / rate:5.2f}x   p50 latency "
                              f"{pct(closed.latencies_s, 0.5) / pct(latencies, 0.5):5.2f}x   "
                              f"(piwf burst {phases['burst'].rate / rate:5.2f}x)")
                print(f"piwf / DBOS at {workers}:{ratios[-1].split(':', 1)[1]}")
        finally:
            if dbos is not None:
                dbos.close()
        if ratios:
            print("piwf / DBOS at equal concurrency (piwf closed loop with m clients vs DBOS with m threads):")
            print("\n".join(ratios))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
