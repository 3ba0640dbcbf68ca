"""Embed a piwf host in a pykka application of your own.

    python examples/embed_app.py [--state-dir DIR] [--versions 1.2.0 2.0.0-rc1] [--verbose]

`main()` starts a host (its actors run in this process, beside the
application's) and the application's actor, `ReleaseDesk`. It queues one
run of `workflows/release.py:release` per version (a test step, then a human
decision: ship, stop, or fix with instructions) and subscribes the desk to
those runs. The desk is told `RunStarted`, `NodeFinished`, `RunParked` and
`RunFinished` as they happen, without polling. When a run parks waiting on
its decision, the desk decides (`decide`: a pre-release needs changes,
anything else ships) and answers it. Once every run has finished, `main()`
prints each run's result, stops the host (which ends the subscription) and
the desk, and exits 0 only if every run went the way the desk decided and
no thread or child process is left.

How the desk stays non-blocking: its handlers never call the host. The
calls that may block — reading the pending decision, answering it (it waits
for the database commit) — go to its `Clerk`, a thread the desk owns
(started in `on_start`, joined in `on_stop`), through a queue whose `put`
never blocks; the clerk tells each outcome back to the desk as a message
(`Answered`, `AnswerFailed`). Nothing in this program `ask`s one actor from
another: only `main()`, the application's edge, makes blocking calls.

Rules an embedding application follows (docs/embedding.md):
- call `HostHandle` methods from threads, not from inside actor handlers;
  let actors learn about runs through `host.subscribe(actor_ref, runs=…)`;
- never call `pykka.ActorRegistry.stop_all()`: it would stop the host's
  actors too; stop what you started, by its ref (`host.stop()`, `desk.stop()`);
- never let a BaseException (SystemExit, KeyboardInterrupt) escape one of
  your actors: pykka then stops every actor in the process.
"""

from __future__ import annotations

import argparse
import json
import logging
import queue
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

from piwf_actors import (  # noqa: E402
    AnswerReceipt,
    HostConfig,
    HostHandle,
    NodeFinished,
    RunFinished,
    RunParked,
    RunStarted,
    start_host,
)
from piwf_actors.errors import PiwfError  # noqa: E402

RELEASE = f"{Path(__file__).resolve().parent / 'workflows' / 'release.py'}:release"
CLIENT_ID = "embed-app"


# --- the application's policy: pure functions --------------------------------------------------


def decide(version: str) -> tuple[str, dict[str, Any] | None]:
    """The desk's answer to "Ship <version>?": a pre-release needs changes, anything else ships."""
    if "-" in version:
        return "fix", {"instructions": f"finish the changelog for {version}"}
    return "ship", None


def expected_node(version: str) -> str:
    """The node a run of `version` ends in, given `decide` (the release workflow routes by choice)."""
    return decide(version)[0]


# --- messages the desk receives besides the host's run events ----------------------------------


@dataclass(frozen=True, slots=True)
class Track:
    """Follow run `run_id`, the release of `version` (told by main before it subscribes the desk)."""

    run_id: str
    version: str


@dataclass(frozen=True, slots=True)
class Answered:
    """The clerk answered the run's decision."""

    run_id: str
    title: str
    receipt: AnswerReceipt


@dataclass(frozen=True, slots=True)
class AnswerFailed:
    """The clerk could not answer the run's decision."""

    run_id: str
    request_id: str
    error: str


# --- the clerk: the desk's blocking calls, off the desk's thread -------------------------------


class Clerk:
    """A thread owned by an actor: it makes the owner's blocking calls one at a time and tells
    each outcome back to the owner as a message. `submit` never blocks."""

    def __init__(self, owner: pykka.ActorRef[Any], name: str) -> None:
        self._owner = owner
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Callable[[Exception], Any]] | None] = (
            queue.SimpleQueue())
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Clerk:
        self._thread.start()
        return self

    def submit(self, job: Callable[[], Any], on_error: Callable[[Exception], Any]) -> None:
        """Run `job()` on the clerk's thread and tell the owner its result (a message), or
        `on_error(exception)` if it raises."""
        self._jobs.put((job, on_error))

    def stop(self) -> None:
        """Finish the job at hand, drop the rest, end the thread (called from the owner's on_stop)."""
        self._jobs.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=35)

    def _run(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, on_error = item
            try:
                message = job()
            except Exception as exc:  # a refused answer is news for the owner, not the end of the clerk
                message = on_error(exc)
            try:
                self._owner.tell(message)
            except pykka.ActorDeadError:
                return


# --- the application's actor -------------------------------------------------------------------


class ReleaseDesk(pykka.ThreadingActor):
    """Follows release runs and answers their decisions; sets `finished` when all have ended.

    Told: `Track` (by main), the host's run events (by its subscription),
    `Answered` / `AnswerFailed` (by its clerk). Asked (by main, the edge):
    "results", the `RunFinished` of each run.
    """

    def __init__(self, host: HostHandle, *, expected_runs: int, finished: threading.Event,
                 out: Callable[[str], None] = print) -> None:
        """Runs in the caller's thread: stores arguments only."""
        super().__init__()
        self._host = host
        self._expected_runs = expected_runs
        self._finished = finished
        self._out = out
        self._versions: dict[str, str] = {}
        self._results: dict[str, RunFinished] = {}
        self._clerk: Clerk | None = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            Track: self._track, RunStarted: self._started, NodeFinished: self._node_finished,
            RunParked: self._parked, RunFinished: self._run_finished, Answered: self._answered,
            AnswerFailed: self._answer_failed,
        }

    def on_start(self) -> None:
        """Runs in the desk's thread: starts its clerk."""
        self._clerk = Clerk(self.actor_ref, "release-desk-clerk").start()

    def on_stop(self) -> None:
        """Runs in the desk's thread on a clean stop: ends (and joins) its clerk."""
        self._stop_clerk()

    def on_failure(self, *_exc_info: object) -> None:
        """Runs in the desk's thread after an unhandled exception: no clerk may outlive it, and
        main must not wait for runs the desk no longer follows."""
        self._stop_clerk()
        self._finished.set()

    def _stop_clerk(self) -> None:
        if self._clerk is not None:
            self._clerk.stop()
            self._clerk = None

    def on_receive(self, message: Any) -> Any:
        if message == "results":
            return dict(self._results)
        handler = self._handlers.get(type(message))
        if handler is not None:
            handler(message)
        return None

    def _label(self, run_id: str) -> str:
        return f"[{self._versions.get(run_id, run_id)}]"

    def _track(self, message: Track) -> None:
        self._versions[message.run_id] = message.version

    def _started(self, event: RunStarted) -> None:
        self._out(f"{self._label(event.run_id)} {'resumed' if event.resumed else 'started'} ({event.workflow})")

    def _node_finished(self, event: NodeFinished) -> None:
        self._out(f"{self._label(event.run_id)} node {event.node_id}: {event.outcome}")

    def _parked(self, event: RunParked) -> None:
        self._out(f"{self._label(event.run_id)} parked: {event.reason}")
        version = self._versions.get(event.run_id)
        if event.reason != "waiting" or event.detail is None or version is None or self._clerk is None:
            return
        choice, choice_input = decide(version)
        host, run_id, request_id = self._host, event.run_id, event.detail

        def answer() -> Answered:  # runs on the clerk's thread: it may block
            request = next((r for r in host.pending_interactions() if r.request_id == request_id), None)
            if request is None or request.kind != "decision":
                raise LookupError(f"{request_id} is not an open decision")
            receipt = host.answer_decision(request_id, choice, input=choice_input,
                                           expected_revision=request.revision, client_id=CLIENT_ID,
                                           idempotency_key=request_id)
            return Answered(run_id, str((request.contract or {}).get("title", request_id)), receipt)

        self._clerk.submit(answer, lambda exc: AnswerFailed(run_id, request_id, f"{type(exc).__name__}: {exc}"))

    def _answered(self, message: Answered) -> None:
        self._out(f"{self._label(message.run_id)} answered {message.title!r}: {message.receipt.choice}")

    def _answer_failed(self, message: AnswerFailed) -> None:
        self._out(f"{self._label(message.run_id)} could not answer {message.request_id}: {message.error}")

    def _run_finished(self, event: RunFinished) -> None:
        error = f" ({event.error.code}: {event.error.message})" if event.error is not None else ""
        self._out(f"{self._label(event.run_id)} finished: {event.status}{error}")
        self._results[event.run_id] = event
        if len(self._results) >= self._expected_runs and set(self._versions) <= set(self._results):
            self._finished.set()


# --- main: the application's edge --------------------------------------------------------------


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


def run(state_dir: str, *, versions: list[str], lease_s: float, timeout_s: float) -> int:
    baseline = set(threading.enumerate())
    host = start_host(HostConfig(state_dir=state_dir, lease_s=lease_s, max_workers=2))
    print(f"host started at epoch {host.epoch} on {host.paths.root}")
    finished = threading.Event()
    desk = ReleaseDesk.start(host, expected_runs=len(versions), finished=finished)
    ok = False
    subscription = None
    try:
        run_ids: dict[str, str] = {}
        for version in versions:
            receipt = host.start_run(RELEASE, {"version": version}, client_id=CLIENT_ID)
            run_ids[version] = receipt.run_id
            desk.tell(Track(receipt.run_id, version))  # ahead of every run event in the desk's mailbox
        # Named runs are followed from their first event: nothing is missed since start_run.
        subscription = host.subscribe(desk, runs=run_ids.values())
        deadline = time.monotonic() + timeout_s
        while not finished.wait(0.1):
            if host.stopped or time.monotonic() > deadline:
                print("gave up waiting for the runs" if not host.stopped else f"host stopped: {host.stop_reason}")
                break
        results: dict[str, RunFinished] = desk.ask("results", timeout=10) if desk.is_alive() else {}
        ok = len(results) == len(versions)
        for version, run_id in run_ids.items():
            view = host.get_run(run_id)
            ended = view is not None and view.status == "done" and view.node(expected_node(version)) is not None
            ok = ok and ended
            output = json.dumps(view.output, sort_keys=True) if view is not None else "-"
            print(f"release {version}: {view.status if view else 'missing'}, output {output}")
    finally:
        host.stop("application finished")  # stops the subscription too
        print(f"host stopped: {host.stop_reason}")
        desk.stop(timeout=10)
    if subscription is not None:
        print(f"subscription ended: {not subscription.active}")
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
    return 0 if ok and not left and not children else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", help="host state directory (default: a temporary one)")
    parser.add_argument("--versions", nargs="+", default=["1.2.0", "2.0.0-rc1"],
                        help="one release run per version (default: 1.2.0 2.0.0-rc1)")
    parser.add_argument("--lease-s", type=float, default=3.0, help="host lease length (default 3)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the runs (default 60)")
    parser.add_argument("--verbose", action="store_true", help="show the host's log")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    options = {"versions": args.versions, "lease_s": args.lease_s, "timeout_s": args.timeout}
    try:
        if args.state_dir:
            return run(args.state_dir, **options)
        with tempfile.TemporaryDirectory(prefix="pw-embed-", dir="/tmp") as state_dir:
            return run(state_dir, **options)
    except PiwfError as exc:
        print(f"embed_app: error: {exc.one_line()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
