"""Runs held by a rate limit: what 10,000 of them cost an idle host, against an empty one.

Every host is a real `bin/piwf-host --max-workers W` process (bench/throughput.py's HostProcess), every
request goes through its Unix socket. The workflow: `send: compute` under `rate=rate_limit(1,
per_s=a year)`, so the first run starts and every later one is held by the claim (`held_by`
`rate_key:paced`, past the end of the queue's walk) with the key's timer a year away. Prints, from
one run:

  1. fill      --held runs started through the host (`run.start` from 4 connections), until
               host.status counts them all queued but the one that ran; the rate per tenth and the
               host's CPU per held run.
  2. restart   the fill host stopped (SIGTERM); "held": a host started on that state; "empty": a
               host started on a new state. Start → ready for each.
  3. idle      both hosts idle side by side (after --settle-s), over the same --idle-s window: CPU
               of the host alone and with its workers (schedstat, ns), RSS, threads; held/empty
               (target ≤ 1.1×, CPU and memory). Held runs are rows: the claim never reads them
               (a scheduler tick's `claimable_exists` stops at queue class 3) and the housekeeper
               probes one index for the nearest timer, as for sleepers (bench/sleepers.py).
  4. release   on the held host, the key's timer brought forward (a new limit of 2,000 per second
               takes effect as held runs are let go in batches): how long until every held run is
               done, as a sanity check that held runs do start (not a target).

Run: .venv/bin/python bench/rate_held.py [--held 10000] [--workers 4] [--idle-s 20] [--settle-s 5]
     [--no-release]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line  # noqa: E402  (bench/ is the script's directory)
from sleepers import MIB, SUBMITTERS, counts, idle_window, ratio, start_host  # noqa: E402
from throughput import WAIT_S, HostProcess  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

WORKFLOWS = '''\
"""One start a year: every run after the first is held by the rate limit."""

from piwf_actors.workflows import compute, define_workflow, rate_limit

paced = define_workflow(name="paced", start_at="send", edges=[], nodes={
    "send": compute(run=lambda ctx: {"sent": ctx.input["n"]}),
}, rate=rate_limit(1, per_s=365 * 86400))
'''


def fill(host: HostProcess, spec: str, total: int) -> None:
    """`total` runs through the host; prints the rate per tenth."""
    next_n = 0
    lock = threading.Lock()
    errors: list[BaseException] = []

    def submit() -> None:
        nonlocal next_n
        try:
            with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
                while True:
                    with lock:
                        if next_n >= total or errors:
                            return
                        n = next_n
                        next_n += 1
                    client.start(spec, {"n": n})
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=submit, name=f"bench-fill-{n}", daemon=True) for n in range(SUBMITTERS)]
    step = max(1, total // 10)
    next_mark = step
    began = last_t = time.perf_counter()
    cpu_last = host.cpu()
    last_held = 0
    print(f"1. fill: {total} runs under rate_limit(1, per_s=a year) through the host "
          f"(max_workers={host.max_workers})", flush=True)
    for thread in threads:
        thread.start()
    with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
        deadline = time.monotonic() + max(WAIT_S, total / 20)
        while True:
            now_counts = counts(client)
            held = now_counts.get("queued", 0)
            if errors:
                raise errors[0]
            finished = held >= total - 1 and now_counts.get("done") == 1
            if held >= next_mark or (finished and held > last_held):
                now, cpu = time.perf_counter(), host.cpu()
                done = held - last_held
                print(f"  {held:7d} held  {done / (now - last_t):6.0f} runs/s over the last {done}  host "
                      f"{(cpu.process_s - cpu_last.process_s) * 1000 / max(done, 1):.2f} ms CPU per run  host RSS "
                      f"{psutil.Process(host.pid).memory_info().rss / MIB:.0f} MiB", flush=True)
                last_t, cpu_last, last_held = now, cpu, held
                next_mark = (held // step + 1) * step
            if finished:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"fill: {now_counts}")
            time.sleep(0.2)
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    print(f"  {total} runs in {elapsed:.0f} s ({total / elapsed:.0f}/s)", flush=True)


def release(host: HostProcess, total: int) -> None:
    """Bring the key's timer forward with a budget that lets every held run start, and time them."""
    began = time.perf_counter()
    conn = sqlite3.connect(host.database, timeout=30)
    try:  # behind the host's back, as an operator's edit would be: a bigger budget, due now
        with conn:
            conn.execute("UPDATE run SET rate_max = ?, rate_per_s = 1 WHERE rate_key = 'paced'", (total,))
            conn.execute("UPDATE flow_timer SET wake_at = ?, rate_max = ?, rate_per_s = 1", (time.time(), total))
    finally:
        conn.close()
    with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
        deadline = time.monotonic() + max(WAIT_S, total / 5)
        while counts(client).get("done", 0) < total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"release: {counts(client)}")
            time.sleep(0.5)
    elapsed = time.perf_counter() - began
    print(f"4. release: {total - 1} held runs let go and done in {elapsed:.1f} s ({(total - 1) / elapsed:.0f} runs/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--held", type=int, default=10_000, help="runs held by the rate limit (default 10,000)")
    parser.add_argument("--workers", type=int, default=4, help="every host's --max-workers (default 4)")
    parser.add_argument("--idle-s", type=float, default=20.0, help="the idle window (default 20 s)")
    parser.add_argument("--settle-s", type=float, default=5.0, help="wait before the idle window (default 5 s)")
    parser.add_argument("--no-release", action="store_true", help="skip step 4")
    args = parser.parse_args()
    total = args.held

    base = Path(tempfile.mkdtemp(prefix="pwr-", dir="/tmp"))  # short: AF_UNIX socket paths
    began = time.perf_counter()
    hosts: dict[str, HostProcess] = {}
    try:
        (base / "paced.py").write_text(WORKFLOWS)
        spec = f"{base / 'paced.py'}:paced"
        print(f"{total} runs held by a rate limit, max_workers={args.workers}; {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, python {sys.version.split()[0]}, SQLite "
              f"{sqlite3.sqlite_version}, state under {base}", flush=True)
        filler, _ = start_host(base / "held", args.workers)
        try:
            fill(filler, spec, total)
        finally:
            filler.stop()
        print("2. restart → ready (socket answers, every worker started):")
        hosts["held"], took = start_host(base / "held", args.workers)
        print(f"  held      {took:.2f} s on the state with {total - 1} held runs")
        hosts["empty"], took = start_host(base / "empty", args.workers)
        print(f"  empty     {took:.2f} s on a new state", flush=True)
        time.sleep(args.settle_s)
        idle = idle_window(hosts, args.idle_s)
        print(f"3. idle, both hosts side by side over the same {args.idle_s:g} s (CPU: schedstat, ns):")
        for name, figure in idle.items():
            print(f"  {name:<6} host {figure.host_s * 1000:6.1f} ms CPU ({figure.host_s / args.idle_s:5.2%} of a core), "
                  f"with {figure.workers} workers {(figure.host_s + figure.workers_s) * 1000:6.1f} ms; RSS host "
                  f"{figure.host_rss / MIB:6.1f} MiB, workers {figure.workers_rss / MIB:6.1f} MiB; {figure.threads} "
                  "host threads" + ("; a thread or worker came or went during the window" if figure.threads_changed
                                    else ""))
        held, empty = idle["held"], idle["empty"]
        cpu_ratio = held.host_s / empty.host_s if empty.host_s else float("inf")
        rss_ratio = held.host_rss / empty.host_rss
        print(f"  held ({total - 1}) / empty: host CPU {ratio(held.host_s, empty.host_s)}, host + workers "
              f"{ratio(held.host_s + held.workers_s, empty.host_s + empty.workers_s)}, host RSS "
              f"{ratio(held.host_rss, empty.host_rss)}, host + workers RSS "
              f"{ratio(held.host_rss + held.workers_rss, empty.host_rss + empty.workers_rss)} (target ≤ 1.1×: CPU "
              f"{'met' if cpu_ratio <= 1.1 else 'NOT met'}, memory {'met' if rss_ratio <= 1.1 else 'NOT met'})",
              flush=True)
        if not args.no_release:
            release(hosts["held"], total)
        print(closing_line(began))
    finally:
        for host in hosts.values():
            host.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
