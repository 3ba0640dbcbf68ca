"""Event fan-in: 1,000 events into batches of 100 against recording 1,000 events and starting 10 runs
directly, measured in the same run (issue target: fan-in ≤ 1.2× the direct way, host + workers CPU).

Two real hosts (`bin/piwf-host --project DIR --max-workers W`, durable defaults; bench/throughput.py's
HostProcess), each on its own state directory, each with one one-node workflow in its project:

  fan-in   `collect` declares `on_event("item")` and `batch(max_items=100, max_wait_s=3600)`: the
           round emits --events `item` events (`event.emit` over the socket, one request at a time)
           and waits until --events/100 batch runs are done (the host's event keeper decides the
           events, adds them to the open batch and starts each full one).
  direct   `collect` without `on_event`: the round emits the same events (nothing subscribes to
           them), then starts --events/100 runs with `run.start`, each with the input a batch run
           gets ({events: [100 events as a batch run sees them], key}), and waits until they are done.

Per round and kind: wall time from the first emit to the last run done, CPU of the host process and
of its workers over that window (/proc and psutil), CPU per event. The kinds alternate for --rounds
rounds after a warm-up round each; the medians give fan-in / direct.

Run: .venv/bin/python bench/events.py [--events 1000] [--batch 100] [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line  # noqa: E402  (bench/ is the script's directory)
from throughput import HostProcess  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

COLLECT = '''\
"""One node that counts the events of its batch."""

from piwf_actors.workflows import batch, compute, define_workflow, on_event

collect = define_workflow(
    name="collect", start_at="count", edges=[],
    nodes={{"count": compute(run=lambda ctx: {{"events": len(ctx.input["events"]), "key": ctx.input["key"]}})}},
    {options})
'''
WAIT_S = 300.0


def _project(base: Path, fan_in: bool, batch_size: int) -> Path:
    project = base / ("fan-in" if fan_in else "direct") / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    options = (f'on_event=on_event("item"), batch=batch(max_items={batch_size}, max_wait_s=3600),' if fan_in
               else "")
    (project / ".piwf" / "workflows" / "collect.py").write_text(COLLECT.format(options=options))
    return project


def _done(client: Client) -> int:
    return int((client.status().get("runs") or {}).get("done", 0))


def _wait_done(client: Client, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while _done(client) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} runs done after {WAIT_S} s: {client.status().get('runs')}")
        time.sleep(0.01)


def one_round(host: HostProcess, fan_in: bool, events: int, batch_size: int, round_no: int) -> dict[str, float]:
    runs = events // batch_size
    with Client(socket_path=host.socket_path) as client:
        done_before = _done(client)
        before = host.cpu()
        began = time.perf_counter()
        emitted = []
        for n in range(events):
            receipt = client.request("event.emit", {"name": "item", "data": {"round": round_no, "n": n}}).receipt
            emitted.append({"event_id": receipt["event_id"], "name": "item", "key": None,
                            "data": {"round": round_no, "n": n}, "emitted_at": receipt["emitted_at"]})
        if not fan_in:
            for start in range(0, events, batch_size):
                client.request("run.start", {"workflow": "collect", "project_path": str(host.project),
                                             "input": {"events": emitted[start:start + batch_size], "key": ""}})
        _wait_done(client, done_before + runs)
        wall = time.perf_counter() - began
        after = host.cpu()
    host_s = after.process_s - before.process_s
    workers_s = sum(cpu - before.children.get(key, 0.0) for key, cpu in after.children.items())
    workers_s += after.reaped_children_s - before.reaped_children_s
    return {"wall_s": wall, "host_s": host_s, "workers_s": workers_s, "cpu_s": host_s + workers_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    began = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix="pw-ev-", dir="/tmp"))
    hosts: dict[str, HostProcess] = {}
    try:
        for kind in ("fan-in", "direct"):
            project = _project(base, kind == "fan-in", args.batch)
            state = base / kind / "s"
            state.mkdir()
            host = HostProcess(state, args.workers, "FULL", extra=("--project", str(project)))
            host.project = project  # type: ignore[attr-defined]
            host.wait_ready()
            hosts[kind] = host
        time.sleep(1.5)  # the fan-in host's event keeper loads its project and records the subscription
        results: dict[str, list[dict[str, float]]] = {"fan-in": [], "direct": []}
        for round_no in range(args.rounds + 1):
            for kind in ("fan-in", "direct"):
                figures = one_round(hosts[kind], kind == "fan-in", args.events, args.batch, round_no)
                if round_no == 0:
                    continue  # warm-up: workflow loads, first queries
                results[kind].append(figures)
                print(f"round {round_no} {kind:7s} wall {figures['wall_s']:6.2f} s  host {figures['host_s']:6.2f} s "
                      f"workers {figures['workers_s']:5.2f} s  cpu/event {1000 * figures['cpu_s'] / args.events:.2f} ms",
                      flush=True)
        medians: dict[str, dict[str, float]] = {
            kind: {field: statistics.median(r[field] for r in rows) for field in rows[0]}
            for kind, rows in results.items()}
        print(f"\n{args.events} events into batches of {args.batch} ({args.events // args.batch} runs), "
              f"{args.workers} workers, medians of {args.rounds} rounds:")
        for kind in ("fan-in", "direct"):
            m = medians[kind]
            print(f"  {kind:7s} wall {m['wall_s']:.2f} s, CPU host {m['host_s']:.2f} s + workers {m['workers_s']:.2f} s "
                  f"= {m['cpu_s']:.2f} s")
        ratio_cpu = medians["fan-in"]["cpu_s"] / medians["direct"]["cpu_s"]
        ratio_wall = medians["fan-in"]["wall_s"] / medians["direct"]["wall_s"]
        verdict = "met" if ratio_cpu <= 1.2 else "NOT met"
        print(f"  fan-in / direct: CPU {ratio_cpu:.2f}×, wall {ratio_wall:.2f}× (target CPU ≤ 1.2×: {verdict})")
    finally:
        for host in hosts.values():
            host.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(closing_line(began))


if __name__ == "__main__":
    main()
