"""Growth: what 100,000 finished runs — with children and mailboxes — cost a host, next to an empty state.

Every latency goes through `piwf_actors.client.Client` over the Unix socket of a real host started
as a subprocess (`bin/piwf-host --state-dir D --max-workers 2`, durable defaults), one client, one
request after the other (closed loop), after a warm-up. Prints, from one run:

  1. latency   p50/p99 of `run.start` of a trivial 3-node run (bench/common.py; the timed figure
               is the call only: after each start the bench waits, untimed, until the run is
               done, so every start meets an idle host), then `host.status`, `run.get` of the
               newest run, `run.list` (default limit 100, no filter), `run.get` of a parent
               (a `map_workflow` over 4 items: its view lists its 4 children and their counts)
               and `run.list` of that parent's children (payload `{"parent": run_id}`, what
               `piwf list --parent` sends), for the empty state and for the big one, and the
               ratio big/empty. "Empty" is a new state holding only the runs this measurement
               starts (--starts + 6 trivial runs, so run.list answers a full page there too, and
               the parent with its children).
  2. bytes     bytes per run of the mix: what the real runs of the fill added to each table and
               index (SQLite's `dbstat`: pages used, and the payload bytes in them), divided by
               the number of runs they finished (children included); and the big state's file
               size per run.
  3. memory    RSS and USS (psutil) of the idle host and of each warm worker, on the empty state
               and on the big one; the host's RSS while it ran the real runs of the fill (growth
               per run) and after the big state has been served for a while (the latency loops
               and a batch of further real runs of the mix): nothing should grow with the runs
               served.

The mix. The real runs are started through the socket in a fixed pattern of 20 starts: 14 trivial
3-node runs; 3 fan-out parents (`plan: compute → each: map_workflow(item, 2–6 items) → sum:
compute`, the child `item` a one-node compute workflow; 4 children per parent on average), so
each parent has a `children` wait in `run_wait` and its children carry `parent_run_id`,
`parent_node_id`, `parent_wait_id` and `child_index`; and 3 listeners (`a: compute → w:
wait_message("go") → c: compute`): the bench waits until the listener is parked on its wait, then
sends it one message (`message.send`), which settles the wait and is consumed (a `run_message`
row and a `message` wait in `run_wait`). Of 32 finished runs per pattern: 14 trivial (43.8 %),
3 parents (9.4 %), 12 children (37.5 %), 3 took a message (9.4 %). The proportions the big state
ends up with (the measurement's own trivial runs are copied too, so they shift slightly) are
counted from its rows and printed.

How the big state is filled: first a few thousand real runs of the mix go through the host
(`run.start` over the socket, run by its workers; `message.send` to the listeners). Then the host
is stopped and those runs are multiplied with SQL `INSERT … SELECT` into every table that holds
rows of a run (run, run_event, node_attempt, run_wait, run_message, run_worker, worker_message,
host_command; any other table with a `run_id` column must hold no rows of them), until there are
--runs runs (and --events events, when given; by default the events are what the runs bring). A
parent is copied together with its children (whole families, so the copies keep the proportions),
under fresh ids: time-ordered run and attempt ids, wait and message ids, launch ids, idempotency
keys. Every link is remapped to the copies: a copied child's `parent_run_id` and `parent_wait_id`
name its copied parent and that copy's wait, a wait's `attempt_id` the copied attempt, a
message's `wait_id` the copied wait, and so do the ids in event payloads (`wait_id`,
`message_id`, a child's `parent_run_id` in `run_created`) and in a message wait's result
(`message_id`); the receipts in `host_command` and the launch ids in `run_claimed` payloads stay
as they were. Times are moved back so the copies are older than the real runs. Blob references
(workflow source, inputs, outputs) are copied as they are and stay valid (the copies share the
blobs of the runs they copy). The `run_count` counters follow by their triggers. `state verify`
then checks the filled file (printed, with how long it took), and so does the bench's own check
of the links, which verify does not look at (children ↔ parent and its wait, a children wait's
`children_total`, messages ↔ waits, waits ↔ attempts, the ids in event payloads); the host
started on it must show the oldest copied parent's children in `run.get` and `run.list
--parent`. Any problem found makes the bench exit 1 after its report.

Run: .venv/bin/python bench/growth.py [--quick] [--runs 100000] [--events N] [--real-runs 3000]
     [--calls 2000] [--starts 300] [--keep]
`--real-runs` counts the runs started through the socket; the parents' children come on top
(3,000 starts finish 4,800 runs). `--quick`: 20,000 runs from 1,000 starts, fewer calls (~20 s
here; the default takes ~75 s, the real runs of the fill about half of it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from common import WORKFLOW_SOURCE, pct  # noqa: E402  (bench/ is the script's directory)

from piwf_actors.client.connection import Client, HostNotRunning  # noqa: E402
from piwf_actors.ids import new_id  # noqa: E402
from piwf_actors.store import state_report  # noqa: E402

FINAL = ("done", "failed", "cancelled")
MAX_WORKERS = 2
MIB = 1024 * 1024

FLOWS_SOURCE = '''\
"""The growth bench's runs besides the trivial one: a fan-out parent and its child, a listener."""

from piwf_actors.workflows import compute, define_workflow, edge, map_workflow, wait_message

item = define_workflow(name="item", start_at="a", edges=[],
                       nodes={"a": compute(run=lambda ctx: {"x": ctx.input})})
fanout = define_workflow(
    name="fanout", start_at="plan",
    nodes={
        "plan": compute(run=lambda ctx: {"items": list(range(ctx.input["n"]))}),
        "each": map_workflow(item, items=lambda ctx: ctx.outputs["plan"]["items"]),
        "sum": compute(run=lambda ctx: {"total": sum(o["x"] for o in ctx.outputs["each"])}),
    },
    edges=[edge("plan", "each"), edge("each", "sum")],
)
listener = define_workflow(
    name="listener", start_at="a",
    nodes={
        "a": compute(run=lambda ctx: {"ready": True}),
        "w": wait_message("go"),
        "c": compute(run=lambda ctx: {"got": ctx.outputs["w"]}),
    },
    edges=[edge("a", "w"), edge("w", "c")],
)
'''


@dataclass(frozen=True)
class Specs:
    """The workflow specs (`file:attr`) the bench starts."""

    trivial: str
    fanout: str
    listener: str


#: The mix, by a start's place in a pattern of 20: these places start a fan-out parent, these a
#: listener, the others a trivial run (14 trivial, 3 parents, 3 listeners).
PATTERN = 20
FANOUT_AT = (3, 10, 17)
LISTENER_AT = (6, 13, 19)


def fanout_items(n: int) -> int:
    """Children of the parent started as the n-th start: 2 to 6, 4 on average over every 5 patterns."""
    return 2 + (n // PATTERN + n) % 5
# --- the host, in its own process ------------------------------------------------------------------


class HostProcess:
    """`bin/piwf-host` on a state directory; its log goes next to the directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.socket_path = str(state_dir / "host.sock")
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115  (closed in stop)
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(REPO / "bin" / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", str(MAX_WORKERS),
             "--log-level", "WARNING"],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.ps = psutil.Process(self.proc.pid)

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Until the socket answers and every worker slot holds a started worker; seconds since spawn."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"piwf-host exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with Client(socket_path=self.socket_path, retries=0, timeout=10) as client:
                    workers = client.status()["workers"]
                    if workers["idle"] + len(workers["active"]) >= MAX_WORKERS:
                        return time.perf_counter() - self.started
            except HostNotRunning:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"piwf-host not ready within {timeout} s: {self.log_tail()}")

    def log_tail(self) -> str:
        self._log.flush()
        return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-5:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


@contextlib.contextmanager
def running_host(state_dir: Path) -> Iterator[HostProcess]:
    host = HostProcess(state_dir)
    try:
        yield host
    finally:
        host.stop()


# --- memory ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    rss: int
    uss: int

    def __str__(self) -> str:
        return f"RSS {self.rss / MIB:6.1f} MiB  USS {self.uss / MIB:6.1f} MiB"


def memory(pid: int) -> Memory:
    info = psutil.Process(pid).memory_full_info()
    return Memory(info.rss, info.uss)


def worker_pids(client: Client) -> list[int]:
    return list(client.status()["workers"].get("idle_pids") or [])


def print_memory(label: str, host: HostProcess, client: Client) -> Memory:
    """The host's memory (with its thread and file-descriptor counts: neither may grow with runs)
    and each warm worker's."""
    host_memory = memory(host.proc.pid)
    print(f"  {label:<34} host     {host_memory}  threads {host.ps.num_threads()}  fds {host.ps.num_fds()}")
    for pid in worker_pids(client):
        with contextlib.suppress(psutil.Error):
            print(f"  {'':<34} worker   {memory(pid)}  (pid {pid})")
    return host_memory


# --- latency ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    p50_ms: float
    p99_ms: float
    calls: int


#: The figures, in the order they are printed.
OPERATIONS = ("host.status", "run.start", "run.get", "run.list", "run.get parent", "run.list parent")


def timed_calls(call: Callable[[], Any], count: int, warmup: int) -> Figure:
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return Figure(pct(samples, 0.50) * 1000, pct(samples, 0.99) * 1000, count)


def wait_status(client: Client, run_id: str, wanted: tuple[str, ...], timeout: float = 60.0) -> dict[str, Any]:
    """Polls run.get until the run's status is one of `wanted` (or final); its view."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.request("run.get", run_id=run_id)
        if answer.ok and answer.receipt["status"] in wanted + FINAL:
            return answer.receipt
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} not {' or '.join(wanted + FINAL)} within {timeout} s")
        time.sleep(0.002)


def wait_done(client: Client, run_id: str, timeout: float = 60.0) -> dict[str, Any]:
    view = wait_status(client, run_id, (), timeout)
    if view["status"] != "done":
        raise RuntimeError(f"run {run_id} ended {view['status']}: {view.get('error')}")
    return view


def start_parent(client: Client, specs: Specs, items: int) -> str:
    """A fan-out parent over `items` children, run until done; its run id (its view checked)."""
    run_id = client.start(specs.fanout, {"n": items})["run_id"]
    view = wait_done(client, run_id)
    children = view.get("children") or {}
    if children.get("total") != items or len(children.get("runs") or []) != items:
        raise RuntimeError(f"parent {run_id}: run.get shows {children.get('total')} children, not {items}")
    return run_id


def measure(host: HostProcess, specs: Specs, calls: int, starts: int) -> dict[str, Figure]:
    """The figures of OPERATIONS, on one connection (a second one waits for each started run).

    run.start goes first, so that run.list has a full page (its default limit, 100) to answer on
    the empty state too: the comparison is of what the history costs, not of page sizes. Then one
    parent with 4 children, for run.get of a parent and run.list of its children."""
    with Client(socket_path=host.socket_path) as client, Client(socket_path=host.socket_path) as waiter:

        def ok(operation: str, payload: dict[str, Any] | None = None, run_id: str | None = None) -> Any:
            answer = client.request(operation, payload, run_id=run_id)
            if not answer.ok:
                raise RuntimeError(f"{operation}: {answer.outcome} {answer.error}")
            return answer.receipt

        def children_of(parent_id: str) -> None:
            if len(ok("run.list", {"parent": parent_id})["runs"]) != 4:
                raise RuntimeError(f"run.list of parent {parent_id} does not list its 4 children")

        samples = []
        newest = ""
        for n in range(starts + 5):
            t0 = time.perf_counter()
            newest = ok("run.start", {"workflow": specs.trivial, "input": {"start": n}})["run_id"]
            elapsed = time.perf_counter() - t0
            wait_done(waiter, newest)
            if n >= 5:  # the first few warm up
                samples.append(elapsed)
        parent = start_parent(waiter, specs, 4)
        return {
            "run.start": Figure(pct(samples, 0.50) * 1000, pct(samples, 0.99) * 1000, starts),
            "host.status": timed_calls(lambda: ok("host.status"), calls, 50),
            "run.get": timed_calls(lambda: ok("run.get", run_id=newest), calls, 50),
            "run.list": timed_calls(lambda: ok("run.list", {}), calls, 50),
            "run.get parent": timed_calls(lambda: ok("run.get", run_id=parent), calls, 50),
            "run.list parent": timed_calls(lambda: children_of(parent), calls, 50),
        }


# --- real runs -------------------------------------------------------------------------------------


def run_mix(client: Client, waiter: Client, specs: Specs, n: int) -> None:
    """The n-th start of the mix (see PATTERN), until it is done: a trivial run, a fan-out parent
    (done once its children are), or a listener sent its message once it is parked on its wait."""
    place = n % PATTERN
    if place in FANOUT_AT:
        run_id = client.start(specs.fanout, {"n": fanout_items(n)})["run_id"]
    elif place in LISTENER_AT:
        run_id = client.start(specs.listener, {"fill": n})["run_id"]
        view = wait_status(waiter, run_id, ("parked",))
        if view["status"] != "parked" or [w["kind"] for w in view.get("waits") or []] != ["message"]:
            raise RuntimeError(f"listener {run_id} is {view['status']} with waits {view.get('waits')}")
        receipt = client.send_message(run_id, "go", {"fill": n})
        if receipt.get("status") not in ("pending", "consumed"):
            raise RuntimeError(f"message.send to {run_id}: {receipt}")
    else:
        run_id = client.start(specs.trivial, {"fill": n})["run_id"]
    wait_done(waiter, run_id)


def run_real(host: HostProcess, specs: Specs, count: int, on_progress: Callable[[int], None] | None = None,
             clients: int = 4) -> float:
    """`count` starts of the mix through the socket (`clients` closed loops, each start → done, the
    n-th start of the fill its place in the pattern); seconds."""
    done = 0
    taken = 0
    lock = threading.Lock()
    errors: list[BaseException] = []
    progress_every = max(1, count // 10)

    def loop() -> None:
        nonlocal done, taken
        try:
            with Client(socket_path=host.socket_path) as client, Client(socket_path=host.socket_path) as waiter:
                while not errors:
                    with lock:
                        if taken >= count:
                            return
                        n = taken
                        taken += 1
                    run_mix(client, waiter, specs, n)
                    with lock:
                        done += 1
                        if on_progress is not None and done % progress_every == 0:
                            on_progress(done)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0


# --- bytes -----------------------------------------------------------------------------------------


def dbstat(db_path: Path) -> dict[str, tuple[str, int, int]]:
    """b-tree name → (its table, bytes of pages, payload bytes), read from SQLite's dbstat."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        owner = {name: table for name, table in conn.execute("SELECT name, tbl_name FROM sqlite_master")}
        return {name: (owner.get(name, name), int(pages), int(payload)) for name, pages, payload in conn.execute(
            "SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name")}
    finally:
        conn.close()


def print_bytes_per_run(before: dict[str, tuple[str, int, int]], after: dict[str, tuple[str, int, int]],
                        runs: int) -> None:
    grown: dict[str, dict[str, tuple[int, int]]] = {}
    for name, (table, pages, payload) in after.items():
        _t, pages0, payload0 = before.get(name, (table, 0, 0))
        if pages - pages0 or payload - payload0:
            grown.setdefault(table, {})[name] = (pages - pages0, payload - payload0)
    total_pages = sum(p for names in grown.values() for p, _ in names.values())
    total_payload = sum(q for names in grown.values() for _, q in names.values())
    print(f"  {'table / index':<44} {'bytes/run':>10} {'payload/run':>12} {'share':>6}")
    for table, names in sorted(grown.items(), key=lambda item: -sum(p for p, _ in item[1].values())):
        pages = sum(p for p, _ in names.values())
        payload = sum(q for _, q in names.values())
        print(f"  {table:<44} {pages / runs:>10.0f} {payload / runs:>12.0f} {pages / total_pages:>6.1%}")
        for name, (p, q) in sorted(names.items(), key=lambda item: -item[1][0]):
            kind = "rows" if name == table else "index"
            label = f"  {kind} {name}" if name != table else "  rows"
            print(f"  {label:<44} {p / runs:>10.0f} {q / runs:>12.0f}")
    print(f"  {'total':<44} {total_pages / runs:>10.0f} {total_payload / runs:>12.0f}")


# --- multiplying runs with SQL ---------------------------------------------------------------------


def _mapped(table: str, column: str) -> str:
    """The copy's id for the id in `column` (kept when it is not one of the copied rows')."""
    return f"coalesce((SELECT new FROM {table} WHERE old = {column}), {column})"


def _json_id(path: str, table: str, value: str) -> str:
    """`value` (a JSON text) with its id at `path` mapped through `table`."""
    return f"json_set({value}, '{path}', {_mapped(table, f'json_extract({value}, {path!r})')})"


#: Tables holding rows of a finished run of the mix, and how their key and link columns get fresh
#: values. `m_run`, `m_att`, `m_wait`, `m_msg`, `m_epoch` map old → new run ids, attempt ids, wait
#: ids, message ids and launch ids of one round; `m` is the row's run in `m_run`.
COPIED: dict[str, dict[str, str]] = {
    "run": {"run_id": "m.new", "parent_run_id": _mapped("m_run", "t.parent_run_id"),
            "parent_wait_id": _mapped("m_wait", "t.parent_wait_id"), "copied_from": _mapped("m_run", "t.copied_from")},
    "run_event": {
        "run_id": "m.new", "attempt_id": _mapped("m_att", "t.attempt_id"),
        # The ids an event names: a wait (wait_started, run_parked, wait_settled, …), a message
        # (message_received), a child's parent (run_created).
        "payload": f"""CASE WHEN t.payload IS NULL THEN NULL
            WHEN json_extract(t.payload, '$.wait_id') IS NOT NULL THEN {_json_id('$.wait_id', 'm_wait', 't.payload')}
            WHEN json_extract(t.payload, '$.message_id') IS NOT NULL
                THEN {_json_id('$.message_id', 'm_msg', 't.payload')}
            WHEN json_extract(t.payload, '$.parent_run_id') IS NOT NULL
                THEN {_json_id('$.parent_run_id', 'm_run', 't.payload')}
            ELSE t.payload END"""},
    "node_attempt": {"attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)", "run_id": "m.new",
                     "copied_from": _mapped("m_att", "t.copied_from")},
    "run_wait": {"wait_id": "(SELECT new FROM m_wait WHERE old = t.wait_id)", "run_id": "m.new",
                 "attempt_id": _mapped("m_att", "t.attempt_id"),
                 "result": f"""CASE WHEN t.result IS NOT NULL AND json_extract(t.result, '$.message_id') IS NOT NULL
                     THEN {_json_id('$.message_id', 'm_msg', 't.result')} ELSE t.result END"""},
    "run_message": {"message_id": "(SELECT new FROM m_msg WHERE old = t.message_id)", "run_id": "m.new",
                    "wait_id": _mapped("m_wait", "t.wait_id")},
    "run_worker": {"worker_id": "(SELECT new FROM m_epoch WHERE old = t.worker_id)", "run_id": "m.new",
                   "launch_id": "(SELECT new FROM m_epoch WHERE old = t.launch_id)"},
    "worker_message": {"launch_id": "(SELECT new FROM m_epoch WHERE old = t.launch_id)", "run_id": "m.new"},
    "host_command": {"run_id": "m.new", "idempotency_key": "t.idempotency_key || :suffix",
                     "request_id": "t.request_id || :suffix"},
}
#: The map tables of a round.
MAPS = ("m_run", "m_att", "m_wait", "m_msg", "m_epoch")


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _copy_sql(conn: sqlite3.Connection, table: str) -> str:
    """INSERT … SELECT copying `table`'s rows of the runs in m_run: keys mapped, times moved back."""
    overrides = COPIED[table]
    columns = _columns(conn, table)
    values = []
    for column in columns:
        if column in overrides:
            values.append(overrides[column])
        elif column.endswith("_at"):
            values.append(f"t.{column} - :shift")
        else:
            values.append(f"t.{column}")
    return (f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} "
            f"FROM {table} t JOIN m_run m ON m.old = t.run_id")


def _families(conn: sqlite3.Connection) -> list[list[tuple[str, float]]]:
    """The finished runs, by family (a run and its child runs, its children's children, …; the
    top run first), families in the order their top run was created; each run with its created_at."""
    rows = conn.execute("SELECT run_id, created_at, CASE WHEN parent_node_id IS NOT NULL THEN parent_run_id END "
                        "FROM run WHERE status IN ('done', 'failed', 'cancelled') ORDER BY created_at").fetchall()
    parent_of = {run_id: parent for run_id, _, parent in rows}
    families: dict[str, list[tuple[str, float]]] = {}
    for run_id, created, _ in rows:
        top = run_id
        while parent_of.get(top) is not None:
            top = parent_of[top]
        if top in parent_of:  # a child of a run that has not finished is left alone
            families.setdefault(top, []).append((run_id, created))
    return sorted(families.values(), key=lambda family: family[0][1])


def _pick(families: list[list[tuple[str, float]]], wanted: int) -> list[tuple[str, float]]:
    """Whole families, the newest first, `wanted` runs in all (or as close as sizes allow)."""
    chosen: list[tuple[str, float]] = []
    for family in reversed(families):
        if len(chosen) + len(family) <= wanted:
            chosen.extend(family)
            if len(chosen) == wanted:
                break
    return chosen


def multiply(db_path: Path, target_runs: int, target_events: int) -> tuple[int, int, float]:
    """Copy the finished runs in the file, family by family, until there are `target_runs` runs and
    `target_events` events. Returns (runs, events, seconds). The host must be stopped."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a bench fill: nothing here needs to survive a crash
        conn.execute("PRAGMA cache_size = -200000")
        families = _families(conn)
        base = [run for family in families for run in family]
        base_ids = [run_id for run_id, _ in base]
        marks = ",".join("?" * len(base_ids))
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table not in COPIED and "run_id" in _columns(conn, table) and conn.execute(
                    f"SELECT count(*) FROM {table} WHERE run_id IN ({marks})", base_ids).fetchone()[0]:
                raise RuntimeError(f"{table} holds rows of the runs to copy; the bench would not copy them")
        attempts = conn.execute(f"SELECT attempt_id, run_id, started_at FROM node_attempt WHERE run_id IN ({marks})",
                                base_ids).fetchall()
        waits = conn.execute(f"SELECT wait_id, run_id FROM run_wait WHERE run_id IN ({marks})", base_ids).fetchall()
        messages = conn.execute(f"SELECT message_id, run_id FROM run_message WHERE run_id IN ({marks})",
                                base_ids).fetchall()
        epochs = [row[0] for row in conn.execute(
            f"SELECT worker_id FROM run_worker WHERE run_id IN ({marks}) UNION "
            f"SELECT launch_id FROM worker_message WHERE run_id IN ({marks})", base_ids + base_ids)]
        created = [at for _, at in base]
        span = max(created) - min(created) + 1.0
        for table in MAPS:
            conn.execute(f"CREATE TEMP TABLE {table} (old TEXT PRIMARY KEY, new TEXT)")
        # (A table the state no longer has, like worker_message rows that went with their launch, is
        # copied only when it exists; one without rows of these runs copies none.)
        statements = {table: _copy_sql(conn, table) for table in COPIED if _columns(conn, table)}
        runs, events = _totals(conn)
        round_no = 0
        while runs < target_runs or events < target_events:
            round_no += 1
            shift = span * round_no
            chosen = _pick(families, target_runs - runs) if runs < target_runs else base
            if not chosen:
                break  # no family is small enough for what is left (the mix always has runs of one)
            chosen_ids = {run_id for run_id, _ in chosen}
            conn.execute("BEGIN")
            for table in MAPS:
                conn.execute(f"DELETE FROM {table}")
            conn.executemany("INSERT INTO m_run VALUES (?, ?)",
                             [(run_id, new_id("run", at - shift)) for run_id, at in chosen])
            conn.executemany("INSERT INTO m_att VALUES (?, ?)",
                             [(attempt_id, new_id("att", started - shift))
                              for attempt_id, run_id, started in attempts if run_id in chosen_ids])
            conn.executemany("INSERT INTO m_wait VALUES (?, ?)",
                             [(wait_id, f"wait_{uuid.uuid4().hex[:26]}") for wait_id, run_id in waits
                              if run_id in chosen_ids])
            conn.executemany("INSERT INTO m_msg VALUES (?, ?)",
                             [(message_id, f"msg_{uuid.uuid4().hex[:26]}") for message_id, run_id in messages
                              if run_id in chosen_ids])
            conn.executemany("INSERT INTO m_epoch VALUES (?, ?)", [(epoch, uuid.uuid4().hex) for epoch in epochs])
            for statement in statements.values():
                conn.execute(statement, {"shift": shift, "suffix": f"-copy{round_no}"})
            conn.execute("COMMIT")
            runs, events = _totals(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return runs, events, time.perf_counter() - t0


def _totals(conn: sqlite3.Connection) -> tuple[int, int]:
    runs = conn.execute("SELECT coalesce(sum(n), 0) FROM run_count").fetchone()[0]
    events = conn.execute("SELECT count(*) FROM run_event").fetchone()[0]
    return int(runs), int(events)


#: The bench's own checks of the links a copy must keep (state verify does not look at them): each
#: SQL counts the rows that break one.
LINK_CHECKS: dict[str, str] = {
    "child without its parent": """SELECT count(*) FROM run c WHERE c.parent_node_id IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM run p WHERE p.run_id = c.parent_run_id)""",
    "child whose wait is not its parent's children wait": """SELECT count(*) FROM run c
        LEFT JOIN run_wait w ON w.wait_id = c.parent_wait_id
        WHERE c.parent_node_id IS NOT NULL AND (w.wait_id IS NULL OR w.run_id IS NOT c.parent_run_id
              OR w.kind != 'children' OR w.node_id IS NOT c.parent_node_id)""",
    "child outside its parent's lifetime": """SELECT count(*) FROM run c JOIN run p ON p.run_id = c.parent_run_id
        WHERE c.parent_node_id IS NOT NULL AND (c.created_at < p.created_at OR c.finished_at > p.finished_at)""",
    "children wait whose children_total is not its children": """SELECT count(*) FROM run_wait w
        WHERE w.kind = 'children' AND w.children_total != (SELECT count(*) FROM run c WHERE c.parent_wait_id = w.wait_id)""",
    "wait without its attempt": """SELECT count(*) FROM run_wait w LEFT JOIN node_attempt a ON a.attempt_id = w.attempt_id
        WHERE a.attempt_id IS NULL OR a.run_id != w.run_id OR a.node_id != w.node_id""",
    "message whose wait is not its run's": """SELECT count(*) FROM run_message m LEFT JOIN run_wait w ON w.wait_id = m.wait_id
        WHERE m.wait_id IS NOT NULL AND (w.wait_id IS NULL OR w.run_id != m.run_id OR w.kind != 'message')""",
    "message wait whose result names another message": """SELECT count(*) FROM run_wait w
        WHERE w.kind = 'message' AND json_extract(w.result, '$.message_id') IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM run_message m WHERE m.message_id = json_extract(w.result, '$.message_id')
                          AND m.wait_id = w.wait_id)""",
    "event naming a wait not of its run": """SELECT count(*) FROM run_event e
        WHERE e.payload IS NOT NULL AND json_extract(e.payload, '$.wait_id') IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM run_wait w WHERE w.wait_id = json_extract(e.payload, '$.wait_id')
                          AND w.run_id = e.run_id)""",
    "event naming a message not of its run": """SELECT count(*) FROM run_event e
        WHERE e.payload IS NOT NULL AND json_extract(e.payload, '$.message_id') IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM run_message m WHERE m.message_id = json_extract(e.payload, '$.message_id')
                          AND m.run_id = e.run_id)""",
    "run_created naming another parent": """SELECT count(*) FROM run_event e JOIN run c ON c.run_id = e.run_id
        WHERE e.kind = 'run_created' AND json_extract(e.payload, '$.parent_run_id') IS NOT c.parent_run_id""",
}


def check_links(db_path: Path) -> tuple[dict[str, int], float]:
    """LINK_CHECKS → rows breaking it (only those with any), and the seconds the checks took."""
    t0 = time.perf_counter()
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        found = {name: int(conn.execute(sql).fetchone()[0]) for name, sql in LINK_CHECKS.items()}
    finally:
        conn.close()
    return {name: n for name, n in found.items() if n}, time.perf_counter() - t0


@dataclass(frozen=True)
class Mix:
    """What the finished runs of a state are (a parent that took a message would count twice: the
    mix has none)."""

    finished: int
    children: int
    parents: int
    messaged: int
    waits: int
    messages: int

    def __str__(self) -> str:
        other = self.finished - self.children - self.parents - self.messaged
        share = lambda n: f"{n / max(1, self.finished):.1%}"  # noqa: E731
        return (f"{self.finished:,} finished runs: {share(other)} trivial 3-node runs, {share(self.parents)} "
                f"parents (map_workflow, 2–6 children), {share(self.children)} their children, "
                f"{share(self.messaged)} took a message; {self.waits:,} run_wait rows, "
                f"{self.messages:,} run_message rows")


def mix_of(db_path: Path) -> Mix:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        one = lambda sql: int(conn.execute(sql).fetchone()[0])  # noqa: E731
        return Mix(
            finished=one("SELECT count(*) FROM run WHERE status IN ('done', 'failed', 'cancelled')"),
            children=one("SELECT count(*) FROM run WHERE parent_node_id IS NOT NULL "
                         "AND status IN ('done', 'failed', 'cancelled')"),
            parents=one("SELECT count(DISTINCT run_id) FROM run_wait WHERE kind = 'children'"),
            messaged=one("SELECT count(DISTINCT run_id) FROM run_message WHERE status = 'consumed'"),
            waits=one("SELECT count(*) FROM run_wait"), messages=one("SELECT count(*) FROM run_message"))
    finally:
        conn.close()


def oldest_parent(db_path: Path) -> tuple[str, int]:
    """The oldest run with a children wait (a copy, after the fill) and its children_total."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT r.run_id, w.children_total FROM run r JOIN run_wait w ON w.run_id = r.run_id "
                           "WHERE w.kind = 'children' ORDER BY r.created_at LIMIT 1").fetchone()
        return str(row[0]), int(row[1])
    finally:
        conn.close()


# --- the report ------------------------------------------------------------------------------------


def print_latencies(empty: dict[str, Figure], big: dict[str, Figure], runs: int, events: int) -> None:
    print(f"\nlatency through the socket, one client, closed loop (ms); big = {runs:,} runs, {events:,} events")
    print(f"  {'operation':<16} {'empty p50':>10} {'p99':>8} {'big p50':>10} {'p99':>8} {'ratio p50':>10} "
          f"{'p99':>6} {'calls':>7}")
    for operation in OPERATIONS:
        e, b = empty[operation], big[operation]
        print(f"  {operation:<16} {e.p50_ms:>10.3f} {e.p99_ms:>8.3f} {b.p50_ms:>10.3f} {b.p99_ms:>8.3f} "
              f"{b.p50_ms / e.p50_ms:>9.2f}x {b.p99_ms / e.p99_ms:>5.2f}x {b.calls:>7}")
    print("  (run.get parent: a parent with 4 children, its view lists them; run.list parent: "
          "run.list {\"parent\": its run id})")


def check_parent_view(client: Client, run_id: str, total: int) -> str:
    """run.get and run.list --parent of a copied parent show its copied children; a line saying so."""
    view = client.get(run_id)
    shown = (view.get("children") or {}).get("total")
    listed = client.request("run.list", {"parent": run_id}).receipt["runs"]
    if shown != total or len(listed) != total or any(child["parent_run_id"] != run_id for child in listed):
        raise RuntimeError(f"copied parent {run_id}: run.get shows {shown} children, run.list --parent "
                           f"{len(listed)}, its wait {total}")
    return f"oldest copied parent {run_id}: run.get and run.list --parent show its {total} children"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 runs from 1,000 starts, fewer calls")
    parser.add_argument("--runs", type=int, default=None, help="runs in the big state (default 100,000)")
    parser.add_argument("--events", type=int, default=0,
                        help="copy on until there are this many events too (default: what the runs bring)")
    parser.add_argument("--real-runs", type=int, default=None,
                        help="runs started through the socket before multiplying (default 3,000; children on top)")
    parser.add_argument("--calls", type=int, default=None, help="timed calls per read operation (default 2,000)")
    parser.add_argument("--starts", type=int, default=None, help="timed run.start calls (default 300)")
    parser.add_argument("--keep", action="store_true", help="keep the state directories (printed)")
    args = parser.parse_args()
    quick = args.quick
    target_runs = args.runs or (20_000 if quick else 100_000)
    real_runs = args.real_runs or (1_000 if quick else 3_000)
    calls = args.calls or (500 if quick else 2_000)
    starts = args.starts or (100 if quick else 300)
    problems: list[str] = []

    root = Path(tempfile.mkdtemp(prefix="pw-growth-", dir="/tmp"))  # short: AF_UNIX paths are limited
    try:
        (root / "trivial3.py").write_text(WORKFLOW_SOURCE)
        (root / "flows.py").write_text(FLOWS_SOURCE)
        specs = Specs(f"{root / 'trivial3.py'}:trivial", f"{root / 'flows.py'}:fanout", f"{root / 'flows.py'}:listener")
        state_dir = root / "state"
        db_path = state_dir / "state.db"
        print(f"growth: {os.cpu_count()} cpus, load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"host with --max-workers {MAX_WORKERS}; state in {state_dir}")

        # 1. The empty state: one run (for run.get), then the figures.
        print("\nmemory (psutil)")
        with running_host(state_dir) as host:
            ready_s = host.wait_ready()
            with Client(socket_path=host.socket_path) as client:
                print_memory("idle host, empty state", host, client)
                run_id = client.start(specs.trivial, {"first": True})["run_id"]
                wait_done(client, run_id)
            empty = measure(host, specs, calls, starts)

            # 2. The real runs of the fill, watching the host's memory as they go.
            before = dbstat(db_path)
            runs_before = _runs_in(db_path)
            rss_seen: list[tuple[int, int]] = []
            fill_s = run_real(host, specs, real_runs,
                              on_progress=lambda n: rss_seen.append((n, memory(host.proc.pid).rss)))
            after = dbstat(db_path)
            added = _runs_in(db_path) - runs_before
            with Client(socket_path=host.socket_path) as client:
                print_memory(f"host after {real_runs:,} more starts", host, client)
            first, last = rss_seen[0], rss_seen[-1]
            print(f"  {'':<34} host RSS {first[1] / MIB:.1f} MiB after {first[0]:,} fill starts, "
                  f"{last[1] / MIB:.1f} MiB after {last[0]:,}: "
                  f"{(last[1] - first[1]) / max(1, last[0] - first[0]):+.0f} bytes per start")
        print(f"  (empty host ready in {ready_s:.2f} s; {real_runs:,} real starts, {added:,} finished runs with "
              f"the children, in {fill_s:.1f} s, {added / fill_s:.0f} runs/s)")
        filled = mix_of(db_path)

        # 3. Multiply them.
        runs, events, fill_sql_s = multiply(db_path, target_runs, args.events)
        t0 = time.perf_counter()
        report = state_report.verify(db_path, time.time())
        verify_s = time.perf_counter() - t0
        codes = sorted({v["code"] for v in report["violations"]})
        if not report["ok"]:
            problems.append(f"state verify: {', '.join(codes)}")
        broken, links_s = check_links(db_path)
        problems.extend(f"links: {n:,} × {name}" for name, n in broken.items())
        t0 = time.perf_counter()
        counted = state_report.state_status(db_path)["tables"]["run_event"]
        status_s = time.perf_counter() - t0
        print(f"  (multiplied to {runs:,} runs / {events:,} events with INSERT … SELECT in {fill_sql_s:.1f} s; "
              f"state verify {'ok' if report['ok'] else 'FAILED ' + ', '.join(codes)} in {verify_s:.1f} s; "
              f"links {'ok' if not broken else 'BROKEN: ' + '; '.join(f'{n:,} × {k}' for k, n in broken.items())} "
              f"({len(LINK_CHECKS)} checks) in {links_s:.1f} s; "
              f"state status (exact row counts, {counted:,} events) in {status_s:.2f} s)")
        big_mix = mix_of(db_path)
        parent_id, parent_total = oldest_parent(db_path)

        # 4. The big state.
        with running_host(state_dir) as host:
            ready_s = host.wait_ready()
            with Client(socket_path=host.socket_path) as client:
                started = print_memory(f"idle host, {runs:,} runs", host, client)
                try:
                    parent_line = check_parent_view(client, parent_id, parent_total)
                except RuntimeError as exc:
                    parent_line = f"FAILED: {exc}"
                    problems.append(str(exc))
            big = measure(host, specs, calls, starts)
            with Client(socket_path=host.socket_path) as client:
                served = print_memory(f"after {len(OPERATIONS) * calls + starts:,} requests", host, client)
            extra = max(200, real_runs // 3)
            run_real(host, specs, extra)
            with Client(socket_path=host.socket_path) as client:
                final = print_memory(f"after {extra:,} more starts", host, client)
            print(f"  {'':<34} host RSS since start: {(served.rss - started.rss) / MIB:+.1f} MiB after the "
                  f"requests, {(final.rss - served.rss) / MIB:+.1f} MiB after the starts "
                  f"({(final.rss - served.rss) / extra:+.0f} bytes per start)")
        print(f"  (host on {runs:,} runs ready in {ready_s:.2f} s; {parent_line})")

        print("\nthe mix")
        print(f"  real runs of the fill (with the empty state's): {filled}")
        print(f"  big state:                                      {big_mix}")
        print_latencies(empty, big, runs, events)
        print(f"\nbytes per run of the mix (dbstat: what {real_runs:,} real starts, {added:,} finished runs, "
              f"added, per run)")
        print_bytes_per_run(before, after, added)
        size = db_path.stat().st_size
        print(f"  big state file: {size / MIB:.1f} MiB for {runs:,} runs = {size / runs:.0f} bytes per run")
        if args.keep:
            print(f"\nkept: {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if problems:
        print("\nPROBLEMS: " + "; ".join(problems))
        sys.exit(1)


def _runs_in(db_path: Path) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM run").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    main()
