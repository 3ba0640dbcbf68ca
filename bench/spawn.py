"""Worker start cost from a host-like parent: ms from "start" to "the worker can take work".

The parent first starts a real embedded host (`start_host`, warm_workers=0:
writer, lease, scheduler, ticker and supervisor threads, open SQLite
connections), so every start below happens from a threaded process holding
SQLite connections, as the scheduler's do. Prints median and p90 over
`--starts` starts (default 20) for:

  fork          multiprocessing "fork" context; the child imports
                piwf_actors.worker.main and says hello over a Pipe. Twice:
                first with the worker module not yet imported in the parent
                (the host does not import it), then with it imported (what
                a fork-based pool would do). UNSAFE in the host (copies held
                locks and the SQLite connections); for reference only.
  forkserver    "forkserver" context preloading __main__ and
                piwf_actors.worker.main; "cold" includes starting the fork
                server (it is stopped between cold samples through the private
                `multiprocessing.forkserver._forkserver._stop()`), "warm"
                reuses it.
  spawn         "spawn" context: a fresh interpreter unpickles the target and
                imports piwf_actors.worker.main.
  subprocess    `WorkerProcess.spawn()` itself (Popen of
                `python -m piwf_actors.worker.main --fd N` over a socketpair,
                what the scheduler does), until its "hello" frame arrives.
  echo child    the same Popen + socketpair with a tiny `python -c` child that
                imports only the frame codec: interpreter start-up without the
                worker's imports (the floor for any fresh process).
  warm pool     one frame there and back (send_frame / recv_frame) to an
                already-running echo child: the cost of handing work to an
                idle worker, over `--round-trips` round trips (default 2000).

Start times stop when the child has signalled readiness; shutting the child
down is not timed.

Bytecode: with PYTHONDONTWRITEBYTECODE set and no __pycache__ next to the
package (a fresh checkout in this sandbox), every fresh interpreter compiles
piwf_actors from source. `--cached-bytecode` points PYTHONPYCACHEPREFIX at a
temp dir (nothing is written into the repository), lets Python write
bytecode there and warms it once, which is what an installed package has.

Run: .venv/bin/python bench/spawn.py [--starts 20] [--cached-bytecode]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Kept light on purpose: "spawn" children re-import this file as __mp_main__.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

READY_TIMEOUT_S = 30.0

ECHO_CHILD = """
import socket, sys
from piwf_actors.wire import recv_frame, send_frame
sock = socket.socket(fileno=int(sys.argv[1]))
send_frame(sock, {"kind": "hello"})
while True:
    frame = recv_frame(sock)
    if frame is None or frame.get("kind") == "shutdown":
        break
    send_frame(sock, frame)
"""


# --- children started through multiprocessing -------------------------------------


def mp_worker_child(conn: multiprocessing.connection.Connection) -> None:
    """Child target: load what a worker loads, say hello, wait to be told to exit."""
    import piwf_actors.worker.main  # noqa: F401

    conn.send("hello")
    conn.recv()
    conn.close()


def start_mp(ctx: Any) -> float:
    """One start through `ctx`; returns seconds until the child's hello."""
    parent_conn, child_conn = ctx.Pipe()
    started = time.perf_counter()
    process = ctx.Process(target=mp_worker_child, args=(child_conn,), daemon=True)
    process.start()
    try:
        if not parent_conn.poll(READY_TIMEOUT_S):
            raise TimeoutError(f"{ctx.get_start_method()} child sent no hello within {READY_TIMEOUT_S} s")
        parent_conn.recv()
        elapsed = time.perf_counter() - started
        parent_conn.send("exit")
    finally:
        child_conn.close()
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
        parent_conn.close()
    return elapsed


# --- children started with subprocess + socketpair --------------------------------------


def start_worker_process() -> tuple[float, float]:
    """WorkerProcess.spawn() as the scheduler calls it; returns (spawn() returned, hello arrived)."""
    from piwf_actors.wire import recv_frame
    from piwf_actors.worker.process import WorkerProcess

    started = time.perf_counter()
    worker = WorkerProcess.spawn()
    returned = time.perf_counter() - started
    try:
        worker.sock.settimeout(READY_TIMEOUT_S)
        hello = recv_frame(worker.sock)
        ready = time.perf_counter() - started
        if hello is None or hello.get("kind") != "hello":
            raise RuntimeError(f"worker {worker.pid} sent {hello!r} instead of hello")
        worker.sock.settimeout(None)
    finally:
        worker.shutdown()
    return returned, ready


def spawn_echo() -> tuple[subprocess.Popen[bytes], socket.socket]:
    """The tiny echo child, started exactly like WorkerProcess.spawn starts a worker."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        process = subprocess.Popen([sys.executable, "-c", ECHO_CHILD, str(child.fileno())],
                                   pass_fds=[child.fileno()], start_new_session=True, stdin=subprocess.DEVNULL,
                                   env=env, close_fds=True)
    finally:
        child.close()
    return process, parent


def stop_echo(process: subprocess.Popen[bytes], sock: socket.socket) -> None:
    from piwf_actors.wire import send_frame

    with contextlib.suppress(OSError):
        send_frame(sock, {"kind": "shutdown"})
    sock.close()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def start_echo() -> float:
    from piwf_actors.wire import recv_frame

    started = time.perf_counter()
    process, sock = spawn_echo()
    try:
        sock.settimeout(READY_TIMEOUT_S)
        hello = recv_frame(sock)
        elapsed = time.perf_counter() - started
        if hello is None:
            raise RuntimeError("echo child closed its socket before hello")
    finally:
        stop_echo(process, sock)
    return elapsed


def warm_round_trips(count: int) -> list[float]:
    """Round trips of a small frame to one already-running echo child."""
    from piwf_actors.wire import recv_frame, send_frame

    process, sock = spawn_echo()
    try:
        sock.settimeout(READY_TIMEOUT_S)
        recv_frame(sock)  # hello: the child is up
        frame = {"kind": "launch", "run_id": "run_01bench", "generation": 1, "payload": {"i": 0}}
        for _ in range(50):  # warm both sides' code paths
            send_frame(sock, frame)
            recv_frame(sock)
        samples = []
        for i in range(count):
            frame["payload"] = {"i": i}
            started = time.perf_counter()
            send_frame(sock, frame)
            answer = recv_frame(sock)
            samples.append(time.perf_counter() - started)
            if answer != frame:
                raise RuntimeError(f"echo child answered {answer!r}")
        return samples
    finally:
        stop_echo(process, sock)


# --- reporting ---------------------------------------------------------------------------


def p90(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def report(label: str, samples: list[float], note: str = "") -> None:
    ms = [s * 1000 for s in samples]
    print(f"{label:<34} median {statistics.median(ms):8.3f} ms   p90 {p90(ms):8.3f} ms   (n={len(ms)}){note}")


def measure(label: str, fn: Callable[[], float], count: int, note: str = "") -> list[float]:
    samples = [fn() for _ in range(count)]
    report(label, samples, note)
    return samples


def bytecode_note() -> str:
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not (REPO / "piwf_actors" / "__pycache__").exists():
        return ("PYTHONDONTWRITEBYTECODE is set and piwf_actors has no __pycache__: every fresh process "
                "compiles the package from source (try --cached-bytecode)")
    return "as the environment has it"


def use_cached_bytecode(prefix: Path) -> str:
    """Children read and write bytecode under `prefix`; warmed once here, untimed."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(prefix)
    sys.dont_write_bytecode = False
    sys.pycache_prefix = str(prefix)
    subprocess.run([sys.executable, "-c", "import piwf_actors.worker.main, multiprocessing.forkserver"],
                   check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return f"cached under {prefix} (PYTHONPYCACHEPREFIX), warmed before timing"


def host_like_parent(state_dir: str) -> Any:
    """A real embedded host: its threads and SQLite connections are the point."""
    from piwf_actors import HostConfig, start_host

    return start_host(HostConfig(state_dir=state_dir, max_workers=1, warm_workers=0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=20, help="starts per method (default 20)")
    parser.add_argument("--cold", type=int, default=5, help="cold forkserver starts (default 5)")
    parser.add_argument("--round-trips", type=int, default=2000, help="warm-pool round trips (default 2000)")
    parser.add_argument("--cached-bytecode", action="store_true",
                        help="let children use/write bytecode under a temp PYTHONPYCACHEPREFIX")
    args = parser.parse_args()

    state_dir = tempfile.mkdtemp(prefix="piwf-bench-spawn-")
    bytecode = use_cached_bytecode(Path(state_dir) / "pycache") if args.cached_bytecode else bytecode_note()
    host = host_like_parent(state_dir)
    try:
        import threading

        threads = [t.name for t in threading.enumerate()]
        print(f"parent: pid {os.getpid()}, {len(threads)} threads ({', '.join(threads)}), "
              f"embedded host on {state_dir}; python {sys.version.split()[0]}, {os.cpu_count()} cores")
        print(f"bytecode: {bytecode}")

        fork = multiprocessing.get_context("fork")
        measure("fork (UNSAFE), child imports", lambda: start_mp(fork), args.starts)
        import piwf_actors.worker.main  # noqa: F401

        measure("fork (UNSAFE), parent preloaded", lambda: start_mp(fork), args.starts)

        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload(["__main__", "piwf_actors.worker.main"])
        from multiprocessing import forkserver as forkserver_module

        stop_forkserver = getattr(forkserver_module._forkserver, "_stop")  # noqa: B009 (private, 3.8+)
        cold = []
        for _ in range(args.cold):
            stop_forkserver()  # the next start launches a new server
            cold.append(start_mp(forkserver))
        report("forkserver+preload, cold", cold, "  (includes starting the server)")
        measure("forkserver+preload, warm", lambda: start_mp(forkserver), args.starts)
        stop_forkserver()

        measure("spawn context", lambda: start_mp(multiprocessing.get_context("spawn")), args.starts)

        worker_starts = [start_worker_process() for _ in range(args.starts)]
        report("subprocess WorkerProcess.spawn()", [r for r, _ in worker_starts], "  (Popen returned)")
        report("subprocess worker, to hello", [h for _, h in worker_starts])
        measure("subprocess echo child, to hello", start_echo, args.starts, "  (codec import only)")

        report("warm pool: frame round trip", warm_round_trips(args.round_trips))
    finally:
        host.stop("bench finished")
        shutil.rmtree(state_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
