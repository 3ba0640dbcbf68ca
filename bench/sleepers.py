"""Sleepers: what 100,000 runs parked in a durable `sleep` cost an idle host, and how late sleepers wake.

Every host is a real `bin/piwf-host --max-workers W` process (durable defaults; bench/throughput.py's
HostProcess), every request goes through its Unix socket. The workflow: `s: sleep(until=input.until)`
→ `after: compute` (outputs `time.time()` in the worker). Prints, from one run:

  1. fill      --sleepers runs started through the host (`run.start` from 4 connections, each
               sleeping until a year from now), until host.status counts them all parked: each is
               launched on a worker once, reaches its sleep, and parks `waiting` with its wake-up
               in run_wait (no rows are written behind the host's back). The submitters keep at
               most --backlog runs queued or running, so the queue stays short and the figure is
               sleepers parked per second; printed per tenth, to show whether it slows as they
               pile up, with the host's CPU per sleeper and the state.db size.
  2. restart   the fill host stopped (SIGTERM); "sleeping": a host started on that state;
               "empty": a host started on a new state. Start → ready (socket answers, W warm
               workers) for each.
  3. idle      both hosts idle side by side (after --settle-s), measured over the same --idle-s
               window: CPU time of the host process alone and with its workers (every thread's
               /proc/<pid>/task/<tid>/schedstat, nanoseconds; the process's 10 ms ticks beside
               it), RSS of the host and of its workers, threads; sleeping/empty (target ≤ 1.1×).
               The housekeeper probes the nearest wake-up once per 0.5 s tick.
  4. lateness  on each host in turn (empty, then sleeping, with its sleepers still there):
               --wakers runs whose sleep ends spread evenly over --spread-s seconds, the first
               --lead-s after they were started (all parked before the first wakes), then until
               all are done. Per run, with wake = its wake-up time (`wait_started`'s wake_at):
               settled = the `wait_settled` event's time − wake (the housekeeper's `waits.wake`
               committed), node after = the next node's `time.time()` in the worker − wake (the
               run requeued, claimed, launched, the sleep node finished), done = finished_at − wake.
               p50/p99/max (target p99 ≤ 100 ms); for the three latest, when each step happened
               (settled, run_claimed, run_resumed, node after); the host's RSS after them.

All times are this machine's wall clock (host, workers and bench share it).

Run: .venv/bin/python bench/sleepers.py [--quick] [--sleepers 100000] [--workers 8] [--idle-s 20]
     [--settle-s 5] [--wakers 200] [--spread-s 10] [--lead-s 3] [--backlog 2000]
`--quick`: 10,000 sleepers (~100 s on this 2-core machine; 100,000 take ~7 min to fill, ~8 min in all).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line, pct  # noqa: E402  (bench/ is the script's directory)
from throughput import FINAL, WAIT_S, HostProcess, cpu_use  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

SUBMITTERS = 4
MIB = 1024 * 1024
YEAR_S = 365 * 86400.0

WORKFLOWS = '''\
"""A durable sleep until input["until"], then a compute node that says when it ran."""

import time

from piwf_actors.workflows import compute, define_workflow, edge, sleep

sleeper = define_workflow(name="sleeper", start_at="s", edges=[edge("s", "after")], nodes={
    "s": sleep(until=lambda ctx: ctx.input["until"]),
    "after": compute(run=lambda ctx: {"ran_at": time.time()}),
})
'''


def counts(client: Client) -> dict[str, int]:
    return {k: int(v) for k, v in (client.status().get("runs") or {}).items()}


def start_host(state_dir: Path, workers: int) -> tuple[HostProcess, float]:
    started = time.perf_counter()
    host = HostProcess(state_dir, workers, "FULL")
    try:
        host.wait_ready(timeout=300)
    except BaseException:
        host.stop()
        raise
    return host, time.perf_counter() - started


# --- 1. fill ----------------------------------------------------------------------------------------


def fill(host: HostProcess, spec: str, total: int, backlog: int) -> None:
    """`total` sleepers through the host; prints the rate per tenth."""
    until = time.time() + YEAR_S
    lock = threading.Lock()
    submitted = 0
    errors: list[BaseException] = []
    room = threading.Condition(lock)
    allowed = min(total, backlog)  # starts the submitters may have sent so far (raised as runs park)

    def submit() -> None:
        nonlocal submitted
        try:
            with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
                while True:
                    with room:
                        while submitted >= allowed and submitted < total and not errors:
                            room.wait(1.0)
                        if submitted >= total or errors:
                            return
                        submitted += 1
                    client.start(spec, {"until": until})
        except BaseException as exc:  # reported below
            with room:
                errors.append(exc)
                room.notify_all()

    threads = [threading.Thread(target=submit, name=f"bench-fill-{n}", daemon=True) for n in range(SUBMITTERS)]
    step = max(1, total // 10)
    next_mark = step
    began = last_t = time.perf_counter()
    cpu0 = cpu_last = host.cpu()
    last_parked = 0
    print(f"1. fill: {total} sleepers through the host (max_workers={host.max_workers}, at most {backlog} queued "
          f"or running at a time)", flush=True)
    for thread in threads:
        thread.start()
    with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
        deadline = time.monotonic() + max(WAIT_S, total / 20)
        while True:
            now_counts = counts(client)
            parked = now_counts.get("parked", 0)
            with room:
                if errors:
                    raise errors[0]
                allowed = min(total, parked + backlog)
                room.notify_all()
            if parked >= next_mark or parked >= total:
                now, cpu = time.perf_counter(), host.cpu()
                done = parked - last_parked
                size = os.path.getsize(host.database) + _size(host.database.with_name("state.db-wal"))
                print(f"  {parked:7d} parked  {done / (now - last_t):6.0f} sleepers/s over the last {done}  "
                      f"host {(cpu.process_s - cpu_last.process_s) * 1000 / max(done, 1):.2f} ms CPU per sleeper  "
                      f"state.db+wal {size / MIB:6.0f} MiB  host RSS "
                      f"{psutil.Process(host.pid).memory_info().rss / MIB:.0f} MiB", flush=True)
                last_t, cpu_last, last_parked = now, cpu, parked
                next_mark = (parked // step + 1) * step
            if parked >= total:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"fill: {parked} of {total} parked, {now_counts}")
            time.sleep(0.2)
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    use = cpu_use(cpu0, host.cpu(), {})
    print(f"  {total} sleepers in {elapsed:.0f} s ({total / elapsed:.0f}/s); host {use.host_s * 1000 / total:.2f} + "
          f"workers {use.workers_s * 1000 / total:.2f} ms CPU per sleeper", flush=True)


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# --- 3. idle -----------------------------------------------------------------------------------------


@dataclass
class Idle:
    host_s: float  # CPU seconds of the host's threads (schedstat, ns)
    workers_s: float  # of its workers' threads (schedstat, ns)
    host_ticks_s: float  # the host process's utime + stime (10 ms ticks), for comparison
    host_rss: int
    workers_rss: int
    workers: int
    threads: int
    threads_changed: bool  # a host thread came or went during the window (its time is then partly missed)


def rss(host: HostProcess) -> tuple[int, int, int, int]:
    """(host RSS, workers' RSS summed, workers, host threads)."""
    process = psutil.Process(host.pid)
    total = count = 0
    for child in process.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += child.memory_info().rss
            count += 1
    return process.memory_info().rss, total, count, process.num_threads()


def on_cpu_ns(pid: int) -> dict[int, int]:
    """tid -> nanoseconds on a CPU (/proc/<pid>/task/<tid>/schedstat, first field): an idle host
    uses a few 10 ms ticks in 20 s, too coarse for a ratio; the scheduler counts nanoseconds."""
    found = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError, IndexError), \
                open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
            found[int(tid)] = int(stat.read().split()[0])
    return found


@dataclass
class Snapshot:
    host: dict[int, int]  # tid -> ns
    workers: dict[tuple[int, float], int]  # (pid, create_time) -> ns, all threads
    ticks_s: float


def snapshot(host: HostProcess) -> Snapshot:
    workers = {}
    for child in psutil.Process(host.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError):
            workers[(child.pid, child.create_time())] = sum(on_cpu_ns(child.pid).values())
    return Snapshot(on_cpu_ns(host.pid), workers, host.cpu().process_s)


def idle_window(hosts: dict[str, HostProcess], seconds: float) -> dict[str, Idle]:
    before = {name: snapshot(host) for name, host in hosts.items()}
    time.sleep(seconds)  # the measurement itself: nothing is sent to the hosts meanwhile
    after = {name: snapshot(host) for name, host in hosts.items()}
    found = {}
    for name, host in hosts.items():
        b, a = before[name], after[name]
        host_ns = sum(ns - b.host.get(tid, 0) for tid, ns in a.host.items())
        workers_ns = sum(ns - b.workers.get(key, 0) for key, ns in a.workers.items())
        host_rss, workers_rss, workers, threads = rss(host)
        found[name] = Idle(host_ns / 1e9, workers_ns / 1e9, a.ticks_s - b.ticks_s, host_rss, workers_rss, workers,
                           threads, set(a.host) != set(b.host) or set(a.workers) != set(b.workers))
    return found


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b > 0 else "n/a (empty used 0)"


def print_idle(idle: dict[str, Idle], seconds: float, sleepers: int) -> None:
    empty, sleeping = idle["empty"], idle["sleeping"]
    print(f"3. idle, both hosts side by side over the same {seconds:g} s (CPU: schedstat, ns):")
    for name, figure in idle.items():
        print(f"  {name:<9} host {figure.host_s * 1000:6.1f} ms CPU ({figure.host_s / seconds:5.2%} of a core; "
              f"{figure.host_ticks_s * 1000:.0f} ms in 10 ms ticks), with {figure.workers} workers "
              f"{(figure.host_s + figure.workers_s) * 1000:6.1f} ms; RSS host {figure.host_rss / MIB:6.1f} MiB, "
              f"workers {figure.workers_rss / MIB:6.1f} MiB; {figure.threads} host threads"
              + ("; a thread or worker came or went during the window" if figure.threads_changed else ""))
    cpu_ratio = sleeping.host_s / empty.host_s if empty.host_s else float("inf")
    print(f"  sleeping ({sleepers}) / empty: host CPU {ratio(sleeping.host_s, empty.host_s)}, host + workers "
          f"{ratio(sleeping.host_s + sleeping.workers_s, empty.host_s + empty.workers_s)}, host RSS "
          f"{ratio(sleeping.host_rss, empty.host_rss)}, host + workers RSS "
          f"{ratio(sleeping.host_rss + sleeping.workers_rss, empty.host_rss + empty.workers_rss)} "
          f"(target ≤ 1.1×: CPU {'met' if cpu_ratio <= 1.1 else 'NOT met'})")


# --- 4. lateness ---------------------------------------------------------------------------------------


@dataclass
class Wake:
    """One sleeper's wake-up: seconds after its wake time that each step happened."""

    run_id: str
    settled: float  # wait_settled (the housekeeper's waits.wake committed; run_requeued with it)
    claimed: float  # run_claimed after it
    resumed: float  # run_resumed (the launch reached a worker)
    node_after: float  # the next node's time.time() in the worker
    done: float  # finished_at


def lateness(host: HostProcess, spec: str, wakers: int, spread_s: float, lead_s: float) -> list[Wake]:
    """Start `wakers` sleepers waking over `spread_s`, wait until all are done, read their events."""
    first = time.time() + lead_s
    wake = [first + spread_s * i / max(wakers - 1, 1) for i in range(wakers)]
    with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
        run_ids = [client.start(spec, {"until": at})["run_id"] for at in wake]
        started_by = time.time()
        if started_by > first:
            print(f"  (starting took until {started_by - first:.2f} s after the first wake-up: those woke at once)")
        deadline = time.monotonic() + lead_s + spread_s + WAIT_S
        pending = list(run_ids)
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(pending)} sleepers not done")
            time.sleep(0.25)
            if time.time() > wake[-1]:
                pending = [r for r in pending if client.get(r)["status"] not in FINAL]
        found = []
        for run_id in run_ids:
            view = client.get(run_id)
            if view["status"] != "done":
                raise RuntimeError(f"sleeper {run_id} ended {view['status']}: {view.get('error')}")
            events = client.request("run.events", {"limit": 100}, run_id=run_id).receipt["events"]
            wake_at = next(e["payload"]["wake_at"] for e in events if e["kind"] == "wait_started")
            settled = next(e for e in events if e["kind"] == "wait_settled")

            def after(kind: str, settled: dict[str, Any] = settled, events: list[dict[str, Any]] = events) -> float:
                return next(e["created_at"] for e in events if e["kind"] == kind and e["seq"] > settled["seq"])

            ran_at = next(n["output"]["ran_at"] for n in view["nodes"] if n["node_id"] == "after")
            found.append(Wake(run_id, settled["created_at"] - wake_at, after("run_claimed") - wake_at,
                              after("run_resumed") - wake_at, ran_at - wake_at, view["finished_at"] - wake_at))
    return found


def print_lateness(name: str, wakes: list[Wake], host: HostProcess) -> None:
    for what in ("settled", "node_after", "done"):
        ms = [getattr(w, what) * 1000 for w in wakes]
        over = sum(1 for m in ms if m > 100)
        print(f"  {name:<9} {what.replace('_', ' '):<11} late p50 {pct(ms, 0.5):7.1f} ms  p99 {pct(ms, 0.99):7.1f} ms  "
              f"max {max(ms):7.1f} ms  min {min(ms):7.1f} ms  ({over} of {len(ms)} over 100 ms)")
    worst = sorted(wakes, key=lambda w: -w.node_after)[:3]
    print(f"  {name:<9} latest (ms after the wake time: settled / claimed / resumed on a worker / node after): "
          + "; ".join(f"{w.settled * 1000:.0f} / {w.claimed * 1000:.0f} / {w.resumed * 1000:.0f} / "
                      f"{w.node_after * 1000:.0f}" for w in worst))
    host_rss, workers_rss, workers, _ = rss(host)
    print(f"  {name:<9} after them: RSS host {host_rss / MIB:.1f} MiB, {workers} workers {workers_rss / MIB:.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="10,000 sleepers")
    parser.add_argument("--sleepers", type=int, default=None, help="sleeping runs in the big state (default 100,000)")
    parser.add_argument("--workers", type=int, default=8, help="every host's --max-workers (default 8)")
    parser.add_argument("--idle-s", type=float, default=20.0, help="the idle window (default 20 s)")
    parser.add_argument("--settle-s", type=float, default=5.0, help="wait before the idle window (default 5 s)")
    parser.add_argument("--wakers", type=int, default=200, help="sleepers whose lateness is measured (default 200)")
    parser.add_argument("--spread-s", type=float, default=10.0, help="their wake-ups spread over (default 10 s)")
    parser.add_argument("--lead-s", type=float, default=3.0, help="the first wakes this long after the starts")
    parser.add_argument("--backlog", type=int, default=2000, help="fill: at most this many queued or running")
    args = parser.parse_args()
    total = args.sleepers or (10_000 if args.quick else 100_000)

    base = Path(tempfile.mkdtemp(prefix="pws-", dir="/tmp"))  # short: AF_UNIX socket paths
    began = time.perf_counter()
    hosts: dict[str, HostProcess] = {}
    try:
        (base / "sleeper.py").write_text(WORKFLOWS)
        spec = f"{base / 'sleeper.py'}:sleeper"
        print(f"{total} sleepers, max_workers={args.workers}; {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python {sys.version.split()[0]}, SQLite "
              f"{sqlite3.sqlite_version}, state under {base}", flush=True)
        filler, _ = start_host(base / "sleeping", args.workers)
        try:
            fill(filler, spec, total, args.backlog)
        finally:
            filler.stop()
        print("2. restart → ready (socket answers, every worker started):")
        hosts["sleeping"], took = start_host(base / "sleeping", args.workers)
        print(f"  sleeping  {took:.2f} s on the state with {total} sleepers")
        hosts["empty"], took = start_host(base / "empty", args.workers)
        print(f"  empty     {took:.2f} s on a new state", flush=True)
        with Client(socket_path=hosts["sleeping"].socket_path) as client:
            parked = counts(client).get("parked", 0)
            if parked != total:
                raise RuntimeError(f"the restarted host counts {parked} parked runs, not {total}")
        time.sleep(args.settle_s)
        print_idle(idle_window(hosts, args.idle_s), args.idle_s, total)
        print(f"4. wake-up lateness: {args.wakers} sleepers waking over {args.spread_s:g} s, on each host in turn",
              flush=True)
        for name in ("empty", "sleeping"):
            print_lateness(name, lateness(hosts[name], spec, args.wakers, args.spread_s, args.lead_s), hosts[name])
            sys.stdout.flush()
        print(closing_line(began))
    finally:
        for host in hosts.values():
            host.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
