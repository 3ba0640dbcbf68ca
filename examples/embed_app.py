"""Embed a piwf host in a pykka application of your own.

    python examples/embed_app.py [--state-dir DIR] [--reports 3] [--interval 0.5]

The application starts a host with `start_host` (its actors run in this
process, beside the application's), starts its own actor, `StatusWatcher`,
which reports the host's status every `--interval` seconds, and after
`--reports` reports stops the host and then its own actor. It exits 0 only
if no thread or child process is left running.

Rules an embedding application follows (STYLE.md, "Facts that bite"):
- talk to the host through the `HostHandle` (`status()`, `writer.call()`,
  `stop()`, `wait()`); those are the edge API and may block;
- never call `pykka.ActorRegistry.stop_all()`: it would stop the host's
  actors too; stop what you started, by its ref;
- never let a BaseException (SystemExit, KeyboardInterrupt) escape one of
  your actors: pykka then stops every actor in the process.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pykka

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piwf_actors import HostConfig, HostHandle, start_host  # noqa: E402
from piwf_actors.actors.ticker import Ticker  # noqa: E402
from piwf_actors.errors import PiwfError  # noqa: E402


@dataclass(frozen=True, slots=True)
class Report:
    """Time to look at the host (told by the watcher's own ticker)."""


def render_status(number: int, status: dict[str, Any]) -> str:
    """One line from a `HostHandle.status()` dict (a pure function: easy to test)."""
    writer = status["writer"]
    runs = ", ".join(f"{name} {count}" for name, count in status["runs"].items() if count) or "none"
    return (f"report {number}: epoch {status['lease']['epoch']}, "
            f"writer {writer['commits']} commits / {writer['commands']} commands "
            f"(queue {writer['queue_depth']}), runs: {runs}")


class StatusWatcher(pykka.ThreadingActor):
    """The application's actor: prints the host's status every `interval_s` seconds.

    After `reports_wanted` reports it sets `done` (an event the application's
    main thread waits on) and keeps quiet. It reads the host only through
    `HostHandle.status()`, an edge call that asks the host's writer and lease
    actors; that is safe here because none of the host's actors ever asks
    this one anything back.
    """

    def __init__(self, host: HostHandle, *, interval_s: float, reports_wanted: int, done: threading.Event,
                 out: Callable[[str], None] = print) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__()
        self._host = host
        self._interval_s = interval_s
        self._reports_wanted = reports_wanted
        self._done = done
        self._out = out
        self._reports = 0
        self._ticker: Ticker | None = None

    def on_start(self) -> None:
        """Runs in the watcher's thread: starts its ticker."""
        self._ticker = Ticker(self.actor_ref, Report(), self._interval_s, "status-watcher").start()

    def on_stop(self) -> None:
        """Runs in the watcher's thread on a clean stop: stops (and joins) its ticker."""
        self._stop_ticker()

    def on_failure(self, *_exc_info: object) -> None:
        """Runs in the watcher's thread after an unhandled exception: no ticker may outlive it."""
        self._stop_ticker()
        self._done.set()

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None

    def on_receive(self, message: Any) -> Any:
        if isinstance(message, Report):
            self._report()
        elif message == "reports":  # the application may ask how many reports were made
            return self._reports
        return None

    def _report(self) -> None:
        if self._done.is_set():
            return
        if self._host.stopped:
            self._out(f"host stopped: {self._host.stop_reason}")
            self._done.set()
            return
        try:
            status = self._host.status(timeout=5)
        except (PiwfError, pykka.ActorDeadError, pykka.Timeout, TimeoutError) as exc:
            # The host may be stopping under us; that is news, not a crash of this actor.
            self._out(f"status unavailable: {type(exc).__name__}: {exc}")
            return
        self._reports += 1
        self._out(render_status(self._reports, status))
        if self._reports >= self._reports_wanted:
            self._done.set()


def live_children() -> list[int]:
    """Pids of this process's descendants that are still running (zombies do not count)."""
    pids = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                pids.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return sorted(pids)


def run(state_dir: str, *, reports: int, interval_s: float, lease_s: float) -> int:
    baseline = set(threading.enumerate())
    host = start_host(HostConfig(state_dir=state_dir, lease_s=lease_s))
    print(f"host started at epoch {host.epoch} on {host.paths.root}")
    done = threading.Event()
    watcher = StatusWatcher.start(host, interval_s=interval_s, reports_wanted=reports, done=done)
    try:
        # The main thread is the application's edge: it waits for the watcher, and notices a
        # host that stopped by itself (lease lost, a core actor failed) instead of waiting forever.
        deadline = time.monotonic() + 30 + reports * interval_s
        while not done.wait(0.1):
            if host.stopped or time.monotonic() > deadline:
                break
    finally:
        host.stop("application finished")
        print(f"host stopped: {host.stop_reason}")
        made: int = watcher.ask("reports", block=True, timeout=10) if watcher.is_alive() else 0
        watcher.stop(timeout=10)
    print(f"watcher made {made} report(s)")
    # Actor threads end a moment after their stop future is answered: give them a deadline.
    deadline = time.monotonic() + 10
    while True:
        left = sorted(t.name for t in set(threading.enumerate()) - baseline if t.is_alive())
        children = live_children()
        if not (left or children) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    print(f"child processes left: {', '.join(map(str, children)) if children else 'none'}")
    print(f"threads left: {', '.join(left) if left else 'none'}")
    return 0 if made >= reports and not left and not children else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", help="host state directory (default: a temporary one)")
    parser.add_argument("--reports", type=int, default=3, help="status reports before stopping (default 3)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between reports (default 0.5)")
    parser.add_argument("--lease-s", type=float, default=3.0, help="host lease length (default 3)")
    parser.add_argument("--verbose", action="store_true", help="show the host's log")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.state_dir:
            return run(args.state_dir, reports=args.reports, interval_s=args.interval, lease_s=args.lease_s)
        with tempfile.TemporaryDirectory(prefix="pw-embed-", dir="/tmp") as state_dir:
            return run(state_dir, reports=args.reports, interval_s=args.interval, lease_s=args.lease_s)
    except PiwfError as exc:
        print(f"embed_app: error: {exc.one_line()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
