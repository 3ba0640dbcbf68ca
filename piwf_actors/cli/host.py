"""`piwf-host`: run a host in the foreground until SIGINT/SIGTERM.

Exit status: 0 after a clean stop (signal or `piwf host stop`), 1 when the host could not start (another
host holds the state directory, the database was refused …) or stopped
because of a failure (lease lost, core actor crashed), 2 for bad usage.
With `--database` naming a database another host holds, it waits as a standby
(docs/standby.md) unless `--no-standby`. `--role runner` starts a runner host
(docs/runners.md): no host lease; it executes runs from the shared database's
queue in its own workers, under a runner lease; it exits with status 1 when
it loses that lease.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from piwf_actors import __version__
from piwf_actors.config import HostConfig
from piwf_actors.errors import PiwfError
from piwf_actors.http.address import require_http_extra
from piwf_actors.logs import configure
from piwf_actors.paths import StatePaths, default_state_dir
from piwf_actors.store.engines.registry import url_examples

log = logging.getLogger("piwf.host")


def host_gone(paths: StatePaths) -> bool:
    """True once the host of `paths` has stopped: its socket is gone and its lock is released.

    The lock is the last thing a host gives up (after its writer), and releasing it clears the
    holder record first, so an empty record (or one naming a dead process: a host that was
    killed) means the state directory is free. The lock file is only read, never locked: taking
    it, even for a moment, could make a host starting right then refuse to start.
    """
    import json

    from piwf_actors.actors.hostlock import holder_alive  # psutil: only for `piwf host stop`

    if _listening(paths.socket):
        return False
    try:
        record = paths.lock.read_text()
    except FileNotFoundError:
        return True
    try:
        holder = json.loads(record) if record.strip() else {}
    except ValueError:
        return True  # not a record a host writes: nobody holds it in our name
    return not holder_alive(holder.get("pid"), holder.get("process_start_identity"))


def _listening(path: os.PathLike[str]) -> bool:
    """Something accepts connections on the socket `path` (a file left by a killed host does not)."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(os.fspath(path))
        except OSError:  # missing, refused, not a socket
            return False
    return True


def wait_until_gone(paths: StatePaths, timeout: float, poll_s: float = 0.05) -> bool:
    """Poll `host_gone` until it holds (True) or `timeout` seconds have passed (False)."""
    import time

    deadline = time.monotonic() + timeout
    while not host_gone(paths):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def _metrics_address(text: str) -> str:
    """`--metrics` value → normalized "host:port" (PORT and :PORT mean 127.0.0.1:PORT)."""
    from piwf_actors.metrics import format_metrics_address, parse_metrics_address

    try:
        return format_metrics_address(*parse_metrics_address(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _project_dir(text: str) -> str:
    """`--project` value → an absolute path to an existing directory."""
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text} is not a directory")
    return os.path.abspath(text)


def _tracer_setting(flag: bool) -> str | None:
    """"env" (a provider of the host's own, from the OTEL_* variables) when traces are asked for (`--otel`, or
    the variables: piwf_actors/tracing/env.py) and the otel extra is installed, else None. Raises ValueError
    when `--otel` asks for traces without the extra or with exporters the variables name that cannot be built;
    when only the variables asked (they may be meant for other programs), that is one warning and no traces."""
    from piwf_actors.tracing.env import exporter_problem, otel_installed, tracing_requested

    if not tracing_requested(os.environ, flag=flag):
        return None
    if otel_installed():
        problem = exporter_problem(os.environ)
        if problem is None:
            return "env"
        if flag:
            raise ValueError(f"--otel: {problem}")
        log.warning("OTEL_* variables ask for traces, but %s: not tracing", problem)
        return None
    if flag:
        raise ValueError("--otel needs the otel extra: pip install 'piwf_actors[otel]'")
    log.warning("OTEL_* variables ask for traces, but the otel extra is not installed "
                "(pip install 'piwf_actors[otel]'): not tracing")
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="piwf-host",
        description="Run the piwf workflow host in the foreground. It keeps its state "
        "(SQLite database, socket, lock) in one directory; stop it with Ctrl-C or SIGTERM.",
        epilog=f"state directory default: $PIWF_STATE_DIR, else $XDG_STATE_HOME/piwf, else "
        f"~/.local/state/piwf (here: {default_state_dir()})",
    )
    parser.add_argument("--version", action="version", version=f"piwf-host {__version__}")
    parser.add_argument("--state-dir", help="directory for state.db, host.sock and host.lock")
    parser.add_argument("--database", metavar="URL", default=None,
                        help=f"the state database: {url_examples()} "
                        "(default: $PIWF_DATABASE_URL, else state.db in the state directory)")
    parser.add_argument("--no-standby", dest="standby", action="store_false",
                        help="with --database: refuse to start while another host holds the database's lease, "
                        "instead of waiting as a standby that takes over when that lease runs out")
    parser.add_argument("--role", default="host", choices=["host", "runner"],
                        help="host: contend for the host lease (active or standby; default). runner: execute runs "
                        "from the queue of the database given with --database in this host's own workers, beside "
                        "the active host, under a runner lease (docs/runners.md)")
    parser.add_argument("--host-id", default=None,
                        help="this host's name in the lease and in host status (default: host-<random>); with "
                        "--role runner, the runner id (default: runner-<random>)")
    parser.add_argument("--max-workers", type=int, default=4, help="runs executed at once (default 4)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="log verbosity of the host and its workers (default INFO)")
    parser.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="text lines, or one JSON object per line for log shippers (default text)")
    parser.add_argument("--lease-s", type=float, default=15.0,
                        help="host (or runner) lease length in seconds; renewed every third of it (default 15)")
    parser.add_argument("--retention-days", type=float, default=30.0,
                        help="prune finished runs older than this when the host is idle; 0 keeps them (default 30)")
    parser.add_argument("--idempotency-days", type=float, default=365.0,
                        help="keep client request records this long, also after their runs are pruned, so a "
                        "replayed request is answered, not applied again; 0 keeps them (default 365)")
    parser.add_argument("--watchdog-grace-s", type=float, default=5.0,
                        help="kill a node's worker from outside when the node runs this long past its timeout_s "
                        "(default 5)")
    parser.add_argument("--synchronous", default="FULL", choices=["NORMAL", "FULL", "EXTRA"],
                        help="SQLite synchronous mode; FULL survives power loss (default)")
    parser.add_argument("--metrics", metavar="[HOST:]PORT", type=_metrics_address, default=None,
                        help="serve Prometheus metrics at http://HOST:PORT/metrics; PORT or :PORT listens on "
                        "127.0.0.1 only, name an address (0.0.0.0, [::]) to expose it (default: off)")
    parser.add_argument("--http", metavar="[HOST:]PORT", default=None,
                        help="serve the HTTP API (docs/http.md) at HOST:PORT; a bare PORT listens on 127.0.0.1 only "
                        "(the http extra: pip install 'piwf_actors[http]')")
    parser.add_argument("--otel", action="store_true",
                        help="export OpenTelemetry traces of runs, configured by the OTEL_* variables (needs the "
                        "otel extra; on by itself when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER is set; "
                        "docs/tracing.md)")
    parser.add_argument("--key-timeout-s", type=float, default=5.0,
                        help="refuse a start whose concurrency key function (or a schedule's input function) runs "
                        "longer than this (default 5)")
    parser.add_argument("--load-timeout-s", type=float, default=30.0,
                        help="refuse a start whose workflow file takes longer than this to load (default 30)")
    parser.add_argument("--max-hung-user-code", type=int, default=8,
                        help="workflow code past its limit still running on abandoned threads before every start "
                        "that needs workflow code is refused (default 8)")
    parser.add_argument("--project", action="append", default=[], metavar="DIR", type=_project_dir,
                        help="run the schedules of DIR/.piwf/workflows/*.py (repeatable); those of "
                        "$XDG_CONFIG_HOME/piwf/workflows/ always run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure(args.log_level, args.log_format, static={"role": args.role})
    try:
        config = HostConfig(state_dir=args.state_dir, database=args.database, standby=args.standby,
                            host_id=args.host_id, max_workers=args.max_workers, lease_s=args.lease_s,
                            synchronous=args.synchronous, retention_days=args.retention_days,
                            idempotency_days=args.idempotency_days, watchdog_grace_s=args.watchdog_grace_s,
                            log_level=args.log_level, log_format=args.log_format,
                            metrics_address=args.metrics, projects=tuple(args.project), role=args.role,
                            key_timeout_s=args.key_timeout_s, load_timeout_s=args.load_timeout_s,
                            max_hung_user_code=args.max_hung_user_code, tracer_provider=_tracer_setting(args.otel),
                            http_address=args.http)
        if args.http is not None:
            require_http_extra()
    except ImportError as exc:
        print(f"piwf-host: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"piwf-host: error: {exc}", file=sys.stderr)
        return 2

    from piwf_actors.embedding import start_host

    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        host = start_host(config)
    except PiwfError as exc:
        print(f"piwf-host: error: {exc.one_line()}", file=sys.stderr)
        return 1
    # Wake up often enough to notice both a signal and a host that stopped itself.
    while not stop_requested.wait(0.2):
        if host.stopped:
            break
    if host.stopped and not stop_requested.is_set():
        reason = host.stop_reason or "unknown reason"
        host.stop(reason)
        if host.stop_requested:
            log.info("stopped on request: %s", reason)
            return 0
        print(f"piwf-host: stopped: {reason}", file=sys.stderr)
        return 1
    host.stop("signal received")
    return 0


if __name__ == "__main__":
    sys.exit(main())
