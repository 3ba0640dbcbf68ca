"""How soon the host reacts: the figures the tests used to assert, printed instead (tests keep only a
generous deadline and the behaviour; STYLE.md, "Tests").

Each section names the test that keeps the behaviour. Prints, from one run:

  1. bad frame      a malformed frame (several kinds, from tests/protocol/test_bad_input.py) → the
                    host closes that connection: sendall → EOF seen here, p50/p99/max over
                    --closes connections. In-process host (start_host) with a frame deadline of an
                    hour, so every close is for the frame, never for the deadline.
  2. frame deadline a partial frame (slowloris) on a host with frame_deadline_s=1 → EOF: from just
                    before the send, each of --slow connections one after another; "late" is past
                    the deadline (the socket loop checks deadlines at each wake-up, at least every
                    0.5 s).
  3. alarm          the socket loop's alarm (`SocketLoop.alarm_at`, what wakes the gateway for a
                    coalesced watch event): how late on_alarm runs after its deadline, --alarms
                    alarms each 20 ms ahead, p50/p99/max.
  4. runs watch     40 trivial runs started back to back (two pipelined batches of 20, as the test
                    does) on an in-process host, one `runs` watcher: its events until one shows the
                    40 done, the elapsed time, elapsed / LIST_INTERVAL_S, and the bound the test
                    asserted (2 + elapsed / interval).
  5. release        two in-process hosts on one shared SQLite file (2 s lease, as
                    test_standby_roles.py): the active host stops cleanly → the standby is active
                    (`wait_active`), --repeats times.
  6. failover       two `bin/piwf-host` processes on one shared SQLite file, --lease-s 2
                    (test_standby_failover.py): SIGKILL the active host → the standby answers
                    host.status as active (polled every 20 ms); printed with the lease subtracted.
  7. runner         the active host (1 worker) and a runner host (`--role runner`) on one shared
                    SQLite file, --lease-s 2 (test_runner_hosts.py runs this on PostgreSQL): SIGKILL
                    the runner while it holds runs → no claim of it left in `run_claim` (the active
                    host recovered them once the runner lease ran out).
  8. lease lost     `bin/piwf-host` on its own state.db, --lease-s 1.5 (test_host_process.py): another
                    epoch written behind its back → the host process exits (1), --repeats times.

The in-process hosts share this process's GIL with the clients measuring them; the figures are
what a test saw, not the host's best. Compare figures of one run only: a busy machine moves them.

Run: .venv/bin/python bench/latency.py [--closes 20] [--slow 3] [--alarms 200] [--repeats 3]
     [--only 1 2 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import WORKFLOW_SOURCE, closing_line, pct  # noqa: E402  (bench/ is the script's directory)

from piwf_actors import HostConfig, start_host  # noqa: E402
from piwf_actors.client.connection import Client, HostNotRunning  # noqa: E402
from piwf_actors.protocol.socket_loop import SocketLoop  # noqa: E402
from piwf_actors.protocol.watches import LIST_INTERVAL_S  # noqa: E402
from piwf_actors.wire.limits import Limits  # noqa: E402

PIWF_HOST = REPO / "bin" / "piwf-host"
SCHEMA = "piwf.client.v1"

HANG_SOURCE = '''\
"""One node that sleeps input["sleep"] seconds: a run a host holds for a while."""

import time

from piwf_actors.workflows import compute, define_workflow

hang = define_workflow(name="hang", start_at="a", edges=[],
                       nodes={"a": compute(run=lambda ctx: time.sleep(ctx.input["sleep"]) or {"ok": True})})
'''


def ms(seconds: list[float]) -> str:
    values = [s * 1000 for s in seconds]
    return (f"p50 {pct(values, 0.5):7.2f} ms  p99 {pct(values, 0.99):7.2f} ms  max {max(values):7.2f} ms  "
            f"(n={len(values)})")


def each_s(seconds: list[float]) -> str:
    return ", ".join(f"{s:.2f}" for s in seconds) + " s"


def lease_note(lease_s: float) -> str:
    """When a lease renewed every third of it runs out after its holder dies."""
    return (f"the {lease_s:g} s lease, renewed every {lease_s / 3:.2f} s, runs out {lease_s * 2 / 3:.2f}–{lease_s:.2f} s "
            "after a kill")


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


# --- raw protocol frames (as tests/protocol does) ---------------------------------------------------


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def request_body(operation: str = "host.status", payload: dict[str, Any] | None = None) -> bytes:
    return pack({"schema": SCHEMA, "type": "request", "request_id": uuid.uuid4().hex, "client_id": "bench",
                 "idempotency_key": uuid.uuid4().hex, "operation": operation,
                 "payload": {} if payload is None else payload})


#: name: (bytes, then shut our writing side down)
MALFORMED: dict[str, tuple[bytes, bool]] = {
    "oversize_length_header": (struct.pack(">I", 64 * 1024 + 1), False),
    "zero_length": (struct.pack(">I", 0), False),
    "truncated_body_then_eof": (struct.pack(">I", 100) + request_body()[:10], True),
    "trailing_bytes_in_frame": (frame(request_body() + b"\xc0"), False),
    "top_level_array": (frame(pack([1, 2, 3])), False),
    "huge_declared_map": (frame(b"\xdf\xff\xff\xff\xff"), False),
    "garbage": (frame(b"\xde\xad\xbe\xef"), False),
}


class RawConn:
    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.buffer = b""
        self.read_frame()  # the hello

    def read_frame(self) -> bytes:
        while len(self.buffer) < 4 or len(self.buffer) < 4 + struct.unpack(">I", self.buffer[:4])[0]:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed before a whole frame")
            self.buffer += chunk
        length = struct.unpack(">I", self.buffer[:4])[0]
        body, self.buffer = self.buffer[4:4 + length], self.buffer[4 + length:]
        return body

    def wait_eof(self) -> None:
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                return
            if not chunk:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@contextlib.contextmanager
def in_process_host(state_dir: Path, **config: Any) -> Iterator[Any]:
    settings = {"lease_s": 5.0, "max_workers": 2, "warm_workers": 1, "reap_grace_s": 0.5, **config}
    host = start_host(HostConfig(state_dir=state_dir, **settings))
    try:
        yield host
    finally:
        host.stop("bench done")


# --- 1, 2: bad input ---------------------------------------------------------------------------------


def bad_frames(base: Path, closes: int) -> None:
    with in_process_host(base / "bad", limits=Limits(max_frame_bytes=64 * 1024, frame_deadline_s=3600.0)) as host:
        samples: dict[str, list[float]] = {}
        for _ in range(closes):
            for name, (data, shutdown) in MALFORMED.items():
                conn = RawConn(host.paths.socket)
                try:
                    started = time.perf_counter()
                    conn.sock.sendall(data)
                    if shutdown:
                        conn.sock.shutdown(socket.SHUT_WR)
                    conn.wait_eof()
                    samples.setdefault(name, []).append(time.perf_counter() - started)
                finally:
                    conn.close()
    everything = [s for values in samples.values() for s in values]
    worst = max(samples, key=lambda name: pct(samples[name], 0.5))
    print(f"1. malformed frame → the host closes the connection (frame deadline 1 h; {len(MALFORMED)} kinds × "
          f"{closes}; test_bad_input.py::test_malformed_frame_closes_only_that_connection)")
    print(f"  sendall → EOF   {ms(everything)}; slowest kind by p50: {worst} ({ms(samples[worst])})")


def frame_deadline(base: Path, slow: int) -> None:
    deadline_s = 1.0
    closed: list[float] = []
    with in_process_host(base / "slow", limits=Limits(frame_deadline_s=deadline_s)) as host:
        body = request_body()
        for index in range(slow):
            conn = RawConn(host.paths.socket)
            try:
                partial = struct.pack(">I", len(body)) + body[:5] if index % 2 == 0 else b"\x00\x00"
                started = time.perf_counter()
                conn.sock.sendall(partial)
                conn.wait_eof()
                closed.append(time.perf_counter() - started)
            finally:
                conn.close()
    print(f"2. partial frame → closed at the frame deadline ({deadline_s:g} s; "
          f"test_bad_input.py::test_slowloris_writer_is_closed_after_frame_deadline)")
    print(f"  after the send  {each_s(closed)}; late by p50 {(pct(closed, 0.5) - deadline_s) * 1000:.0f} ms, "
          f"max {(max(closed) - deadline_s) * 1000:.0f} ms (deadlines are checked at least every 0.5 s)")


# --- 3: the socket loop's alarm ------------------------------------------------------------------------


def alarm_lateness(base: Path, alarms: int) -> None:
    rang = threading.Event()
    at: list[float] = []

    def on_alarm() -> None:
        at.append(time.monotonic())
        rang.set()

    loop = SocketLoop(base / "alarm.sock", on_open=lambda conn_id: {}, on_frame=lambda c, f: None,
                      on_closed=lambda c: None, on_alarm=on_alarm)
    loop.start()
    late: list[float] = []
    try:
        for _ in range(alarms):
            rang.clear()
            deadline = time.monotonic() + 0.02
            loop.alarm_at(deadline)
            if not rang.wait(60):
                raise TimeoutError("an alarm did not ring")
            late.append(at[-1] - deadline)
    finally:
        loop.stop()
    print(f"3. socket loop alarm, on_alarm after its deadline, {alarms} alarms 20 ms ahead "
          f"(test_watch_timing.py::test_the_socket_loop_alarm_rings_at_its_deadline_in_the_loop_thread)")
    print(f"  late by         {ms(late)}")


# --- 4: a burst reaching a runs watcher ------------------------------------------------------------------


def runs_watch_burst(base: Path, spec: str) -> None:
    runs = 40
    with in_process_host(base / "burst") as host:
        watcher = Client(socket_path=str(host.paths.socket))
        watcher.connect()
        events = watcher.watch("runs", timeout=60)
        next(events)  # the initial view
        actor = RawConn(host.paths.socket)
        try:
            began = time.monotonic()
            for batch in range(2):  # two pipelined batches (one write each), within the in-flight cap of 32
                actor.sock.sendall(b"".join(frame(request_body("run.start", {"workflow": spec,
                                                                             "input": {"i": batch * 20 + i}}))
                                            for i in range(20)))
                for _ in range(20):
                    answer = msgpack.unpackb(actor.read_frame(), raw=False)
                    if answer.get("outcome") != "accepted":
                        raise RuntimeError(f"run.start not accepted: {answer}")
            count = 0
            for event in events:
                count += 1
                if event["payload"]["counts"].get("done", 0) == runs:
                    break
            elapsed = time.monotonic() - began
        finally:
            actor.close()
            watcher.close()
    intervals = elapsed / LIST_INTERVAL_S
    print(f"4. {runs} runs started back to back, one `runs` watcher, until an event shows them done "
          f"(test_watch_views.py::test_a_burst_of_changes_reaches_a_runs_watcher_and_its_last_event_is_current)")
    print(f"  {count} events in {elapsed:.2f} s = {intervals:.0f} intervals of {LIST_INTERVAL_S * 1000:.0f} ms "
          f"({count / intervals:.2f} events per interval; the test's former bound: {count} <= 2 + {intervals:.0f}); "
          f"{count / runs:.2f} events per run, each run changing the view 3+ times")


# --- 5: a standby takes over on a clean stop ----------------------------------------------------------------


def shared_db_host(shared: Path, database: str, name: str) -> Any:
    return start_host(HostConfig(state_dir=shared / name, database=database, host_id=f"host-{name}", lease_s=2.0,
                                 max_workers=1, warm_workers=0, reap_grace_s=0.5))


def release_takeover(base: Path, repeats: int) -> None:
    took: list[float] = []
    for index in range(repeats):
        shared = base / f"release-{index}"
        shared.mkdir()
        database = f"sqlite://{shared}/shared.db"
        active = shared_db_host(shared, database, "a")
        standby = shared_db_host(shared, database, "b")
        try:
            assert standby.role == "standby", standby.role
            stopped = time.monotonic()
            active.stop("handing over")
            if not standby.wait_active(60):
                raise TimeoutError("the standby did not take over within 60 s")
            took.append(time.monotonic() - stopped)
        finally:
            standby.stop("bench done")
            active.stop("bench done")
    print("5. clean stop of the active host → the standby is active (in-process hosts, shared SQLite file, 2 s "
          "lease; test_standby_roles.py)")
    print(f"  stop() called → wait_active  {each_s(took)}")


# --- 6, 7, 8: bin/piwf-host processes --------------------------------------------------------------------


class HostProcess:
    def __init__(self, state_dir: Path, *args: str) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([str(PIWF_HOST), "--state-dir", str(state_dir), "--log-level", "INFO",
                                          *args], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd="/")
        self.seen: set[psutil.Process] = set()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 60) -> None:
        def logged() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log()[-2000:]}")
            return text in self.log()

        wait_until(logged, timeout, f"{self.state_dir.name} to log {text!r}")

    def status(self) -> dict[str, Any] | None:
        try:
            with Client(self.state_dir, timeout=2, retries=0) as client:
                return client.status()
        except (HostNotRunning, OSError, TimeoutError):
            return None

    def wait_role(self, role: str, timeout: float = 60) -> None:
        def serving() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log()[-2000:]}")
            status = self.status()
            return status is not None and status["role"] == role

        wait_until(serving, timeout, f"{self.state_dir.name} to serve as {role}")

    def note_descendants(self) -> None:
        with contextlib.suppress(psutil.Error):
            self.seen |= set(psutil.Process(self.proc.pid).children(recursive=True))

    def kill(self) -> None:
        """SIGKILL the host and every process it started (workers lead sessions of their own)."""
        self.note_descendants()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for process in self.seen:
            with contextlib.suppress(psutil.Error):
                process.kill()


def sigkill_failover(base: Path) -> None:
    lease_s = 2.0
    shared = base / "failover"
    database = f"sqlite://{shared}/shared.db"
    shared.mkdir()
    hosts: list[HostProcess] = []
    try:
        a = HostProcess(shared / "a", "--database", database, "--host-id", "host-a", "--lease-s", str(lease_s))
        hosts.append(a)
        a.wait_role("active")
        b = HostProcess(shared / "b", "--database", database, "--host-id", "host-b", "--lease-s", str(lease_s))
        hosts.append(b)
        b.wait_role("standby")
        a.kill()
        killed = time.monotonic()
        b.wait_role("active")
        took = time.monotonic() - killed
    finally:
        for host in hosts:
            host.kill()
    print(f"6. SIGKILL of the active host → the standby serves as active (bin/piwf-host × 2, shared SQLite file, "
          f"{lease_s:g} s lease; test_standby_failover.py)")
    print(f"  kill → host.status role active  {took:.2f} s ({lease_note(lease_s)})")


def runner_recovery(base: Path, hang_spec: str) -> None:
    lease_s = 2.0
    shared = base / "runner"
    shared.mkdir()
    db_path = shared / "shared.db"
    database = f"sqlite://{db_path}"
    hosts: list[HostProcess] = []

    def runner_claims() -> list[str]:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
        try:
            return [r for (r,) in conn.execute("SELECT run_id FROM run_claim WHERE runner_id = 'runner-1'")]
        finally:
            conn.close()

    try:
        active = HostProcess(shared / "host-a", "--database", database, "--host-id", "host-a", "--lease-s",
                             str(lease_s), "--max-workers", "1")
        hosts.append(active)
        active.wait_role("active")
        runner = HostProcess(shared / "runner-1", "--database", database, "--host-id", "runner-1", "--role",
                             "runner", "--lease-s", str(lease_s), "--max-workers", "2")
        hosts.append(runner)
        runner.wait_role("runner")
        with Client(shared / "host-a") as client:
            for _ in range(4):
                client.start(hang_spec, {"sleep": 60})
        held = wait_until(runner_claims, 60, "the runner to hold a run")
        runner.kill()
        killed = time.monotonic()
        wait_until(lambda: not runner_claims(), 60, "the active host to recover the runner's claims")
        took = time.monotonic() - killed
    finally:
        for host in hosts:
            host.kill()
    print(f"7. SIGKILL of a runner host holding {len(held)} run(s) → none of its claims left (active host + runner, "
          f"shared SQLite file, {lease_s:g} s lease; test_runner_hosts.py, there on PostgreSQL)")
    print(f"  kill → claims recovered  {took:.2f} s ({lease_note(lease_s)})")


def lease_lost(base: Path, repeats: int) -> None:
    lease_s = 1.5
    took: list[float] = []
    for index in range(repeats):
        state_dir = base / f"lease-{index}"
        host = HostProcess(state_dir, "--lease-s", str(lease_s))
        try:
            host.wait_log("host started at epoch 1")
            conn = sqlite3.connect(state_dir / "state.db", timeout=30, isolation_level=None)
            try:
                conn.execute("UPDATE host_state SET epoch = epoch + 1, token_hash = 'other', host_id = 'intruder' "
                             "WHERE id = 1")
            finally:
                conn.close()
            bumped = time.monotonic()
            code = host.proc.wait(60)
            took.append(time.monotonic() - bumped)
            if code != 1:
                raise RuntimeError(f"the host exited with {code}, not 1: {host.log()[-2000:]}")
        finally:
            host.kill()
    print(f"8. another epoch written behind the host's back → it exits 1 (bin/piwf-host, own state.db, "
          f"{lease_s:g} s lease, renewed every {lease_s / 3:g} s; test_host_process.py::"
          "test_host_that_loses_its_lease_exits_1)")
    print(f"  write → exit  {each_s(took)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--closes", type=int, default=20, help="connections per malformed-frame kind (default 20)")
    parser.add_argument("--slow", type=int, default=3, help="partial-frame connections (default 3)")
    parser.add_argument("--alarms", type=int, default=200, help="socket loop alarms (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="takeovers on release and lease losses (default 3)")
    parser.add_argument("--only", type=int, nargs="+", choices=range(1, 9), metavar="N",
                        help="run only these sections (1-8)")
    args = parser.parse_args()
    only = set(args.only or range(1, 9))
    logging.basicConfig(level=logging.ERROR)  # the in-process hosts' warnings (a takeover is one) are expected here

    base = Path(tempfile.mkdtemp(prefix="pwl-", dir="/tmp"))  # short: AF_UNIX socket paths
    total = time.perf_counter()
    try:
        (base / "trivial3.py").write_text(WORKFLOW_SOURCE)
        (base / "hang.py").write_text(HANG_SOURCE)
        spec, hang_spec = f"{base / 'trivial3.py'}:trivial", f"{base / 'hang.py'}:hang"
        print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
              f"python {sys.version.split()[0]}, state under {base}", flush=True)
        sections: list[tuple[int, Callable[[], None]]] = [
            (1, lambda: bad_frames(base, args.closes)),
            (2, lambda: frame_deadline(base, args.slow)),
            (3, lambda: alarm_lateness(base, args.alarms)),
            (4, lambda: runs_watch_burst(base, spec)),
            (5, lambda: release_takeover(base, args.repeats)),
            (6, lambda: sigkill_failover(base)),
            (7, lambda: runner_recovery(base, hang_spec)),
            (8, lambda: lease_lost(base, args.repeats)),
        ]
        for number, section in sections:
            if number in only:
                section()
                sys.stdout.flush()
        print(closing_line(total))
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up the temp dir on SIGTERM too
    main()
