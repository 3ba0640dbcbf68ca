"""Every statement the host runs on its hot paths reads large tables through an index.

The statements are not listed by hand: a real in-process host runs real workflows (compute,
action, checkpoint, human decision with a timeout, agent step, notify, a failure) while clients
use the socket (host.status, run.list with every filter, run.get, run.events paging,
interaction.list, ids.match, content.read, watches, run control, answers, restart, state.prune)
and the Prometheus exporter is scraped; the host is then restarted (recovery) and used again.
Every SQL statement any of the host's connections executes is recorded with sqlite3's trace
callback (installed on each connection peewee opens), so a query added later is checked without
anyone listing it here. Each distinct statement then goes through `EXPLAIN QUERY PLAN` against
that database, without ANALYZE (as in production, where nothing runs it): no statistics, so the
plans are the ones SQLite picks for any size.

A plan fails when it walks a large table from one end to the other: a `SCAN` of the table itself
or of one of its indexes. Allowed: scans of tiny tables (`SMALL_TABLES`, bounded by the number of
workers or channel profiles, never by history), of table-valued functions (json_each over a
statement's own parameter), of subquery results, and the few index walks in `ALLOWED_SCANS`, each
with the reason it is bounded. The statements of `state.status`, `state.verify` and
`state.backup` are not exercised: those maintenance commands read everything on purpose.

Run with PIWF_PRINT_PLANS=1 (and -s) to print every statement and its plan.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee as pw
import pytest
from testsupport import sqlite_only, wait_for

from piwf_actors.client.connection import Client
from piwf_actors.store import schema

FLOWS = '''
import time

from piwf_actors.workflows import (
    action, agent, checkpoint, choice, compute, define_workflow, edge, human_decision, notify, shell,
)


def _boom(ctx):
    raise RuntimeError("boom")


three = define_workflow(name="three", start_at="a", nodes={
    "a": compute(run=lambda ctx: {"n": 1}),
    "b": action(run=lambda ctx: {"acted": True}),
    "c": notify(message="three is done"),
    "d": shell(command=["true"]),
}, edges=[edge("a", "b"), edge("b", "c"), edge("c", "d")])
boom = define_workflow(name="boom", start_at="a", nodes={"a": compute(run=_boom)}, edges=[])
gate = define_workflow(name="gate", start_at="ask", nodes={
    "ask": checkpoint(prompt="go?"), "after": compute(run=lambda ctx: {"ok": True}),
}, edges=[edge("ask", "after")])
decide = define_workflow(name="decide", start_at="d", nodes={
    "d": human_decision(audience="operator", choices={"yes": choice(label="Yes"), "no": choice(label="No")},
                        request=lambda ctx: {"title": "Go?"},
                        on_timeout={"after_s": 0.3, "response": {"choice": "no"}}),
}, edges=[])
slow = define_workflow(name="slow", start_at="a", nodes={
    "a": compute(run=lambda ctx: time.sleep(ctx.input["sleep"]) or {"slept": True}),
}, edges=[])
summarize = define_workflow(name="summarize", start_at="s", nodes={
    "s": agent(prompt="Summarize", expected_output={"type": "object", "required": ["summary"],
                                                    "properties": {"summary": {"type": "string"}}}),
}, edges=[])
'''

#: Tables whose size does not grow with the history: one lease row, the counters (a row per
#: status), claims (one per run on a worker now: at most max_workers), a cursor and an adapter
#: fence per channel profile, a lease row per runner host (docs/runners.md).
SMALL_TABLES = frozenset({"host_state", "run_count", "run_claim", "channel_cursor", "channel_adapter",
                          "runner_host", "sqlite_master", "sqlite_schema"})
LARGE_TABLES = frozenset(model._meta.table_name for model in schema.ALL_MODELS) - SMALL_TABLES


@dataclass(frozen=True)
class AllowedScan:
    statement: str  # a regular expression the normalised statement must match (re.search)
    table: str
    index: str  # the index the walk must go through (never the bare table)
    why: str


#: Index walks that are bounded although the plan says SCAN. Each must name the index it walks.
ALLOWED_SCANS: tuple[AllowedScan, ...] = (
    AllowedScan(r"FROM run ORDER BY created_at DESC(, run_id DESC)? LIMIT", "run", "run_created_at",
                "run.list without filters: the newest-first walk stops after LIMIT rows (runs created in the "
                "same instant are put in run id order among themselves: a sort of those ties only)"),
    AllowedScan(r"FROM session_message WHERE acked_at IS NULL ORDER BY created_at", "session_message",
                "session_message_unacked",
                "interaction.list across sessions: a partial index holding only the unacknowledged "
                "messages, which are exactly the rows answered"),
)


# --- recording what the host executes --------------------------------------------------------------


_LITERALS = re.compile(r"""'(?:[^']|'')*'|\bX'[0-9A-Fa-f]*'|(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?\b""")
_IN_LIST = re.compile(r"\(\s*\?(?:\s*,\s*\?)*\s*\)")
_SKIPPED = ("PRAGMA", "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE", "CREATE", "DROP", "ALTER",
            "ANALYZE", "VACUUM", "--")


def normalise(sql: str) -> str:
    """The statement's shape: literals as `?`, `IN (?, ?, …)` as `IN (?)`, whitespace collapsed."""
    shape = _LITERALS.sub("?", sql)
    shape = _IN_LIST.sub("(?)", shape)
    return " ".join(shape.split())


class StatementLog:
    """A trace callback: the first expanded text of each distinct statement shape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.statements: dict[str, str] = {}

    def __call__(self, sql: str) -> None:
        text = sql.lstrip()
        if text.upper().startswith(_SKIPPED):
            return
        shape = normalise(text)
        with self._lock:
            self.statements.setdefault(shape, text)


@pytest.fixture
def created(state_dir: Path) -> Path:
    """The state database, created (and migrated) before anything is traced: migrations run once
    per file, on no hot path, and count what they find."""
    from piwf_actors.store.database import open_store

    path = state_dir / "state.db"
    open_store(path).close()
    return path


@pytest.fixture
def statement_log(created: Path, monkeypatch: pytest.MonkeyPatch) -> StatementLog:
    """Trace every connection peewee opens in this process from now on (all of the host's)."""
    log = StatementLog()
    original = pw.SqliteDatabase._add_conn_hooks

    def add_hooks(self: pw.SqliteDatabase, conn: sqlite3.Connection) -> None:
        original(self, conn)
        conn.set_trace_callback(log)

    monkeypatch.setattr(pw.SqliteDatabase, "_add_conn_hooks", add_hooks)
    return log


# --- the plans -------------------------------------------------------------------------------------


_FROM = re.compile(r"\b(?:FROM|JOIN|UPDATE|INTO)\s+(\w+)(?:\s+(?:AS\s+)?(?!WHERE|ON|JOIN|LEFT|INNER|CROSS|"
                   r"ORDER|GROUP|LIMIT|SET|VALUES|SELECT|USING|NATURAL|UNION|EXCEPT|INTERSECT|HAVING|WINDOW|"
                   r"RETURNING|DEFAULT|AND|OR|NOT)(\w+))?", re.IGNORECASE)
_SCAN = re.compile(r"^SCAN (\S+)(?: USING (?:COVERING )?INDEX (\S+))?")


def aliases(sql: str) -> dict[str, set[str]]:
    """alias (or table name) → the tables it may stand for in `sql`."""
    found: dict[str, set[str]] = {}
    for table, alias in _FROM.findall(sql):
        found.setdefault(table, set()).add(table)
        if alias:
            found.setdefault(alias, set()).add(table)
    return found


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    """The plan's lines, indented by depth."""
    rows = conn.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _unused, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append("  " * depth[node] + detail)
    return lines


def full_scans(sql: str, lines: list[str]) -> list[str]:
    """The plan lines that walk a large table end to end and are not allowed."""
    shape = normalise(sql)
    names = aliases(sql)
    bad = []
    for line in lines:
        match = _SCAN.match(line.strip())
        if match is None:
            continue
        name, index = match.group(1), match.group(2)
        tables = names.get(name, {name}) & LARGE_TABLES
        if not tables:
            continue  # a tiny table, json_each, a subquery's or CTE's rows, a constant row
        allowed = [a for a in ALLOWED_SCANS
                   if a.table in tables and a.index == index and re.search(a.statement, shape)]
        if not allowed:
            bad.append(line.strip())
    return bad


# --- driving a real host ---------------------------------------------------------------------------


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _scrape(host: Any) -> None:
    with _NO_PROXY.open(host._parts.board.snapshot("metrics")["url"], timeout=10) as response:
        assert response.status == 200


def _request(client: Client, operation: str, payload: dict[str, Any] | None = None, **envelope: Any) -> Any:
    answer = client.request(operation, payload or {}, **envelope)
    assert answer.ok, (operation, answer.outcome, answer.error)
    return answer.receipt


def _wait_status(client: Client, run_id: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    return wait_for(lambda: (view := client.get(run_id))["status"] in statuses and view, 30,
                    lambda: f"run {run_id} to reach {statuses}: {client.get(run_id)['status']}")


def _pending(client: Client, kind: str, run_id: str) -> dict[str, Any]:
    def find() -> dict[str, Any] | None:
        receipt = _request(client, "interaction.list")
        return next((r for r in receipt["requests"] if r["kind"] == kind and r["run_id"] == run_id), None)

    return wait_for(find, 30, f"a pending {kind} of run {run_id}")


def _exercise(host: Any, flows: str) -> None:
    """Every client operation a host serves (maintenance reads aside), on runs of every kind."""
    finished = ("done", "failed", "cancelled")
    with Client(socket_path=str(host.paths.socket)) as client, \
            Client(socket_path=str(host.paths.socket)) as watcher:
        watches = [watcher.request("watch", {"subscription_id": f"w-{topic}", "topic": topic})
                   for topic in ("runs", "host", "interactions")]
        assert all(w.ok for w in watches)
        started = {name: client.start(f"{flows}:{name}", {"i": n}, session_id="sess-1")["run_id"]
                   for n, name in enumerate(("three", "boom", "gate", "decide", "summarize"))}
        extra = [client.start(f"{flows}:three", {"i": 10 + n})["run_id"] for n in range(5)]
        assert watcher.request("watch", {"subscription_id": "w-run", "topic": "run",
                                         "run_id": started["three"]}).ok
        for run_id in [started["three"], started["boom"], *extra]:
            _wait_status(client, run_id, finished)
        _scrape(host)

        gate = _pending(client, "checkpoint", started["gate"])
        _request(client, "checkpoint.answer", {"request_id": gate["request_id"], "submission_id": "s-gate",
                                               "input": {"go": True}})
        agent = _pending(client, "agent", started["summarize"])
        _request(client, "interaction.submit", {"request_id": agent["request_id"], "submission_id": "s-agent",
                                                "session_id": "sess-1", "value": {"summary": "fine"}})
        _wait_status(client, started["decide"], finished)  # answered by its timeout
        for run_id in started.values():
            _wait_status(client, run_id, finished)
        messages = _request(client, "interaction.list", {"session_id": "sess-1"})["messages"]
        if messages:
            _request(client, "interaction.ack", {"message_id": messages[0]["message_id"]})

        _request(client, "host.status")
        _request(client, "run.list")
        _request(client, "run.list", {"status": "done", "limit": 5})
        _request(client, "run.list", {"workflow": "three"})
        _request(client, "run.list", {"since": time.time() - 3600})
        _request(client, "run.list", {"status": "failed", "workflow": "boom", "since": time.time() - 3600})
        view = _request(client, "run.get", run_id=started["three"])
        page = _request(client, "run.events", {"limit": 3}, run_id=started["three"])
        _request(client, "run.events", {"after": page["next_after"], "limit": 3}, run_id=started["three"])
        _request(client, "ids.match", {"kind": "run", "prefix": started["three"][:8]})
        _request(client, "ids.match", {"kind": "request", "prefix": gate["request_id"][:6]})
        client.request("content.read", {"digest": view["definition_digest"]})  # notFound or not: it ran

        # Run control: pause and cancel a queued run, resume a paused one, restart a failed one.
        paused = client.start(f"{flows}:gate", {"i": 99})["run_id"]
        client.request("run.pause", run_id=paused)
        client.request("run.resume", run_id=paused)
        _pending(client, "checkpoint", paused)
        client.request("run.cancel", run_id=paused)
        failed = client.get(started["boom"])
        restarted = _request(client, "run.restart", run_id=started["boom"],
                             expected_revision=failed["revision"])["run_id"]
        _wait_status(client, restarted, finished)
        _wait_status(client, paused, finished)
        _scrape(host)
        _request(client, "state.prune", {"before": time.time() + 60})  # the dry run's plan
        _request(client, "state.prune", {"before": time.time() - 3600, "apply": True})  # nothing that old
        _request(client, "state.prune", {"before": time.time() + 60, "apply": True})


@pytest.fixture
def flows(state_dir: Path) -> str:
    path = state_dir / "flows.py"
    path.write_text(FLOWS)
    return str(path)


@pytest.fixture
def exercised(statement_log: StatementLog, hosts: Any, state_dir: Path, flows: str) -> Iterator[Path]:
    """A host run through every operation, restarted (recovery), run through them again; yields the db."""
    host = hosts(state_dir, max_workers=2, metrics_address="127.0.0.1:0")
    _exercise(host, flows)
    with Client(socket_path=str(host.paths.socket)) as client:  # left behind for the next host to recover
        client.start(f"{flows}:gate", {"i": "left"})
        slow = client.start(f"{flows}:slow", {"sleep": 30})["run_id"]
        _wait_status(client, slow, ("running",))
        client.start(f"{flows}:three", {"i": "left"})
    host.stop("test: restart")  # interrupts `slow`: the next host recovers its claim and worker
    host = hosts(state_dir, max_workers=2, metrics_address="127.0.0.1:0")
    _exercise(host, flows)
    host.stop("test: done")
    yield state_dir / "state.db"


@sqlite_only("it traces the host's SQLite connections and reads SQLite's EXPLAIN QUERY PLAN; "
             "PostgreSQL's plans depend on its statistics and are not checked here")
def test_no_hot_path_statement_scans_a_large_table(exercised: Path, statement_log: StatementLog) -> None:
    statements = dict(statement_log.statements)
    conn = sqlite3.connect(f"file:{exercised}?mode=ro", uri=True)
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name LIKE 'sqlite_stat%'").fetchone()[0] == 0
        report, failures = [], []
        for shape, sql in sorted(statements.items()):
            lines = plan(conn, sql)
            bad = full_scans(sql, lines)
            report.append(f"{'BAD ' if bad else ''}{shape}\n    " + "\n    ".join(lines))
            if bad:
                failures.append(f"{shape}\n    scans: {'; '.join(bad)}\n    plan: " + "\n          ".join(lines))
    finally:
        conn.close()
    if os.environ.get("PIWF_PRINT_PLANS"):
        print(f"\n{len(statements)} statements\n" + "\n".join(report))
    # The exercise reached the paths it is about (a guard against recording nothing).
    shapes = "\n".join(statements)
    for expected in ("FROM run_count", "ORDER BY queue_class, priority DESC, queued_at", "coalesce(max(seq), ?) FROM run_event",
                     "FROM run_event WHERE run_id = ? AND seq > ?", "FROM interactive_request r WHERE",
                     "DELETE FROM run_event WHERE run_id IN", "FROM node_attempt WHERE run_id = ?"):
        assert expected in shapes, f"no statement with {expected!r} was recorded"
    assert not failures, f"{len(failures)} statements scan a large table:\n" + "\n".join(failures)


def test_the_scan_check_catches_an_unindexed_query(state_dir: Path) -> None:
    """The check itself: a filter on an unindexed column is a full scan; a key lookup is not."""
    from piwf_actors.store.database import open_store

    open_store(state_dir / "state.db").close()
    conn = sqlite3.connect(state_dir / "state.db")
    try:
        scan = "SELECT run_id FROM run WHERE workflow_attr = 'x'"
        assert full_scans(scan, plan(conn, scan)) == ["SCAN run"]
        covering = "SELECT count(*) FROM run r WHERE r.status != 'done'"
        assert full_scans(covering, plan(conn, covering))[0].startswith("SCAN r USING COVERING INDEX")
        ordered = "SELECT run_id FROM run ORDER BY created_at DESC LIMIT 5"
        assert full_scans(ordered, plan(conn, ordered)) == []  # ALLOWED_SCANS: the newest-first walk
        filtered = "SELECT r.run_id FROM run r WHERE r.error_code = 'x' ORDER BY r.created_at DESC LIMIT 5"
        assert full_scans(filtered, plan(conn, filtered)) == ["SCAN r USING INDEX run_created_at"]
        lookup = f"SELECT status FROM run WHERE run_id = '{uuid.uuid4().hex}'"
        assert full_scans(lookup, plan(conn, lookup)) == []
        tiny = "SELECT status, n FROM run_count"
        assert full_scans(tiny, plan(conn, tiny)) == []
    finally:
        conn.close()


def test_every_blob_reference_column_has_a_digest_prefix_index(created: Path) -> None:
    """state.prune looks each reference column up by digest prefix (store/prune_plan.py); a column
    added to BLOB_REFERENCES without its index would make prune read the whole table again."""
    from piwf_actors.store.prune_plan import BLOB_REFERENCES

    conn = sqlite3.connect(created)
    try:
        indexed = {(table, sql) for table, sql in conn.execute(
            "SELECT tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE '%substr(%'")}
    finally:
        conn.close()
    for table, _key, column in BLOB_REFERENCES:
        expected = f'substr("{column}", 1, {schema.BLOB_PREFIX_CHARS})'
        assert any(t == table and expected in sql for t, sql in indexed), f"{table}.{column} has no prefix index"
