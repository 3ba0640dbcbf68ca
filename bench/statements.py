"""The SQL statements the writer sends for one trivial run, listed by write command.

Starts a host in this process (SQLite in a temporary state directory, or `--database URL`), runs a
few warm-up runs of a graph workflow of one trivial compute node, then traces every statement the
writer's batches send (store/statement_count.py) while one more run is started, claimed, run by a
worker and finished, and prints them grouped by the write command that sent them ("batch" for what
the transaction itself costs: BEGIN, the lease read, COMMIT). Commands of no run (lease renewals,
the host's own ticks) are listed apart. The statement count printed last is the figure
bench/throughput.py reports per run (writer.statements in host.status), for one run alone: a
burst shares each batch's BEGIN/COMMIT among many runs.

With `--burst N`, N runs are started at once from 4 threads instead (max_workers 8), and each
statement is shown with its count per run: batches then share their BEGIN, lease read and COMMIT,
and the held-back rows of many commands go in with one statement, as in bench/throughput.py's burst.

Run: .venv/bin/python bench/statements.py [--database URL] [--nodes N] [--burst N]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import threading
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

from piwf_actors import HostConfig, start_host  # noqa: E402
from piwf_actors.store import batch as batch_module  # noqa: E402
from piwf_actors.store.statement_count import CountingConnection  # noqa: E402

WORKFLOW = '''\
from piwf_actors.workflows import compute, define_workflow, edge

trivial = define_workflow(
    name="trivial{n}",
    start_at="n0",
    nodes={{{nodes}}},
    edges=[{edges}],
)
'''


def workflow_source(nodes: int) -> str:
    body = ", ".join(f'"n{i}": compute(run=lambda ctx: {{"n": {i}}})' for i in range(nodes))
    edges = ", ".join(f'edge("n{i}", "n{i + 1}")' for i in range(nodes - 1))
    return WORKFLOW.format(n=nodes, nodes=body, edges=edges)


class Tracer:
    """Which command is being applied (the writer's thread), and the statements each sent."""

    def __init__(self) -> None:
        self.on = False
        self.command = "batch"
        self.lines: list[tuple[str, str]] = []
        self.thread: int | None = None

    def trace(self, sql: str) -> None:
        if self.on:
            self.lines.append((self.command, " ".join(sql.split())))


def install(tracer: Tracer) -> None:
    """Trace every CountingConnection and label statements with the command applying (bench-only patch)."""
    plain_init = CountingConnection.__init__
    plain_apply = batch_module._apply_one

    def init(self: CountingConnection, conn: object, trace: object = None) -> None:
        plain_init(self, conn, tracer.trace)

    def apply_one(conn, engine, cmd, *args, **kwargs):  # type: ignore[no-untyped-def]
        tracer.command = cmd.name
        try:
            return plain_apply(conn, engine, cmd, *args, **kwargs)
        finally:
            tracer.command = "batch"

    CountingConnection.__init__ = init  # type: ignore[method-assign]
    batch_module._apply_one = apply_one


def writer_cpu_s() -> float:
    """CPU seconds of the writer actor's thread so far (user + system, /proc/self/task/<tid>/stat)."""
    thread = next(t for t in threading.enumerate() if t.name.startswith("DatabaseWriter"))
    fields = Path(f"/proc/self/task/{thread.native_id}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def shorten(sql: str) -> str:
    sql = re.sub(r"\s+", " ", sql)
    return sql if len(sql) <= 150 else sql[:147] + "..."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default=None, help="a PostgreSQL URL (default: SQLite in a temp dir)")
    parser.add_argument("--nodes", type=int, default=1, help="compute nodes of the trivial workflow (default 1)")
    parser.add_argument("--burst", type=int, default=0, help="start this many runs at once (default: one run alone)")
    args = parser.parse_args()
    tracer = Tracer()
    install(tracer)
    with tempfile.TemporaryDirectory(prefix="piwf-st-", dir="/tmp") as tmp:
        state = Path(tmp)
        flow = state / "trivial.py"
        flow.write_text(workflow_source(args.nodes))
        host = start_host(HostConfig(state_dir=state, database=args.database, max_workers=8 if args.burst else 1,
                                     schedules=False))
        try:
            host.wait_active(30)
            for i in range(3):
                host.wait_for_run(host.start_run(f"{flow}:trivial", {"i": i}).run_id, timeout=60)
            tracer.on = True
            writer_cpu_before = writer_cpu_s()
            if args.burst:
                started: list[str] = []

                def submit(part: int) -> None:
                    for i in range(part, args.burst, 4):
                        started.append(host.start_run(f"{flow}:trivial", {"i": i}, client_id="bench",
                                                      idempotency_key=f"run-{i}").run_id)

                threads = [threading.Thread(target=submit, args=(part,)) for part in range(4)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                for run_id in started:
                    host.wait_for_run(run_id, timeout=120)
            else:
                # With an idempotency key, as bench/throughput.py's clients start their runs.
                run_id = host.start_run(f"{flow}:trivial", {"i": 99}, client_id="bench",
                                        idempotency_key="run-99").run_id
                host.wait_for_run(run_id, timeout=60)
            # The runs' ends are committed; the writer may still be answering: a lease write after it is apart.
            threading.Event().wait(0.3)
            tracer.on = False
            writer_cpu = writer_cpu_s() - writer_cpu_before
        finally:
            host.stop("bench done")
    runs = max(args.burst, 1)
    by_command: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for command, sql in tracer.lines:
        by_command[command][shorten(sql)] += 1
    apart = {name for name in by_command
             if name.startswith(("lease.", "runner_lease.", "host.", "scheduler.renew", "scheduler.settle"))}
    total = sum(sum(v.values()) for k, v in by_command.items() if k not in apart)
    for name, statements in by_command.items():
        mark = " (not the runs')" if name in apart else ""
        print(f"{name}{mark}: {sum(statements.values()) / runs:.2f} per run")
        for sql, count in statements.most_common():
            print(f"    {count / runs:5.2f}  {sql}")
    what = f"each of {args.burst} runs started at once" if args.burst else "one trivial run alone"
    print(f"statements per run ({what}, {args.nodes} node(s)): {total / runs:.1f}")
    print(f"writer thread CPU per run: {writer_cpu * 1000 / runs:.3f} ms (statements traced: the trace's own cost "
          f"included)")


if __name__ == "__main__":
    main()
