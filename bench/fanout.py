"""Fan-out: one run whose `map_workflow` starts N children, next to N independent runs, in one run.

The child is a one-node compute workflow. Against one real host (`bin/piwf-host --max-workers 8`,
durable defaults, its own process; bench/throughput.py's HostProcess), each round measures:

  independent   N runs of the child submitted at once: bench/throughput.py's burst (4 submitter
                connections, `run.start` each, then one `host.status` every 20 ms until all are
                finished). runs/s = N / (first submit → last finished_at).
  fan-out       one `run.start` of a parent whose only node is `map_workflow(child, items=range(N),
                max_parallel=P)`, then one `host.status` every 20 ms (as the burst) until its
                counts show the children and the parent finished, for P = None (every child
                queued at once) and P = --max-parallel (8: the others start held and each
                child's end lets the next go). children/s = N / (the parent's submit → the
                parent's finished_at): it includes the parent's own launch, the node that creates
                the children, and the parent's resume after the last child (its node_finished
                and run_finished). The children alone (first child created_at → last child
                finished_at) are printed beside it, and where the parent's time went (submit →
                children created → last child finished → parent finished).

Per phase: the rate, latency p50/p99 (independent: submit → finished_at; children: created_at →
finished_at, queueing included), and CPU per run or child of the host process (by thread, named
by `py-spy dump` after the phase), its workers (children of the host, psutil, with the reaped
ones), host + workers. Times of runs are read from the host's state.db (read-only) after the
phase, never during it. The closing lines print fan-out / independent (issue target: ≥ 0.8×) for
each P, from the medians over the rounds. Rounds alternate the three phases on the same host, so
the state grows by the same runs for each.

Run: .venv/bin/python bench/fanout.py [--quick] [--children 1000] [--rounds 3] [--workers 8]
     [--max-parallel 8] [--profile DIR]
`--quick`: 200 children, 2 rounds (~10 s). `--profile DIR`: after the rounds, one more fan-out of
each kind recorded with `py-spy record --gil` (bench/throughput.py's PySpyRecorder) and
summarised (bench/profile_top.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line, pct  # noqa: E402  (bench/ is the script's directory)
from profile_top import read_stacks, summarise  # noqa: E402
from throughput import FINAL, WAIT_S, CpuUse, HostProcess, MachineBusy, PySpyRecorder, burst, cpu_use, py_spy  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

WORKFLOWS = '''\
"""The fan-out bench's workflows: a one-node child, and parents that map it over range(n)."""

from piwf_actors.workflows import compute, define_workflow, map_workflow

child = define_workflow(name="child", start_at="a", edges=[],
                        nodes={{"a": compute(run=lambda ctx: {{"x": ctx.input}})}})
fan_all = define_workflow(name="fan_all", start_at="m", edges=[], nodes={{
    "m": map_workflow(child, items=lambda ctx: list(range(ctx.input["n"])), max_parallel=None)}})
fan_limited = define_workflow(name="fan_limited", start_at="m", edges=[], nodes={{
    "m": map_workflow(child, items=lambda ctx: list(range(ctx.input["n"])), max_parallel={max_parallel})}})
'''


@dataclass
class Figure:
    """One phase: N runs (or children) finished in `elapsed_s`, with their latencies and CPU."""

    label: str
    count: int
    elapsed_s: float
    latencies_s: list[float]
    not_done: int
    cpu: CpuUse
    machine_busy: float
    notes: list[str]

    @property
    def rate(self) -> float:
        return self.count / self.elapsed_s

    def cpu_ms(self, seconds: float) -> float:
        return seconds * 1000 / self.count


def read_db(database: Path, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def finished_runs(client: Client) -> int:
    """Runs finished, from host.status's counts: what the burst polls too, so both phases pay the same."""
    counts = client.status().get("runs") or {}
    return sum(int(counts.get(status, 0)) for status in FINAL)


def independent(host: HostProcess, spec: str, count: int) -> Figure:
    phase = burst(host, spec, count)
    return Figure(f"independent: {count} runs of the child, submitted at once from 4 connections", phase.runs,
                  phase.elapsed_s, phase.latencies_s, phase.not_done, phase.cpu, phase.machine_busy, phase.notes)


def fan_out(host: HostProcess, spec: str, count: int, label: str) -> Figure:
    """One parent run mapping the child over range(count); done when run.get shows the parent final."""
    with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
        finished_before = finished_runs(client)
        cpu_before = host.cpu()
        machine = MachineBusy()
        submitted = time.time()
        parent = client.start(spec, {"n": count})["run_id"]
        deadline = time.monotonic() + WAIT_S
        while finished_runs(client) < finished_before + count + 1:  # the children and the parent
            if time.monotonic() > deadline:
                raise TimeoutError(f"fan-out {parent} not finished after {WAIT_S} s")
            time.sleep(0.02)
        busy = machine.share()
        cpu_after = host.cpu()
        view = client.get(parent)
        events = client.request("run.events", {"limit": 100}, run_id=parent).receipt["events"]
    if view["status"] != "done":
        raise RuntimeError(f"fan-out {parent} ended {view['status']}: {view.get('error')}")
    rows = read_db(host.database, "SELECT status, created_at, finished_at FROM run WHERE parent_run_id = ?",
                   (parent,))
    if len(rows) != count:
        raise RuntimeError(f"fan-out {parent} has {len(rows)} children, not {count}")
    first_created = min(created for _, created, _ in rows)
    last_finished = max(finished for _, _, finished in rows if finished is not None)
    figure = Figure(label, count, view["finished_at"] - submitted,
                    [finished - created for _, created, finished in rows if finished is not None],
                    sum(1 for status, _, _ in rows if status != "done"), cpu_use(cpu_before, cpu_after,
                                                                                  host.thread_names()), busy, [])
    at = {e["kind"]: e["created_at"] for e in events if e["kind"] in ("run_started", "wait_started")}
    children_s = last_finished - first_created
    figure.notes.append(
        f"children alone (first created → last finished): {count / children_s:.1f} children/s; parent: submit → "
        f"its launch {(at.get('run_started', submitted) - submitted) * 1000:.0f} ms → children created "
        f"{(at.get('wait_started', first_created) - submitted) * 1000:.0f} ms → last child finished "
        f"{(last_finished - submitted) * 1000:.0f} ms → parent finished "
        f"{(view['finished_at'] - submitted) * 1000:.0f} ms")
    return figure


def print_figure(figure: Figure, unit: str) -> None:
    """`unit`: what the figure counts, singular ("run", "child")."""
    units = "children" if unit == "child" else f"{unit}s"
    ms = [s * 1000 for s in figure.latencies_s]
    cpu = figure.cpu
    total = figure.cpu_ms(cpu.host_s + cpu.workers_s)
    top = sorted(cpu.by_thread.items(), key=lambda item: -item[1])
    threads = ", ".join(f"{name} {figure.cpu_ms(s):.2f}" for name, s in top if figure.cpu_ms(s) >= 0.05)
    print(f"  {figure.label}" + (f"   {figure.not_done} NOT done" if figure.not_done else ""))
    print(f"    {figure.rate:7.1f} {units}/s   latency p50 {pct(ms, 0.5):7.1f} ms  p99 {pct(ms, 0.99):7.1f} ms   "
          f"cpu ms per {unit}: host {figure.cpu_ms(cpu.host_s):.2f} + workers "
          f"{figure.cpu_ms(cpu.workers_s):.2f} = {total:.2f}; host busy {cpu.host_s / figure.elapsed_s:.0%} of a "
          f"core, machine {figure.machine_busy:.0%} of {os.cpu_count()} cores")
    print(f"    host by thread, ms per {unit}: {threads}")
    for note in figure.notes:
        print(f"    {note}")


def profile(host: HostProcess, specs: dict[str, str], count: int, directory: Path) -> None:
    spy = py_spy()
    if spy is None:
        print("--profile: py-spy not found (`make bench` installs the `bench` extra); no profile")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, spec in specs.items():
        out = directory / f"host-{name}.txt"
        recorder = PySpyRecorder(spy, host.pid, out, gil=True)
        recorder.start()
        figure = fan_out(host, spec, count, name)
        outcome = recorder.stop()
        print(f"profile of the host during one more {name} of {count} (samples holding the GIL): {out} ({outcome}; "
              f"{figure.rate:.0f} children/s while recorded)")
        if out.exists():
            for line in summarise(read_stacks(out), 12, by_thread=True).splitlines():
                print(f"    {line}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 children, 2 rounds")
    parser.add_argument("--children", type=int, default=None, help="N: children of the fan-out and independent "
                        "runs (default 1000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the three phases (default 3)")
    parser.add_argument("--workers", type=int, default=8, help="the host's --max-workers (default 8)")
    parser.add_argument("--max-parallel", type=int, default=8, help="max_parallel of the limited fan-out (default 8)")
    parser.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"])
    parser.add_argument("--profile", metavar="DIR", default=None,
                        help="after the rounds, record one more fan-out of each kind with py-spy --gil into DIR")
    args = parser.parse_args()
    count = args.children or (200 if args.quick else 1000)
    rounds = args.rounds or (2 if args.quick else 3)

    base = Path(tempfile.mkdtemp(prefix="pwf-", dir="/tmp"))  # short: AF_UNIX socket paths
    began = time.perf_counter()
    try:
        (base / "fanout.py").write_text(WORKFLOWS.format(max_parallel=args.max_parallel))
        spec = {name: f"{base / 'fanout.py'}:{name}" for name in ("child", "fan_all", "fan_limited")}
        limited = f"fan-out, max_parallel={args.max_parallel}"
        print(f"{count} children per phase, {rounds} rounds, max_workers={args.workers}; {os.cpu_count()} cores, "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, python {sys.version.split()[0]}, "
              f"SQLite {sqlite3.sqlite_version}, state under {base}", flush=True)
        host = HostProcess(base / "host", args.workers, args.synchronous)
        try:
            host.wait_ready()
            burst(host, spec["child"], max(4 * args.workers, 16))  # warm-up: workers and the workflow cache
            fan_out(host, spec["fan_all"], 16, "warm-up")
            fan_out(host, spec["fan_limited"], 16, "warm-up")
            figures: dict[str, list[Figure]] = {"independent": [], "fan-out, max_parallel=None": [], limited: []}
            for number in range(1, rounds + 1):
                print(f"round {number} (host pid {host.pid}, SQLite synchronous={args.synchronous}):")
                for key, measure in (
                        ("independent", lambda: independent(host, spec["child"], count)),
                        ("fan-out, max_parallel=None",
                         lambda: fan_out(host, spec["fan_all"], count, f"fan-out: one run mapping {count} children, "
                                         "max_parallel=None")),
                        (limited, lambda: fan_out(host, spec["fan_limited"], count, f"fan-out: one run mapping "
                                                  f"{count} children, max_parallel={args.max_parallel}"))):
                    figure = measure()
                    figures[key].append(figure)
                    print_figure(figure, "run" if key == "independent" else "child")
                sys.stdout.flush()
            if args.profile is not None:
                profile(host, {"fan-out-all": spec["fan_all"], "fan-out-limited": spec["fan_limited"]}, count,
                        Path(args.profile))
        finally:
            host.stop()
        median = {key: statistics.median(f.rate for f in values) for key, values in figures.items()}
        cpu = {key: statistics.median(f.cpu_ms(f.cpu.host_s + f.cpu.workers_s) for f in values)
               for key, values in figures.items()}
        print(f"medians over {rounds} rounds, N={count}, max_workers={args.workers}:")
        print(f"  independent runs             {median['independent']:7.1f} runs/s      "
              f"host+workers {cpu['independent']:.2f} ms CPU per run")
        for key in ("fan-out, max_parallel=None", limited):
            ratio = median[key] / median["independent"]
            print(f"  {key:<28} {median[key]:7.1f} children/s  host+workers {cpu[key]:.2f} ms CPU per child; "
                  f"{ratio:.2f}× the independent runs (target ≥ 0.8×: {'met' if ratio >= 0.8 else 'NOT met'})")
        print(closing_line(began))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
