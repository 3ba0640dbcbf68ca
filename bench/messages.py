"""Message latency: a run parked in `wait_message` → `message.send` → the node finished, next to
start → done of a trivial run, measured in the same run.

One real host (`bin/piwf-host --max-workers W`, durable defaults; bench/throughput.py's
HostProcess), one client connection, one request at a time (closed loop). First --sends
listener runs (one node, `w: wait_message("go")`, so the run ends with it as the reference run
ends with its one compute node) are started and left until host.status counts them all parked.
Then, alternating, one sample of each kind:

  message    `message.send` {run_id, topic "go", payload} to the next parked listener, then a
             `run` watch on the same connection until the run is done, then `unwatch` (as
             bench/throughput.py's closed loop does after `run.start`).
  reference  `run.start` of a one-node compute run, then the same watch until it is done.

Per kind, p50/p99/max of: the request's round trip (the answer: message.send's is the commit of
the message, which settles the wait and requeues the run in the same transaction); the request
sent → the node finished (`node_finished` of `w`, or of the reference's node, from run.events:
the host's clock, read after the samples); → run_finished; → the client sees the run done (its
own clock). Then message / reference for each.

Run: .venv/bin/python bench/messages.py [--sends 200] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

from common import closing_line, pct  # noqa: E402  (bench/ is the script's directory)
from throughput import WAIT_S, HostProcess, _seen_via_watch  # noqa: E402

from piwf_actors.client import Client  # noqa: E402

WORKFLOWS = '''\
"""A run whose one node waits for a message on "go" (its output), and a one-node run for reference."""

from piwf_actors.workflows import compute, define_workflow, wait_message

listener = define_workflow(name="listener", start_at="w", edges=[], nodes={"w": wait_message("go")})
one = define_workflow(name="one", start_at="a", edges=[], nodes={"a": compute(run=lambda ctx: {"x": ctx.input})})
'''

WARMUP = 10
#: label → the node whose node_finished ends "→ node finished"
NODE = {"message": "w", "reference": "a"}


def wait_parked(client: Client, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while int((client.status().get("runs") or {}).get("parked", 0)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} listeners parked after {WAIT_S} s")
        time.sleep(0.05)


def sample(client: Client, kind: str, request: Any) -> dict[str, Any]:
    """One request (a callable returning the run id) → the run seen done: the client's times."""
    sent_at = time.time()
    t0 = time.perf_counter()
    run_id = request()
    answered = time.perf_counter()
    status, seen = _seen_via_watch(client, run_id)
    if status != "done":
        raise RuntimeError(f"{kind} run {run_id} ended {status}")
    return {"kind": kind, "run_id": run_id, "sent_at": sent_at, "answer_s": answered - t0, "seen_s": seen - t0}


def host_times(client: Client, samples: list[dict[str, Any]]) -> None:
    """Adds node_s and finished_s (request sent → node_finished / run_finished, host clock) to each."""
    for s in samples:
        events = client.request("run.events", {"limit": 100}, run_id=s["run_id"]).receipt["events"]
        node = next(e["created_at"] for e in events if e["kind"] == "node_finished" and e["node_id"] == NODE[s["kind"]])
        finished = next(e["created_at"] for e in events if e["kind"] == "run_finished")
        s["node_s"], s["finished_s"] = node - s["sent_at"], finished - s["sent_at"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sends", type=int, default=200, help="messages sent, and reference runs (default 200)")
    parser.add_argument("--workers", type=int, default=2, help="the host's --max-workers (default 2)")
    args = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="pwm-", dir="/tmp"))  # short: AF_UNIX socket paths
    began = time.perf_counter()
    try:
        (base / "messages.py").write_text(WORKFLOWS)
        listener, one = f"{base / 'messages.py'}:listener", f"{base / 'messages.py'}:one"
        print(f"{args.sends} messages and {args.sends} reference runs, max_workers={args.workers}; "
              f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, python "
              f"{sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, state under {base}", flush=True)
        host = HostProcess(base / "host", args.workers, "FULL")
        try:
            host.wait_ready()
            with Client(socket_path=host.socket_path, timeout=WAIT_S) as client:
                total = args.sends + WARMUP
                parked = [client.start(listener)["run_id"] for _ in range(total)]
                wait_parked(client, total)
                samples: list[dict[str, Any]] = []

                def send(run_id: str, i: int) -> str:
                    client.send_message(run_id, "go", {"i": i})
                    return run_id

                for i, run_id in enumerate(parked):
                    got = [sample(client, "message", lambda run_id=run_id, i=i: send(run_id, i)),
                           sample(client, "reference", lambda i=i: client.start(one, i)["run_id"])]
                    if i >= WARMUP:
                        samples.extend(got)
                host_times(client, samples)
        finally:
            host.stop()
        print(f"closed loop, one connection, alternating (host pid {host.pid}, SQLite synchronous=FULL); "
              f"request sent → …, p50 / p99 / max in ms:")
        columns = (("answer_s", "answer"), ("node_s", "node finished"), ("finished_s", "run_finished"),
                   ("seen_s", "seen done (watch)"))
        figures: dict[str, dict[str, float]] = {}
        for kind, label in (("message", "message.send → listener"), ("reference", "run.start → one-node run")):
            picked = [s for s in samples if s["kind"] == kind]
            figures[kind] = {key: pct([s[key] for s in picked], 0.5) for key, _ in columns}
            cells = "   ".join(
                f"{name} {pct([s[key] * 1000 for s in picked], 0.5):5.1f} / "
                f"{pct([s[key] * 1000 for s in picked], 0.99):5.1f} / {max(s[key] * 1000 for s in picked):5.1f}"
                for key, name in columns)
            print(f"  {label:<26} {cells}")
        print("  message / reference, p50: " + ", ".join(
            f"{name} {figures['message'][key] / figures['reference'][key]:.2f}×" for key, name in columns))
        print(closing_line(began))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
