"""Prometheus metrics of one host, served over HTTP (`piwf-host --metrics HOST:PORT`).

`HostMetrics` is owned by the host: `start_host` creates it before the
writer (whose batch hook it provides), starts its HTTP server after every
other part and `HostParts.shut_down` stops it first. Each host has its own
`CollectorRegistry` (the default registry is process-global), so two hosts
in one process export separately. While it serves, the bound address is on
the host's board under "metrics" (`{"address", "host", "port", "url"}`).

What is exported:

- `piwf_writer_commit_seconds`, `piwf_writer_batch_commands` (histograms) and
  `piwf_writer_failed_batches_total`: observed by the writer actor itself,
  through the hook it was started with (`HostMetrics.observe_batch`).
- Everything else is read from the state database at scrape time by
  `StoreCollector`, through a fresh read-only `StoreReader` per scrape:
  gauges (`piwf_runs{status}`, `piwf_decisions_pending`,
  `piwf_effects_ambiguous`, `piwf_channel_deliveries_ambiguous`), the worker
  gauges from the scheduler's board section, and the counters
  `piwf_runs_started_total`, `piwf_runs_resumed_total`,
  `piwf_runs_finished_total{status}` and the histogram
  `piwf_node_duration_seconds{kind}`.

The counters and the node histogram count what happened while this host's
exporter ran (from zero, like any Prometheus counter after a process
start). They are not totals of the database — those would drop when old
runs are pruned, and a counter must never go down. Instead two followers
(`RunFollower`, `AttemptFollower`) remember the highest rowid they have read
and the rows they know are still unfinished, and count each run start, run
resume (a run begun before the baseline that runs again), run end and
finished node attempt exactly once as it appears (see
`store/metrics_queries.py` for why rowids are safe here).
"""

from __future__ import annotations

import http.server
import logging
import socket
import socketserver
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import MetricsHandler
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from piwf_actors.board import HostBoard, Section
from piwf_actors.errors import HostError
from piwf_actors.paths import DatabaseLocation
from piwf_actors.statuses import RUN_STATUSES, TERMINAL_STATUSES
from piwf_actors.store import metrics_queries as mq
from piwf_actors.store import rates
from piwf_actors.store.database import StoreOptions
from piwf_actors.store.queries import run_counts
from piwf_actors.store.reader import StoreReader

log = logging.getLogger(__name__)

#: Where `--metrics PORT` and `--metrics :PORT` listen: loopback unless the user names an address.
DEFAULT_METRICS_HOST = "127.0.0.1"
#: The node kinds `piwf_node_duration_seconds` is labelled with (see store/metrics_queries.py).
NODE_KINDS = ("compute", "effect", "checkpoint", "decision", "agent")
#: Nodes run from milliseconds (compute) to hours (a decision waiting for a person).
NODE_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                         3600.0, 14400.0, 86400.0)
COMMIT_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
BATCH_COMMANDS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000)
#: A client that connects and sends nothing is dropped after this long (it would delay the host's stop).
REQUEST_TIMEOUT_S = 5.0
#: How often the server thread looks for a stop request (the longest `stop` waits for it).
POLL_INTERVAL_S = 0.25


# --- the address ---------------------------------------------------------------------------


def parse_metrics_address(text: str) -> tuple[str, int]:
    """`PORT` or `:PORT` → (127.0.0.1, PORT); `HOST:PORT`; `[IPv6]:PORT`. Port 0 picks a free port.

    Raises ValueError with a message for the user.
    """
    text = text.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "", text
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"metrics address {text!r}: write an IPv6 address in brackets, e.g. [::1]:9464")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ValueError(f"metrics address {text!r}: expected [HOST:]PORT with a port from 0 to 65535")
    return host or DEFAULT_METRICS_HOST, int(port_text)


def format_metrics_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# --- followers: each event counted once (pure; fed the rows of one scrape) ------------------


@dataclass
class RunChanges:
    started: int = 0
    resumed: int = 0
    finished: dict[str, int] = field(default_factory=dict)


class RunFollower:
    """Counts run starts (a `run_started` event appeared), resumes and run ends (a terminal status),
    once each.

    A resume is a run that had begun before the baseline (under an earlier host, or before this
    exporter started) and that a worker takes up again afterwards (its launches grow): counted once,
    so each run that runs on this exporter's watch is counted as started or as resumed.
    Watches the runs it has seen that have not finished (rowid → launches seen); a run leaves the
    watch list when it finishes. Rows above `after` are new.
    """

    def __init__(self) -> None:
        self.after = 0
        # rowid → (the event seq its launches were counted up to, launches by then)
        self._live: dict[int, tuple[int, int]] = {}
        self._inherited: dict[int, int] = {}  # begun before the baseline: rowid → launches then

    @property
    def watched(self) -> dict[int, tuple[int, int]]:
        """rowid → (last event seq counted, launches by then): `metrics_queries.runs_by_rowid` reads
        only the events above it."""
        return dict(self._live)

    def baseline(self, max_rowid: int, live: Iterable[mq.RunRow]) -> None:
        """What exists when the exporter starts is not counted; its live runs are watched."""
        self.after = max_rowid
        live = list(live)
        self._live = {row.rowid: (row.last_seq, row.launches) for row in live}
        self._inherited = {row.rowid: row.launches for row in live if row.started}

    def step(self, rows: Iterable[mq.RunRow], max_rowid: int) -> RunChanges:
        """`rows`: the watched runs (as read now) and every run above `after`."""
        changes = RunChanges()
        gone = set(self._live)
        top = self.after
        for row in rows:
            gone.discard(row.rowid)
            top = max(top, row.rowid)
            seq, launches = self._live.get(row.rowid, (0, 0))
            if row.started and not launches:
                changes.started += 1
            inherited = self._inherited.get(row.rowid)
            if inherited is not None and row.launches > inherited:
                changes.resumed += 1
                del self._inherited[row.rowid]
            if row.finished:
                changes.finished[row.status] = changes.finished.get(row.status, 0) + 1
                self._live.pop(row.rowid, None)
                self._inherited.pop(row.rowid, None)
            else:
                self._live[row.rowid] = (max(row.last_seq, seq), max(row.launches, launches))
        for rowid in gone:  # deleted without finishing (not done by the host; never counted)
            del self._live[rowid]
            self._inherited.pop(rowid, None)
        # Rowids are reused only after the newest rows were deleted: start again from the top.
        self.after = min(top, max_rowid)
        return changes


class AttemptFollower:
    """Yields each node attempt's (kind, duration) once, when its finished_at is first seen set."""

    def __init__(self) -> None:
        self.after = 0
        self._open: set[int] = set()

    @property
    def watched(self) -> list[int]:
        return list(self._open)

    def baseline(self, max_rowid: int, open_rowids: Iterable[int]) -> None:
        self.after = max_rowid
        self._open = set(open_rowids)

    def step(self, rows: Iterable[mq.AttemptRow], max_rowid: int) -> list[tuple[str, float]]:
        """`rows`: the watched (unfinished) attempts as read now and every attempt above `after`."""
        finished: list[tuple[str, float]] = []
        gone = set(self._open)
        top = self.after
        for row in rows:
            gone.discard(row.rowid)
            top = max(top, row.rowid)
            if row.finished:
                finished.append((row.kind or "compute", row.duration_s or 0.0))
                self._open.discard(row.rowid)
            elif row.run_live:
                self._open.add(row.rowid)
            else:  # e.g. the waiting checkpoint of a cancelled run: it will not finish, stop watching it
                self._open.discard(row.rowid)
        self._open -= gone
        self.after = min(top, max_rowid)
        return finished


# --- the scrape-time collector -------------------------------------------------------------


class StoreCollector(Collector):
    """Reads the state database (and the host's board) whenever the registry is collected.

    `collect` runs in whichever thread scrapes (the exporter's server thread);
    a lock keeps the followers consistent if two threads collect at once. A
    failed read is logged and leaves the counters where they were; the
    database gauges are left out of that scrape.
    """

    def __init__(self, database: DatabaseLocation, options: StoreOptions, board: HostBoard) -> None:
        self._database = database
        self._options = options
        self._board = board
        self._lock = threading.Lock()
        self._runs = RunFollower()
        self._attempts = AttemptFollower()
        self._started = 0
        self._resumed = 0
        self._finished = dict.fromkeys(TERMINAL_STATUSES, 0)
        # Not registered: yielded by `collect` right after it has been brought up to date.
        self._node_duration = Histogram(
            "piwf_node_duration_seconds", "Node attempts that finished, by node kind "
            "(effect: action/shell; checkpoint, decision, agent: interactive; compute: anything else)",
            ["kind"], registry=None, buckets=NODE_DURATION_BUCKETS)
        for kind in NODE_KINDS:
            self._node_duration.labels(kind)

    def _reader(self) -> StoreReader:
        return StoreReader(self._database, self._options)

    def baseline(self) -> None:
        """Note where the database stands; only what happens afterwards is counted. Caller's thread."""
        reader = self._reader()
        try:
            with self._lock, reader.snapshot():
                self._runs.baseline(mq.max_run_rowid(reader), mq.live_runs(reader))
                self._attempts.baseline(mq.max_attempt_rowid(reader), mq.open_attempts_of_live_runs(reader))
        finally:
            reader.close()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            gauges = self._read_and_count()
            return [*self._counters(), *self._node_duration.collect(), *gauges, *self._worker_gauges()]

    def _read_and_count(self) -> list[Metric]:
        try:
            reader = self._reader()
            try:
                with reader.snapshot():
                    run_rows = mq.runs_by_rowid(reader, self._runs.watched) + mq.runs_after(reader, self._runs.after)
                    max_run = mq.max_run_rowid(reader)
                    attempt_rows = (mq.attempts_by_rowid(reader, self._attempts.watched)
                                    + mq.attempts_after(reader, self._attempts.after))
                    max_attempt = mq.max_attempt_rowid(reader)
                    runs = run_counts(reader)
                    decisions = mq.pending_decisions(reader)
                    effects = mq.ambiguous_effects(reader)
                    deliveries = mq.ambiguous_channel_deliveries(reader)
                    undelivered = mq.undelivered_channel_messages(reader)
                    rate_held = rates.held_by_limiter(reader.conn)
            finally:
                reader.close()
        except Exception:  # a scrape must never take the exporter down
            log.warning("metrics: reading the state database failed", exc_info=True)
            return []
        changes = self._runs.step(run_rows, max_run)
        self._started += changes.started
        self._resumed += changes.resumed
        for status, count in changes.finished.items():
            self._finished[status] = self._finished.get(status, 0) + count
        for kind, seconds in self._attempts.step(attempt_rows, max_attempt):
            self._node_duration.labels(kind).observe(seconds)
        by_status = GaugeMetricFamily("piwf_runs", "Runs in the database, by status", labels=["status"])
        for status in (*RUN_STATUSES, *sorted(set(runs) - set(RUN_STATUSES))):
            by_status.add_metric([status], runs.get(status, 0))
        held = GaugeMetricFamily("piwf_runs_rate_held", "Runs held by a rate limit, by limiter", labels=["limiter"])
        for limiter, count in sorted(rate_held.items()):
            held.add_metric([limiter], count)
        return [
            by_status,
            held,
            GaugeMetricFamily("piwf_decisions_pending", "Human decisions waiting for an answer", value=decisions),
            GaugeMetricFamily("piwf_effects_ambiguous", "Side effects with an unknown outcome (need a person)",
                              value=effects),
            GaugeMetricFamily("piwf_channel_deliveries_ambiguous",
                              "Channel messages that may or may not have been sent (need a person)", value=deliveries),
            GaugeMetricFamily("piwf_channel_messages_undelivered",
                              "Channel messages that surely were not sent yet and are being tried again",
                              value=undelivered),
        ]

    def _counters(self) -> list[Metric]:
        started = CounterMetricFamily("piwf_runs_started", "Runs a worker began (run_started), since the "
                                      "exporter started", value=self._started)
        resumed = CounterMetricFamily("piwf_runs_resumed", "Runs begun before the exporter started (under an "
                                      "earlier host) that a worker took up again, each once", value=self._resumed)
        finished = CounterMetricFamily("piwf_runs_finished", "Runs that reached a terminal status, since the "
                                       "exporter started", labels=["status"])
        for status in TERMINAL_STATUSES:
            finished.add_metric([status], self._finished.get(status, 0))
        return [started, resumed, finished]

    def _worker_gauges(self) -> list[Metric]:
        scheduler = self._board.snapshot(Section.SCHEDULER)
        return [
            GaugeMetricFamily("piwf_workers_busy", "Runs executing in a worker now",
                              value=len(scheduler.get("active", []))),
            GaugeMetricFamily("piwf_workers_max", "Runs the host executes at once (--max-workers)",
                              value=scheduler.get("max_workers", 0)),
        ]


# --- the exporter --------------------------------------------------------------------------


class _MetricsServer(http.server.HTTPServer):
    """One thread serves requests one after another (scrapes are rare and short)."""

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host name up (socket.getfqdn); nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class HostMetrics:
    """One host's exporter: registry, writer histograms, store collector and HTTP server.

    Owned by the host (kept in `HostParts`, stopped first by `shut_down`).
    `__init__` creates the metric objects only (no socket, no thread);
    `start` and `stop` run in the caller's thread; the server runs in one
    daemon thread, "piwf-metrics", that `stop` shuts down and joins.
    """

    def __init__(self, address: str, database: DatabaseLocation, options: StoreOptions, board: HostBoard) -> None:
        self._host, self._port = parse_metrics_address(address)
        self._board = board
        self.registry = CollectorRegistry()
        self._commit_seconds = Histogram(
            "piwf_writer_commit_seconds", "Time the writer spent in one batch's transaction (committed batches)",
            registry=self.registry, buckets=COMMIT_SECONDS_BUCKETS)
        self._batch_commands = Histogram(
            "piwf_writer_batch_commands", "Commands per committed writer batch",
            registry=self.registry, buckets=BATCH_COMMANDS_BUCKETS)
        self._failed_batches = Counter(
            "piwf_writer_failed_batches", "Writer batches that did not commit (disk full, read-only …)",
            registry=self.registry)
        self._collector = StoreCollector(database, options, board)
        self.registry.register(self._collector)
        self._server: _MetricsServer | None = None
        self._thread: threading.Thread | None = None

    def observe_batch(self, commands: int, seconds: float, committed: bool) -> None:
        """The writer's batch hook: called in the writer's thread after every batch."""
        if committed:
            self._commit_seconds.observe(seconds)
            self._batch_commands.observe(commands)
        else:
            self._failed_batches.inc()

    @property
    def address(self) -> tuple[str, int] | None:
        """(host, port) the server listens on (the real port when 0 was asked for); None when not serving."""
        server = self._server
        return None if server is None else (self._host, int(server.server_address[1]))

    def start(self) -> None:
        """Take the baseline, bind the socket, start the server thread, publish the address.

        Raises HostError when the address cannot be bound (taken, not local …).
        """
        if self._server is not None:
            return
        self._collector.baseline()
        handler = type("PiwfMetricsHandler", (MetricsHandler.factory(self.registry),),
                       {"timeout": REQUEST_TIMEOUT_S})
        server_class = type("_MetricsServer6", (_MetricsServer,), {"address_family": socket.AF_INET6}) \
            if ":" in self._host else _MetricsServer
        try:
            server = server_class((self._host, self._port), handler)
        except OSError as exc:
            raise HostError(f"metrics: cannot listen on {format_metrics_address(self._host, self._port)}: "
                            f"{exc.strerror or exc}") from exc
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                                        name="piwf-metrics", daemon=True)
        self._thread.start()
        host, port = self.address or (self._host, self._port)
        address = format_metrics_address(host, port)
        self._board.publish(Section.METRICS, {"address": address, "host": host, "port": port,
                                        "url": f"http://{address}/metrics"})
        log.info("metrics served at http://%s/metrics", address)

    def stop(self) -> None:
        """Stop serving and join the server thread; safe to call twice or before `start`."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        self._board.publish(Section.METRICS, {})
        server.shutdown()  # returns once serve_forever has (the current request, if any, is finished)
        server.server_close()
        if thread is not None:
            thread.join(timeout=REQUEST_TIMEOUT_S + 5)
            if thread.is_alive():
                log.error("the metrics server thread did not stop")

