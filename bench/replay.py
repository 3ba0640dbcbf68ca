"""Replay: what a durable function run pays, when it resumes after a wait, per step it had recorded.

A workflow function makes `before` calls of a pure step, then waits for a message, then makes one
more step and returns. A run parks at the wait with `before` steps recorded; the message makes the
next launch call the function from the top, replay the `before` recorded steps (their results come
from the launch state, their order from `function_history`) and go on. One real host
(`bin/piwf-host --max-workers 1`, durable defaults, its own process: bench/throughput.py's
HostProcess), so one warm worker runs every launch.

For each depth in --depths (default 0, 10, 100, 1,000), --runs runs per round are started and
left parked (the "fill": CPU of the host and its worker from the first `run.start` until all are
parked, per new step). Then, per round and per depth (depths interleaved, so a busy minute of
the shared machine falls on all of them), one window of --runs resumes, one after another:
`message.send` to the next parked run, then its status read from state.db (read-only, in this
process: seeing it costs the host nothing) until it is done. Per window:

  host     CPU of the host process (/proc/<pid>/stat, 10 ms ticks: a window of several resumes)
  worker   CPU of the host's worker processes (psutil, by pid and create time, so a worker the
           pool reuses counts only what it spent in the window; a worker started or reaped in the
           window counts whole, and the window says so)
  wall     message.send → the run seen done, per resume

Printed per depth: CPU per resuming launch (host, worker, both; median of the rounds, each round's
figure too), wall p50, and the replay's cost per recorded step = (CPU at depth N − CPU at depth 0)
/ N, next to what a new step costs (the fill) and to the raw baseline: the same function body
executed here with its steps as plain calls (no durability), per step. The target of issue 33: the
launch that resumes at step 1,000 costs under 50 ms of host and worker CPU.

`--profile DIR`: after the figures, py-spy records the host and the worker (`record --threads
--native --rate 200 --format raw`, the host's with `--gil`: its threads mostly wait; both at once)
during --profile-runs more resumes at the deepest depth (never during the measured windows);
writes DIR/replay-host.txt and DIR/replay-worker.txt and prints their top entries (bench/profile_top.py).

Run: .venv/bin/python bench/replay.py [--depths 0 10 100 1000] [--runs 8] [--rounds 3]
     [--profile DIR [--profile-runs 5]]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line, pct  # noqa: E402  (bench/ is the script's directory)
from profile_top import read_stacks, summarise  # noqa: E402
from throughput import WAIT_S, HostCpu, HostProcess, cpu_use, py_spy  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

WORKFLOW_SOURCE = '''\
"""`before` steps, a wait for a message, one step more and the return."""

from piwf_actors.durable import step, wait_message, workflow


@step
def add(n: int) -> int:
    return n + 1


@workflow(name="resumer", max_steps=100_000)
def resumer(before: int) -> dict:
    n = 0
    for _ in range(before):
        n = add(n)
    got = wait_message("go")
    return {"n": add(n), "got": got}
'''

TARGET_DEPTH = 1000
TARGET_MS = 50.0
POLL_S = 0.001


@dataclass
class Window:
    """CPU and wall time of `runs` launches (a fill or a window of resumes)."""

    runs: int
    host_s: float
    worker_s: float
    walls_s: list[float]
    workers_changed: int  # worker processes started or gone during the window

    @property
    def host_ms(self) -> float:
        return self.host_s * 1000 / self.runs

    @property
    def worker_ms(self) -> float:
        return self.worker_s * 1000 / self.runs

    @property
    def total_ms(self) -> float:
        return self.host_ms + self.worker_ms


def measured(host: HostProcess, before: HostCpu, after: HostCpu, runs: int, walls: list[float]) -> Window:
    use = cpu_use(before, after, {})
    changed = len(set(before.children) ^ set(after.children))
    return Window(runs, use.host_s, use.workers_s, walls, changed)


def statuses(db: sqlite3.Connection, run_ids: list[str]) -> dict[str, str]:
    marks = ",".join("?" * len(run_ids))
    return dict(db.execute(f"SELECT run_id, status FROM run WHERE run_id IN ({marks})", run_ids).fetchall())


def wait_status(db: sqlite3.Connection, run_ids: list[str], wanted: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        seen = statuses(db, run_ids)
        if all(seen.get(run_id) == wanted for run_id in run_ids):
            return
        bad = {run_id: s for run_id, s in seen.items() if s in ("failed", "cancelled")}
        if bad:
            raise RuntimeError(f"runs ended {bad} while waiting for {wanted}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs not {wanted} after {WAIT_S} s: {seen}")
        time.sleep(POLL_S)


def fill(host: HostProcess, client: Client, db: sqlite3.Connection, spec: str, depth: int, runs: int) -> tuple[
        list[str], Window]:
    """`runs` runs started at once and waited for until all are parked at the wait."""
    cpu_before = host.cpu()
    began = time.perf_counter()
    run_ids = [client.start(spec, {"before": depth})["run_id"] for _ in range(runs)]
    wait_status(db, run_ids, "parked")
    wall = time.perf_counter() - began
    return run_ids, measured(host, cpu_before, host.cpu(), runs, [wall / runs] * runs)


def resume(host: HostProcess, client: Client, db: sqlite3.Connection, run_ids: list[str]) -> Window:
    """One window: each run sent its message and seen done before the next."""
    walls = []
    cpu_before = host.cpu()
    for i, run_id in enumerate(run_ids):
        began = time.perf_counter()
        client.send_message(run_id, "go", {"i": i})
        wait_status(db, [run_id], "done")
        walls.append(time.perf_counter() - began)
    return measured(host, cpu_before, host.cpu(), len(run_ids), walls)


def raw_step_us(workflow_file: Path, depth: int) -> float:
    """The function body with its steps as plain calls (`add.fn`), no durability: µs per step."""
    spec = importlib.util.spec_from_file_location("replay_bench_workflow", workflow_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    add = module.add.fn

    def body() -> int:
        n = 0
        for _ in range(depth):
            n = add(n)
        return add(n)

    best = float("inf")
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(20):
            body()
        best = min(best, (time.perf_counter() - began) / 20)
    return best * 1e6 / (depth + 1)


def worker_pids(host: HostProcess) -> list[int]:
    return [child.pid for child in psutil.Process(host.pid).children(recursive=True)]


def profile(host: HostProcess, client: Client, db: sqlite3.Connection, spec: str, depth: int, runs: int,
            directory: Path) -> None:
    spy = py_spy()
    if spy is None:
        print("--profile: py-spy not found (`make bench` installs the `bench` extra); no profile")
        return
    directory.mkdir(parents=True, exist_ok=True)
    run_ids, _ = fill(host, client, db, spec, depth, runs)
    workers = worker_pids(host)
    recorders = [("replay-host.txt", host.pid)] + [("replay-worker.txt" if n == 0 else f"replay-worker-{n}.txt", pid)
                                                   for n, pid in enumerate(workers)]
    procs = []
    for name, pid in recorders:
        out = directory / name
        log = open(out.with_suffix(".log"), "wb")  # noqa: SIM115  (closed below)
        procs.append((out, log, subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "--threads", "--native",
             # The host's threads wait most of the time: its samples are those holding the GIL.
             *(["--gil"] if pid == host.pid else []), "--output", str(out)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)))
    time.sleep(1.0)  # attached before the first message
    window = resume(host, client, db, run_ids)
    for out, log, proc in procs:
        proc.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        text = out.with_suffix(".log").read_text(errors="replace").strip().splitlines()
        print(f"profile ({runs} resumes at depth {depth}, {window.total_ms:.1f} ms CPU each while recorded, "
              f"wall p50 {pct(window.walls_s, 0.5) * 1000:.0f} ms): {out} ({' | '.join(text[-1:])})")
        if out.exists():
            for line in summarise(read_stacks(out), 15, by_thread=True).splitlines():
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--depths", type=int, nargs="+", default=[0, 10, 100, 1000],
                        help="steps recorded before the wait (default 0 10 100 1000; 0 is the reference)")
    parser.add_argument("--runs", type=int, default=8,
                        help="resumes per depth and round (default 8: CPU is read in 10 ms ticks per window)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, depths interleaved (default 3)")
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="record py-spy profiles of the host and the worker during more resumes at the "
                        "deepest depth, after the figures")
    parser.add_argument("--profile-runs", type=int, default=5, help="resumes profiled (default 5)")
    args = parser.parse_args()
    depths = sorted(set(args.depths) | {0})

    base = Path(tempfile.mkdtemp(prefix="pwr-", dir="/tmp"))  # short: AF_UNIX socket paths
    began = time.perf_counter()
    try:
        workflow_file = base / "resumer.py"
        workflow_file.write_text(WORKFLOW_SOURCE)
        spec = f"{workflow_file}:resumer"
        print(f"a function run resuming after a wait at step {', '.join(map(str, depths))}: {args.runs} resumes "
              f"per depth and round, {args.rounds} rounds; {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python {sys.version.split()[0]}, SQLite "
              f"{sqlite3.sqlite_version}, state under {base}", flush=True)
        host = HostProcess(base / "host", 1, "FULL")
        try:
            host.wait_ready()
            db = sqlite3.connect(f"file:{host.database}?mode=ro", uri=True, timeout=10)
            with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
                # Warm-up: the worker has loaded the workflow's modules, the host's caches are filled.
                warm, _ = fill(host, client, db, spec, 10, 2)
                resume(host, client, db, warm)
                fills: dict[int, Window] = {}
                parked: dict[int, list[str]] = {}
                for depth in depths:
                    parked[depth], fills[depth] = fill(host, client, db, spec, depth, args.runs * args.rounds)
                windows: dict[int, list[Window]] = {depth: [] for depth in depths}
                for round_no in range(args.rounds):
                    for depth in depths:
                        batch = parked[depth][round_no * args.runs:(round_no + 1) * args.runs]
                        windows[depth].append(resume(host, client, db, batch))
                if args.profile is not None:
                    profile(host, client, db, spec, max(depths), args.profile_runs, Path(args.profile))
            db.close()
        finally:
            host.stop()
        report(depths, fills, windows, workflow_file, host.pid)
        print(closing_line(began))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def report(depths: list[int], fills: dict[int, Window], windows: dict[int, list[Window]], workflow_file: Path,
           host_pid: int) -> None:
    runs = windows[depths[0]][0].runs
    print(f"resuming launches (host pid {host_pid}, max_workers 1, SQLite synchronous=FULL), CPU ms per launch "
          f"(median of the rounds; each round's host + worker in brackets; ± {10 / runs:.1f} ms: 10 ms ticks over "
          f"{runs} launches), wall message.send → done:")
    median: dict[int, tuple[float, float, float]] = {}
    for depth in depths:
        rounds = windows[depth]
        host_ms = statistics.median(w.host_ms for w in rounds)
        worker_ms = statistics.median(w.worker_ms for w in rounds)
        total_ms = statistics.median(w.total_ms for w in rounds)
        median[depth] = (host_ms, worker_ms, total_ms)
        walls = [s * 1000 for w in rounds for s in w.walls_s]
        changed = sum(w.workers_changed for w in rounds)
        note = f"; {changed} worker process(es) started or ended in the windows" if changed else ""
        print(f"  at step {depth:>5}: host {host_ms:6.1f} + worker {worker_ms:6.1f} = {total_ms:6.1f} ms "
              f"[{', '.join(f'{w.total_ms:.1f}' for w in rounds)}]   wall p50 {pct(walls, 0.5):6.1f} ms, max "
              f"{max(walls):6.1f} ms{note}")
    raw_us = raw_step_us(workflow_file, max(depths))
    deeper = [depth for depth in depths if depth > 0]
    base_fill = fills[0]
    print("per recorded step (CPU at step N − at step 0, / N), host + worker:")
    for depth in deeper:
        host_ms, worker_ms, total_ms = median[depth]
        replay_us = (total_ms - median[0][2]) * 1000 / depth
        new_us = (fills[depth].total_ms - base_fill.total_ms) * 1000 / depth
        print(f"  at step {depth:>5}: replay {replay_us:7.1f} µs (host {(host_ms - median[0][0]) * 1000 / depth:.1f}, "
              f"worker {(worker_ms - median[0][1]) * 1000 / depth:.1f}); a new step (the fill) {new_us:7.1f} µs; "
              f"replay / new {replay_us / new_us:.2f}×; replay / raw {replay_us / raw_us:,.0f}×")
    print(f"  raw: the function body here with its steps as plain calls, no durability: {raw_us:.2f} µs per step")
    if TARGET_DEPTH in median:
        total = median[TARGET_DEPTH][2]
        print(f"target of issue 33: the launch resuming at step {TARGET_DEPTH:,} costs {total:.1f} ms of host + worker "
              f"CPU (target < {TARGET_MS:.0f} ms: {'met' if total < TARGET_MS else 'NOT met'}); of which the replay "
              f"(− the launch at step 0) {total - median[0][2]:.1f} ms")
    else:
        print(f"target of issue 33 (resuming at step {TARGET_DEPTH:,} < {TARGET_MS:.0f} ms): not measured (--depths)")


if __name__ == "__main__":
    main()
