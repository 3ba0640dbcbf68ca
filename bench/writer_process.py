"""Would the database writer pay in a process of its own? The same commands both ways, CPU per command.

Prints, from one run on this machine and the same pragmas (WAL,
synchronous=FULL unless --synchronous says otherwise), for N concurrent
sender threads (--senders, default 1 4 16 64), each sending `bench.note`
commands (one run_event row each, its own savepoint; registered here, a
command of this benchmark only) and waiting for its answer before it sends
the next, for --seconds:

  in-thread     today: `start_writer(...)`, the `DatabaseWriter` actor thread
                in this process, the senders going through its WriterHandle
                (`execute`), as bench/writer.py does.
  own process   a child interpreter (`python bench/writer_process.py --child`,
                started with subprocess over a socketpair, never forked from
                this threaded process) opens the store and runs the writer's
                loop: read one frame (msgpack, `encode_frame` / `recv_frame`)
                holding a batch of `WriteCommand.to_wire()`s, `apply_batch`
                it (the writer's options: commit_seq, its clock) and send the
                batch's `WriteResult.to_wire()`s back as one frame, with the
                commit's `ChangeNotice.to_wire()` (what subscribers in the
                parent would be told). Importing this file registers
                `bench.note` in the child too. In this process the senders
                put into a queue; one forwarding thread takes what is queued
                (up to 1000, waiting for late senders like the writer's
                `_gather`, with its constants), sends it, blocks on the
                answers frame and wakes each sender (a lock-based waiter,
                the writer's own `Waiter`). One batch is in flight at a
                time, as in the writer: the queue fills while the child
                commits.

For each mode and N: commands/s, commands per commit, and CPU per command:
this process's (`time.process_time()`, all its threads: senders, the writer
or the forwarder, pykka), the child's (psutil user+sys of its pid, 10 ms
ticks: enough over seconds of work) and their sum; then own process /
in-thread for commands/s, parent CPU per command and total CPU per command.
The parent's CPU per command is what a host would get back for its other
threads (socket threads, scheduler, gateway share its GIL); the total is what
the machine pays. The senders' own CPU is in the parent's figure in both
modes. A closing line puts the figures of every N side by side.

Run: nice -n 19 .venv/bin/python bench/writer_process.py [--seconds 3] [--senders 1 4 16 64]
     [--synchronous FULL] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piwf_actors.actors.writer import GATHER_MAX_S, GATHER_QUIET_S, start_writer  # noqa: E402
from piwf_actors.actors.writer_handle import Waiter  # noqa: E402
from piwf_actors.store.batch import apply_batch  # noqa: E402
from piwf_actors.store.commands.registry import WriteContext, command  # noqa: E402
from piwf_actors.store.database import StoreOptions, connect, open_store  # noqa: E402
from piwf_actors.store.events import append_event  # noqa: E402
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult  # noqa: E402
from piwf_actors.wire import encode_frame, recv_frame  # noqa: E402

MAX_BATCH = 1000


@command("bench.note")
def bench_note(ctx: WriteContext, args: dict) -> int:
    """Append one `note` event to a run: the single-row command the senders send."""
    seq = append_event(ctx.conn, args["run_id"], "note", ctx.now, payload=args.get("payload"))
    ctx.changes.touch("run_event", args["run_id"])
    return seq


def _result_from_wire(data: dict[str, Any]) -> WriteResult:
    from_wire = getattr(WriteResult, "from_wire", None)
    if from_wire is not None:
        return from_wire(data)
    return WriteResult(data["ok"], data["value"], data["error_code"], data["error"], data["correlation_id"],
                       data["commit_seq"])


# --- the child: the writer's loop in a process of its own -------------------------------------


def child_main(db_path: Path, synchronous: str, fd: int) -> None:
    sock = socket.socket(fileno=fd)
    db = connect(db_path, StoreOptions(synchronous=synchronous))
    db.connect(reuse_if_open=True)
    sock.sendall(encode_frame({"kind": "ready", "pid": os.getpid()}))
    commits = 0
    try:
        while True:
            frame = recv_frame(sock)
            if frame is None:
                return
            commands = [WriteCommand.from_wire(c) for c in frame["commands"]]
            now = time.time()
            outcome = apply_batch(db, commands, now, commit_seq=commits + 1, clock=time.time)
            notice = None
            if outcome.committed:
                commits += 1
                if outcome.changes.tables or outcome.changes.runs:
                    notice = ChangeNotice(commits, tuple(sorted(outcome.changes.tables)),
                                          tuple(sorted(outcome.changes.runs)), now).to_wire()
            sock.sendall(encode_frame({"kind": "write_results", "committed": outcome.committed,
                                       "results": [r.to_wire() for r in outcome.results], "notice": notice}))
    finally:
        db.close()
        sock.close()


# --- the parent side of the process boundary --------------------------------------------------


_STOP = object()


class ProcessWriter:
    """A writer in a child process: `execute` from any thread, one forwarding thread to the child."""

    def __init__(self, db_path: Path, synchronous: str) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--child", "--db", str(db_path),
                 "--synchronous", synchronous, "--fd", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),))
        finally:
            theirs.close()
        hello = recv_frame(self._sock)
        if hello is None or hello.get("kind") != "ready":
            raise RuntimeError(f"the writer process did not start: {hello!r}")
        self.ps = psutil.Process(self.proc.pid)
        self._pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.commits = 0
        self.notices = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._forward, name="writer-forwarder", daemon=True)
        self._thread.start()

    def execute(self, name: str, args: dict[str, Any], host_epoch: int | None = None,
                timeout: float = 30.0) -> WriteResult:
        waiter = Waiter()
        self._pending.put((WriteCommand(name, args, host_epoch), waiter))
        return waiter.wait(timeout)

    def call(self, name: str, args: dict[str, Any], **kwargs: Any) -> Any:
        return self.execute(name, args, **kwargs).unwrap()

    def _take(self, batch: list[tuple[WriteCommand, Callable[[WriteResult], None]]], item: Any) -> bool:
        """Add `item` and whatever else is queued to `batch`; False once the stop mark came."""
        while True:
            if item is _STOP:
                self._stopping = True
                return False
            batch.append(item)
            if len(batch) >= MAX_BATCH:
                return True
            try:
                item = self._pending.get_nowait()
            except queue.Empty:
                return True

    def _forward(self) -> None:
        last_batch = 0
        while not self._stopping:
            batch: list[tuple[WriteCommand, Callable[[WriteResult], None]]] = []
            if self._take(batch, self._pending.get()) and last_batch > 1:
                started = time.perf_counter()  # the writer's _gather: wait a moment for late senders
                while len(batch) < MAX_BATCH:
                    wait = min(GATHER_QUIET_S, started + GATHER_MAX_S - time.perf_counter())
                    if wait <= 0:
                        break
                    try:
                        item = self._pending.get(timeout=wait)
                    except queue.Empty:
                        break
                    if not self._take(batch, item):
                        break
            if not batch:
                break
            self._sock.sendall(encode_frame({"kind": "write_batch",
                                             "commands": [c.to_wire() for c, _ in batch]}))
            answer = recv_frame(self._sock)
            if answer is None:
                raise RuntimeError("the writer process closed its socket")
            if answer["committed"]:
                self.commits += 1
            if answer["notice"] is not None:
                self.notices += 1  # a real host would tell its subscribers here
            for (_, reply), result in zip(batch, answer["results"], strict=True):
                reply(_result_from_wire(result))
            last_batch = len(batch)

    def child_cpu(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        self._pending.put(_STOP)
        self._thread.join(timeout=10)
        self._sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the measurement --------------------------------------------------------------------------


@dataclass
class Figure:
    commands: int
    seconds: float
    commits: int
    parent_cpu: float
    child_cpu: float

    @property
    def rate(self) -> float:
        return self.commands / self.seconds

    @property
    def per_commit(self) -> float:
        return self.commands / max(self.commits, 1)

    @property
    def parent_us(self) -> float:
        return self.parent_cpu / self.commands * 1e6

    @property
    def child_us(self) -> float:
        return self.child_cpu / self.commands * 1e6

    @property
    def total_us(self) -> float:
        return self.parent_us + self.child_us


def _lease_and_runs(call: Callable[..., Any], senders: int) -> tuple[int, list[str]]:
    epoch = call("lease.acquire", {"host_id": "bench", "token_hash": "x", "pid": os.getpid(),
                                   "process_start_identity": "0", "lease_s": 3600})["epoch"]
    run_ids = [call("run.start", {"spec": {"workflow": "bench"}}, host_epoch=epoch)["receipt"]["run_id"]
               for _ in range(senders)]
    return epoch, run_ids


def _drive(execute: Callable[[str, dict[str, Any]], WriteResult], run_ids: list[str], seconds: float,
           commits: Callable[[], int], child_cpu: Callable[[], float]) -> Figure:
    """N sender threads, each waiting for its answer before the next; CPU and commits over the window."""
    senders = len(run_ids)
    counts = [0] * senders
    stop = threading.Event()
    go = threading.Barrier(senders + 1)

    def send(n: int) -> None:
        go.wait()
        run_id = run_ids[n]
        while not stop.is_set():
            execute("bench.note", {"run_id": run_id, "payload": {"i": counts[n]}}).unwrap()
            counts[n] += 1

    threads = [threading.Thread(target=send, args=(n,), name=f"sender-{n}") for n in range(senders)]
    for t in threads:
        t.start()
    commits_before, child_before = commits(), child_cpu()
    go.wait()
    start, cpu_start = time.perf_counter(), time.process_time()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return Figure(sum(counts), elapsed, commits() - commits_before, cpu, child_cpu() - child_before)


def in_thread(path: Path, senders: int, seconds: float, synchronous: str) -> Figure:
    options = StoreOptions(synchronous=synchronous)
    open_store(path, options).close()
    handle = start_writer(path, options)
    try:
        epoch, run_ids = _lease_and_runs(handle.call, senders)
        writer = handle.with_epoch(epoch)
        return _drive(writer.execute, run_ids, seconds, lambda: writer.stats().commits, lambda: 0.0)
    finally:
        handle.ref.stop()


def own_process(path: Path, senders: int, seconds: float, synchronous: str) -> Figure:
    open_store(path, StoreOptions(synchronous=synchronous)).close()
    writer = ProcessWriter(path, synchronous)
    try:
        epoch, run_ids = _lease_and_runs(writer.call, senders)
        return _drive(lambda name, args: writer.execute(name, args, host_epoch=epoch), run_ids, seconds,
                      lambda: writer.commits, writer.child_cpu)
    finally:
        writer.stop()


def _row(label: str, f: Figure) -> str:
    return (f"  {label:<13} {f.rate:10,.0f} {f.per_commit:10.1f} "
            f"{f.parent_us:10.1f} {f.child_us:10.1f} {f.total_us:10.1f}")


def _series(values: list[float], fmt: str = "{:.0f}") -> str:
    return "/".join(fmt.format(v) for v in values)


def _signed(values: list[float], positive: str, negative: str) -> tuple[str, list[float]]:
    """The verb for `values` and the values to print with it (a mixed series keeps its signs)."""
    if all(v >= 0 for v in values):
        return positive, values
    if all(v <= 0 for v in values):
        return negative, [-v for v in values]
    return f"{positive} (negative: {negative})", values


def interpretation(senders: list[int], results: list[tuple[Figure, Figure]]) -> str:
    parent_in = [a.parent_us for a, _ in results]
    parent_own = [b.parent_us for _, b in results]
    back_verb, back = _signed([a - b for a, b in zip(parent_in, parent_own, strict=True)],
                              "would get back", "would lose")
    back_pct = [(a - b) / a * 100 for a, b in zip(parent_in, parent_own, strict=True)]
    more_verb, more = _signed([b.total_us - a.total_us for a, b in results], "pays", "saves")
    rates = [b.rate / a.rate for a, b in results]
    return (f"parent CPU per command {_series(parent_in)} µs in-thread vs {_series(parent_own)} µs with the "
            f"writer in its own process (N = {_series(senders, '{}')}): the host's other threads {back_verb} "
            f"{_series(back)} µs per command ({_series(back_pct)} % of the parent's); the machine {more_verb} "
            f"{_series(more)} µs per command in all; commands/s {_series(rates, '{:.2f}')}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--senders", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--synchronous", default="FULL")
    parser.add_argument("--dir", default=None, help="directory for the databases (default: a temp dir)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fd", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(Path(args.db), args.synchronous, args.fd)
        return
    base = Path(tempfile.mkdtemp(prefix="piwf-bench-", dir=args.dir))
    try:
        print(f"synchronous={args.synchronous}, {args.seconds:g} s per figure, {os.cpu_count()} cores; "
              f"CPU in µs per command: parent = this process (all threads, senders included), "
              f"child = the writer process")
        print(f"  {'':<13} {'commands/s':>10} {'per commit':>10} {'parent µs':>10} {'child µs':>10} "
              f"{'total µs':>10}")
        results: list[tuple[Figure, Figure]] = []
        for senders in args.senders:
            a = in_thread(base / f"thread{senders}.db", senders, args.seconds, args.synchronous)
            b = own_process(base / f"process{senders}.db", senders, args.seconds, args.synchronous)
            results.append((a, b))
            print(f"{senders} senders", flush=True)
            print(_row("in-thread", a))
            print(_row("own process", b))
            print(f"  {'own/in-thread':<13} {b.rate / a.rate:9.2f}x {'':>10} {b.parent_us / a.parent_us:9.2f}x "
                  f"{'':>10} {b.total_us / a.total_us:9.2f}x", flush=True)
        print(interpretation(args.senders, results))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
