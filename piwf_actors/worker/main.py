"""The worker process: `python -m piwf_actors.worker.main --fd N`.

It talks to its runner supervisor over the inherited socket `N` and never
opens the database. It may serve several launches one after another (a warm
pool); each launch executes the workflow from the source snapshot stored
with the run, loaded as a fresh module, and the process's environment and
working directory are restored after every launch, so runs share no state.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Any

from piwf_actors.errors import DecodeError, WorkflowLoadFailed
from piwf_actors.logs import FORMATS, configure
from piwf_actors.tracing.ids import TRACE_CONTEXT_ENV
from piwf_actors.wire import recv_frame, send_frame
from piwf_actors.worker.engine import RunEngine
from piwf_actors.worker.function_engine import FunctionEngine
from piwf_actors.worker.reconcile import run_reconcile
from piwf_actors.worker.supervisor_link import ProtocolBroken, SupervisorLink
from piwf_actors.workflows import load_snapshot

log = logging.getLogger("piwf.worker")

EXIT_PROTOCOL = 4


def serve_launch(sock: socket.socket, launch: dict[str, Any], *, trace_context: bool = False) -> None:
    link = SupervisorLink(sock, launch)
    link.resolve(launch)  # a large state or source arrives as content references
    _enter_project(launch.get("project_path"))
    if launch.get("launch_kind") == "reconcile":
        run_reconcile(link, launch)  # a resource manager's reconcile (worker/reconcile.py)
        return
    try:
        workflow = load_snapshot(launch["source"], launch["workflow_path"] or "<snapshot>",
                                 launch["workflow_attr"] or launch["workflow"], launch["definition_digest"] or "",
                                 launch.get("project_path"))
    except WorkflowLoadFailed as exc:
        link.accepted("run_failed", {"code": "workflow_load_failed", "message": exc.one_line(8192)})
        return
    engine = FunctionEngine if workflow.function is not None else RunEngine  # a durable function, or a graph
    engine(workflow, link, trace_context=trace_context).run(launch.get("state"))


def _enter_project(project_path: str | None) -> None:
    """Run the workflow where its run was started (`piwf start`'s directory or `--project`), so
    `pytest -q` or `open("data.csv")` in a node mean the project's. A project directory that is
    gone (a restart long after) leaves the worker where it is, with a warning, rather than
    failing runs that may not care."""
    if not project_path:
        return
    try:
        os.chdir(project_path)
    except OSError as exc:
        log.warning("project directory %s is not usable (%s); nodes run in %s",
                    project_path, exc.strerror, os.getcwd())


def _isolated(sock: socket.socket, launch: dict[str, Any], trace_context: bool = False) -> None:
    """Run one launch, then put back what user code may have changed."""
    environ = _environ_snapshot()
    cwd = os.getcwd()
    path = list(sys.path)
    try:
        serve_launch(sock, launch, trace_context=trace_context)
    finally:
        if _environ_snapshot() != environ:
            # Rebuilding the environment goes through putenv/unsetenv for every variable:
            # only when a run changed something.
            os.environ.clear()
            os.environ.update({os.fsdecode(key): os.fsdecode(value) for key, value in environ.items()})
        if os.getcwd() != cwd:
            os.chdir(cwd)
        sys.path[:] = path


def _environ_snapshot() -> dict[bytes | str, bytes | str]:
    """The environment as os.environ keeps it (encoded; a C-level dict copy, no decoding)."""
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="piwf-worker")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--log-format", default="text", choices=FORMATS)
    args = parser.parse_args(argv)
    configure(args.log_level, args.log_format, text_format="worker %(process)d: %(levelname)s %(message)s",
              static={"role": "worker"})
    sock = socket.socket(fileno=args.fd)
    # Set by a host that traces (docs/tracing.md); taken out so that no node or command inherits it.
    trace_context = os.environ.pop(TRACE_CONTEXT_ENV, "") == "1"
    try:
        return _serve(sock, trace_context)
    except ProtocolBroken as exc:
        # Most often the host went away (stopped, killed): there is nobody to
        # report to, so no traceback; the host that comes next recovers the run.
        log.info("%s", exc)
        return EXIT_PROTOCOL
    except (OSError, DecodeError) as exc:
        log.info("supervisor connection failed: %s", exc)
        return EXIT_PROTOCOL


def _serve(sock: socket.socket, trace_context: bool = False) -> int:
    send_frame(sock, {"kind": "hello", "pid": os.getpid()})
    while True:
        frame = recv_frame(sock)
        if frame is None or frame.get("kind") == "shutdown":
            return 0
        if frame.get("kind") == "hold":
            # Meant for the launch that just ended: the pause was asked for while its run_over was
            # on the way. Nothing is running to hold.
            continue
        if frame.get("kind") != "launch":
            log.error("unexpected frame %r", frame.get("kind"))
            return EXIT_PROTOCOL
        _isolated(sock, frame, trace_context)
        send_frame(sock, {"kind": "run_over", "run_id": frame["run_id"]})


if __name__ == "__main__":
    sys.exit(main())
