"""Durable single-row commands/s through the DatabaseWriter vs raw sqlite3.

Prints, from one run on this machine and the same pragmas (WAL,
synchronous=FULL unless --synchronous says otherwise):
  raw-1    stdlib sqlite3, one INSERT per transaction (one fsync each)
  raw-100  stdlib sqlite3, 100 INSERTs per transaction
  writer   `bench.note` commands (one run_event row each, its own savepoint;
           registered here, a command of this benchmark only)
           through the writer actor from N concurrent sender threads, each
           waiting for its commit before sending the next
and the ratios writer/raw-1 and writer/raw-100.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piwf_actors.actors.writer import start_writer  # noqa: E402
from piwf_actors.store.commands.registry import WriteContext, command  # noqa: E402
from piwf_actors.store.database import open_store  # noqa: E402
from piwf_actors.store.events import append_event  # noqa: E402


@command("bench.note")
def bench_note(ctx: WriteContext, args: dict) -> int:
    """Append one `note` event to a run: the single-row command the senders send."""
    seq = append_event(ctx.conn, args["run_id"], "note", ctx.now, payload=args.get("payload"))
    ctx.changes.touch("run_event", args["run_id"])
    return seq


def raw(path: Path, rows_per_tx: int, seconds: float, synchronous: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, run_id TEXT, seq INTEGER, payload TEXT, created_at REAL)")
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        conn.execute("BEGIN IMMEDIATE")
        for _ in range(rows_per_tx):
            conn.execute("INSERT INTO t (run_id, seq, payload, created_at) VALUES (?, ?, ?, ?)",
                         ("run_x", done, '{"i":1}', time.time()))
            done += 1
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return done / elapsed


def through_writer(path: Path, senders: int, seconds: float, synchronous: str) -> tuple[float, float]:
    from piwf_actors.store.database import StoreOptions

    options = StoreOptions(synchronous=synchronous)
    open_store(path, options).close()
    handle = start_writer(path, options)
    try:
        epoch = handle.call("lease.acquire", {"host_id": "bench", "token_hash": "x", "pid": os.getpid(),
                                              "process_start_identity": "0", "lease_s": 3600})["epoch"]
        writer = handle.with_epoch(epoch)
        run_ids = [writer.call("run.start", {"spec": {"workflow": "bench"}})["receipt"]["run_id"]
                   for _ in range(senders)]
        counts = [0] * senders
        stop = threading.Event()
        go = threading.Barrier(senders + 1)

        def send(n: int) -> None:
            go.wait()
            run_id = run_ids[n]
            while not stop.is_set():
                writer.execute("bench.note", {"run_id": run_id, "payload": {"i": counts[n]}}).unwrap()
                counts[n] += 1

        threads = [threading.Thread(target=send, args=(n,)) for n in range(senders)]
        for t in threads:
            t.start()
        go.wait()
        start = time.perf_counter()
        before = writer.stats()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - start
        after = writer.stats()
        batches = max(after.commits - before.commits, 1)
        return sum(counts) / elapsed, sum(counts) / batches
    finally:
        handle.ref.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--senders", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--dir", default=None, help="directory for the databases (default: a temp dir)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="piwf-bench-", dir=args.dir))
    try:
        raw1 = raw(base / "raw1.db", 1, args.seconds, args.synchronous)
        raw100 = raw(base / "raw100.db", 100, args.seconds, args.synchronous)
        print(f"synchronous={args.synchronous}, {args.seconds:.0f} s per figure, {os.cpu_count()} cores")
        print(f"raw sqlite3, 1 row per transaction:    {raw1:10,.0f} rows/s")
        print(f"raw sqlite3, 100 rows per transaction: {raw100:10,.0f} rows/s")
        for senders in args.senders:
            rate, per_batch = through_writer(base / f"writer{senders}.db", senders, args.seconds, args.synchronous)
            print(f"writer actor, {senders:3d} senders:            {rate:10,.0f} commands/s "
                  f"(avg {per_batch:5.1f} per commit; {rate / raw1:5.2f}x raw-1, {rate / raw100:6.1%} of raw-100)")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
