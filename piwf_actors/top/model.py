"""Data for `piwf-top`: one `Snapshot` of the host per refresh, gathered over the client protocol.

`Gatherer.gather(selected_run_id)` makes a few read-only requests
(host.status, run.list twice — the newest runs, and every parked run so that
no run waiting on an ambiguous effect is ever out of sight —,
interaction.list, channel.status, schedule.list, run.get of the selected run and, once per
run, its stored graph (run.graph), and run.events for recent runs that changed) and samples the host's worker
processes with psutil. `Gatherer.run_detail` is the single run.get the app
makes at once when the selection moves between refreshes. The gatherer keeps
state between refreshes on purpose:

- `ProcessCache` keeps one `psutil.Process` per worker pid, because the first
  `cpu_percent(None)` call of a Process object always returns 0.0; a figure
  only means something from the second sample of the same object on.
- `EventTail` keeps a `run.events` cursor per run, so a refresh asks only for
  events it has not seen, and skips ended runs whose summary did not change.

A `Snapshot` is plain data (frozen, no client, no psutil objects) so that
`piwf_actors.top.render.render` can stay a pure function and tests can build
one by hand. What the person did (selection, sort, filter, confirmation…)
is not here but in `piwf_actors.top.state.UiState`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil

from piwf_actors.client import Client
from piwf_actors.errors import PiwfError
from piwf_actors.statuses import LIVE_STATUSES
from piwf_actors.workflows.graph import Graph
from piwf_actors.workflows.graph_data import GraphDataError, graph_of

#: Stored graphs the gatherer keeps (one per run selected lately).
GRAPHS_KEPT = 32


@dataclass(frozen=True, slots=True)
class WorkerRow:
    pid: int
    run_id: str | None  # None: an idle (warm) worker
    generation: int | None
    cpu_percent: float | None  # None: first sample of this process, or it is gone / not ours
    rss_bytes: int | None


@dataclass(frozen=True, slots=True)
class EventRow:
    run_id: str
    workflow: str | None
    seq: int
    kind: str
    node_id: str | None
    created_at: float | None
    payload: Any = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    taken_at: float
    host: dict[str, Any] = field(default_factory=dict)  # the host.status receipt
    runs: tuple[dict[str, Any], ...] = ()  # run.list rows, newest first
    decisions: tuple[dict[str, Any], ...] = ()  # pending interactive requests of kind `decision`
    other_requests: int = 0  # pending checkpoints / agent requests (answered with `piwf inbox`)
    workers: tuple[WorkerRow, ...] = ()
    events: tuple[EventRow, ...] = ()  # newest first
    channels: dict[str, Any] = field(default_factory=dict)  # the channel.status receipt
    error: str | None = None  # why the host could not be read at `taken_at` (the rest is the last good data)
    detail_run_id: str | None = None  # the run `detail` was asked for
    detail: dict[str, Any] | None = None  # its run.get view (with `revision`); None: not read, or gone
    # The graph the host stored when that run started (run.graph); None: none stored (an older run), or not read.
    detail_graph: Graph | None = None
    schedules: tuple[dict[str, Any], ...] = ()  # the schedule.list receipt's schedules (next fire times)


def is_ambiguous(run: dict[str, Any]) -> bool:
    """A run parked until a person settles an effect of unknown outcome (`effect.resolve`)."""
    return run.get("status") == "parked" and run.get("park_reason") == "ambiguous_effect"


def decision_choices(request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The choices of a decision request in the host's order: [(choice key, {label, input})]."""
    contract = request.get("contract") or {}
    choices = contract.get("choices") or {}
    if not isinstance(choices, dict):
        return []
    return [(str(key), value if isinstance(value, dict) else {}) for key, value in choices.items()]


class ProcessCache:
    """psutil.Process objects kept between refreshes, keyed by pid and checked for pid reuse."""

    def __init__(self) -> None:
        self._processes: dict[int, psutil.Process] = {}

    def sample(self, pids: Iterable[int]) -> dict[int, tuple[float | None, int | None]]:
        """{pid: (cpu percent since the last sample or None, rss bytes or None)} for `pids`; forgets others."""
        wanted = {pid for pid in pids if isinstance(pid, int) and pid > 0}
        for pid in list(self._processes):
            if pid not in wanted:
                del self._processes[pid]
        figures: dict[int, tuple[float | None, int | None]] = {}
        for pid in sorted(wanted):
            process = self._processes.get(pid)
            try:
                # is_running() compares create_time, so a reused pid gets a fresh object (and a fresh baseline).
                if process is None or not process.is_running():
                    process = psutil.Process(pid)
                    process.cpu_percent(None)  # the baseline; this first figure is always 0.0
                    self._processes[pid] = process
                    figures[pid] = (None, process.memory_info().rss)
                    continue
                with process.oneshot():
                    figures[pid] = (process.cpu_percent(None), process.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._processes.pop(pid, None)
                figures[pid] = (None, None)
        return figures


class EventTail:
    """The newest events of the newest runs, fetched incrementally with per-run cursors."""

    PAGE = 200
    MAX_PAGES = 3  # per run and refresh: a run with a long history catches up over a few refreshes

    def __init__(self, keep: int = 50) -> None:
        self.keep = keep
        self._after: dict[str, int] = {}
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._events: list[EventRow] = []

    def update(self, client: Client, runs: Iterable[dict[str, Any]]) -> tuple[EventRow, ...]:
        for run in runs:
            run_id = str(run.get("run_id"))
            summary = (run.get("revision"), run.get("status"), run.get("steps"), run.get("updated_at"))
            # An ended run whose summary did not change has no new events; active ones are always asked.
            if self._seen.get(run_id) == summary and run.get("status") not in LIVE_STATUSES:
                continue
            if self._fetch(client, run_id, run.get("workflow")):
                self._seen[run_id] = summary
        self._events.sort(key=lambda e: (e.created_at or 0.0, e.seq), reverse=True)
        del self._events[self.keep:]
        return tuple(self._events)

    def _fetch(self, client: Client, run_id: str, workflow: Any) -> bool:
        """Read new events of `run_id`; True when it caught up (no page left)."""
        after = self._after.get(run_id, 0)
        for _ in range(self.MAX_PAGES):
            answer = client.request("run.events", {"after": after, "limit": self.PAGE}, run_id=run_id)
            if not answer.ok:  # pruned or gone meanwhile: not worth a banner
                return True
            receipt = answer.receipt or {}
            for event in receipt.get("events") or []:
                self._events.append(EventRow(run_id, None if workflow is None else str(workflow),
                                             int(event.get("seq") or 0), str(event.get("kind")),
                                             event.get("node_id"), event.get("created_at"), event.get("payload")))
            after = int(receipt.get("next_after") or after)
            self._after[run_id] = after
            if not receipt.get("more"):
                return True
        return False


class Gatherer:
    """Builds a `Snapshot` per call; raises HostNotRunning when the host is gone, PiwfError when it refuses."""

    def __init__(self, client: Client, *, run_limit: int = 200, event_runs: int = 5, keep_events: int = 50) -> None:
        self.client = client
        self.run_limit = run_limit
        self.event_runs = event_runs
        self.processes = ProcessCache()
        self.tail = EventTail(keep_events)
        self._graphs: dict[str, Graph | None] = {}  # run id → its stored graph, oldest read first

    def _receipt(self, operation: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.client.request(operation, payload)
        if not answer.ok:
            raise PiwfError(f"{operation}: {answer.outcome}: {answer.error}")
        return answer.receipt or {}

    def gather(self, selected_run_id: str | None = None) -> Snapshot:
        taken_at = time.time()
        host = self._receipt("host.status")
        runs = list(self._receipt("run.list", {"limit": self.run_limit}).get("runs") or [])
        # An old run parked on an ambiguous effect waits for a person: keep it listed however many came after.
        shown = {run.get("run_id") for run in runs}
        parked = self._receipt("run.list", {"status": "parked", "limit": 1000}).get("runs") or []
        runs += [run for run in parked if is_ambiguous(run) and run.get("run_id") not in shown]
        requests = self._receipt("interaction.list").get("requests") or []
        decisions = tuple(r for r in requests if r.get("kind") == "decision")
        events = self.tail.update(self.client, runs[: self.event_runs])
        channels = self._receipt("channel.status")
        schedules = self.client.request("schedule.list")  # a host without schedules answers with none
        return Snapshot(taken_at=taken_at, host=host, runs=tuple(runs), decisions=decisions,
                        other_requests=len(requests) - len(decisions), workers=self._workers(host), events=events,
                        channels=channels, detail_run_id=selected_run_id, detail=self.run_detail(selected_run_id),
                        detail_graph=self.run_graph(selected_run_id),
                        schedules=tuple((schedules.receipt or {}).get("schedules") or ()) if schedules.ok else ())

    def run_detail(self, run_id: str | None) -> dict[str, Any] | None:
        """The run.get view of `run_id`; None without a run id or when the host does not know it (pruned)."""
        if run_id is None:
            return None
        answer = self.client.request("run.get", run_id=run_id)
        return answer.receipt if answer.ok and isinstance(answer.receipt, dict) else None

    def run_graph(self, run_id: str | None) -> Graph | None:
        """The graph stored with `run_id` when it started (run.graph: data, so the console runs no workflow
        code), read once per run — it never changes. None without one (a run stored before hosts kept graphs,
        an older host, a run pruned); the tree is then drawn from run.get alone."""
        if run_id is None:
            return None
        if run_id not in self._graphs:
            try:
                document = self.client.run_graph(run_id)
                graph = None if document is None else graph_of(document)
            except (PiwfError, GraphDataError, ValueError, TimeoutError, OSError):
                return None  # asked again at the next refresh (the tree meanwhile shows the nodes reached)
            self._graphs[run_id] = graph
            while len(self._graphs) > GRAPHS_KEPT:
                self._graphs.pop(next(iter(self._graphs)))
        return self._graphs[run_id]

    def _workers(self, host: dict[str, Any]) -> tuple[WorkerRow, ...]:
        workers = host.get("workers") or {}
        active = [item for item in workers.get("active") or []
                  if isinstance(item, dict) and isinstance(item.get("pid"), int)]
        # host.status reports idle workers as a count; a list of pids (or `idle_pids`) is used when present.
        idle = workers.get("idle")
        idle_pids = [pid for pid in (idle if isinstance(idle, list) else workers.get("idle_pids") or [])
                     if isinstance(pid, int)]
        figures = self.processes.sample([int(item["pid"]) for item in active] + idle_pids)
        rows = [WorkerRow(int(item["pid"]), item.get("run_id"), item.get("generation"),
                          *figures.get(int(item["pid"]), (None, None))) for item in active]
        rows += [WorkerRow(pid, None, None, *figures.get(pid, (None, None))) for pid in idle_pids]
        return tuple(rows)
