"""The web console's pages on a state of 100,000 runs: each page's time against the 200 ms target.

The state (built once, then reused: `--state DIR`, default /tmp/piwf-console-bench-<runs>; `--rebuild`
builds it again). First real runs go through a real host (`bin/piwf-host --project P`, started over
the Unix socket and run by its workers) in a mix that gives every page something to show:

  finished   trivial 3-node runs; a 40-node chain ("many nodes": the run page's picture and table);
             shell steps (their effects, applied, fill the effect table); fan-out parents
             (`map_workflow`, 4 children each) and one with 200 children
  parked     human decisions with a deadline (the inbox), and non-idempotent shell steps whose
             worker the bench SIGKILLs while the step runs (ambiguous effects, the effects page)
  schedules  three schedules in the project (the schedules page)
  resources  100 resources of a manager in the project, each reconciled once (the resources page)

Then the host is stopped and the runs are multiplied with SQL on the stopped host's file
(`INSERT … SELECT`, as bench/growth.py does, whose `multiply` copies the finished families with
fresh, time-ordered ids and every link remapped): the finished runs up to --runs minus the parked
ones, and the parked runs (their interactive requests and effects with fresh ids) up to
--decisions runs waiting on a decision and --ambiguous runs parked on an ambiguous effect.

Then a host starts on it with `--http 127.0.0.1:PORT`, an operator token is made through the socket,
and every console page and the main API list endpoints are fetched --rounds times each (after one
untimed warm-up fetch) with an httpx client over keep-alive; the bench prints p50 and max per page,
the host's CPU per fetch (all its threads, psutil: the figure a busy machine does not blur), and
whether the p50 meets the 200 ms target. A page that does not answer 200 is a problem (exit 1).

Run: .venv/bin/python bench/console_pages.py [--runs 100000] [--decisions 300] [--ambiguous 100]
     [--rounds 20] [--state DIR] [--rebuild] [--profile DIR] [--only TEXT]
`--profile DIR` records the host with py-spy (`--threads`) while it serves each page --rounds (at least
50) more times, and prints the top of each profile (bench/profile_top.py); `--only TEXT` times only
the pages whose label holds TEXT.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import psutil  # noqa: E402
from common import WORKFLOW_SOURCE, closing_line, pct  # noqa: E402  (bench/ is the script's directory)
from growth import COPIED, _columns, _mapped, multiply  # noqa: E402
from profile_top import read_stacks, summarise  # noqa: E402
from throughput import HostProcess, py_spy  # noqa: E402

from piwf_actors.client import Client  # noqa: E402
from piwf_actors.http.auth import new_token, token_digest  # noqa: E402
from piwf_actors.ids import new_id  # noqa: E402

TARGET_MS = 200.0
#: Written last into a finished state directory: a directory without it is built again.
READY_MARK = "console-bench-ready"

FLOWS_SOURCE = '''\
"""The console bench's workflows and schedules."""

import shlex

from piwf_actors.workflows import (
    choice, compute, define_schedule, define_workflow, edge, human_decision, map_workflow, shell, text_input,
)

item = define_workflow(name="item", start_at="a", edges=[], nodes={"a": compute(run=lambda ctx: {"x": ctx.input})})
fanout = define_workflow(
    name="fanout", start_at="plan",
    nodes={
        "plan": compute(run=lambda ctx: {"items": list(range(ctx.input["n"]))}),
        "each": map_workflow(item, items=lambda ctx: ctx.outputs["plan"]["items"]),
        "sum": compute(run=lambda ctx: {"total": sum(o["x"] for o in ctx.outputs["each"])}),
    },
    edges=[edge("plan", "each"), edge("each", "sum")],
)
CHAIN = [f"n{i:02d}" for i in range(40)]
chain = define_workflow(
    name="chain", start_at=CHAIN[0],
    nodes={name: compute(run=lambda ctx: {"node": ctx.node_id, "seen": len(ctx.outputs)}) for name in CHAIN},
    edges=[edge(a, b) for a, b in zip(CHAIN, CHAIN[1:])],
)
approve = define_workflow(
    name="approve", start_at="build",
    nodes={
        "build": compute(run=lambda ctx: {"version": ctx.input["version"]}),
        "decide": human_decision(
            audience="operator",
            choices={"ship": choice(label="Ship it"),
                     "fix": choice(label="Needs changes",
                                   input=text_input(name="instructions", prompt="What should change?"))},
            request=lambda ctx: {"title": f"Ship {ctx.input['version']}?", "summary": "Tests passed."},
            on_timeout={"after_s": 30 * 86400, "response": {"choice": "ship"}},
        ),
    },
    edges=[edge("build", "decide")],
)


def _hang(ctx):
    marker = shlex.quote(ctx.input["marker"])
    return f"echo started > {marker}; sleep 120"


report = define_workflow(
    name="report", start_at="collect",
    nodes={"collect": shell(command=["echo", "collected"]), "sum": compute(run=lambda ctx: {"ok": True})},
    edges=[edge("collect", "sum")],
)
deploy = define_workflow(
    name="deploy", start_at="push",
    nodes={"push": shell(command=_hang, shell=True), "after": compute(run=lambda ctx: {"ok": True})},
    edges=[edge("push", "after")],
)
nightly = define_schedule(name="nightly", workflow=chain, cron="0 3 * * *", catch_up="skip",
                          input=lambda fire_time: {"day": fire_time.date().isoformat()})
hourly = define_schedule(name="hourly", workflow=fanout, cron="0 * * * *", catch_up="skip", input={"n": 2})
weekly = define_schedule(name="weekly", workflow=chain, cron="0 4 * * 1", catch_up="skip", input={})
'''


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait(what: str, check, timeout: float = 120.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not within {timeout:g} s")


# --- the real runs -----------------------------------------------------------------------------------


MANAGER_SOURCE = '''\
from piwf_actors.workflows import define_resource_manager


def reconcile(ctx):
    return {"result": "done", "status_patch": {"phase": "ready", "title": ctx.spec.get("title")}}


sites = define_resource_manager("sites", reconcile=reconcile, timeout_s=30)
'''


def seed(root: Path, state: Path, project: Path) -> None:
    """The mix of real runs, through a real host (stopped at the end)."""
    flows = project / ".piwf" / "workflows" / "console_bench.py"
    host = HostProcess(state, 4, "NORMAL", extra=("--project", str(project)))
    try:
        host.wait_ready()
        with Client(socket_path=host.socket_path, timeout=60) as client:
            def start(attr: str, value: object) -> str:
                return client.start(f"{flows}:{attr}", value)["run_id"]

            def settled(run_ids: list[str], statuses: tuple[str, ...]) -> bool:
                return all(client.request("run.get", {}, run_id=r).receipt["status"] in statuses for r in run_ids)

            manager = project / ".piwf" / "resource-managers" / "sites.py"
            digest = hashlib.sha256(manager.read_bytes()).hexdigest()
            for i in range(100):
                applied = client.request("resource.apply", {"manager": "sites", "key": f"site-{i:03d}",
                                                            "spec": {"title": f"site {i}"},
                                                            "project_path": str(project), "digest": digest})
                assert applied.ok, applied
            finished = [start("trivial", {"i": i}) for i in range(200)]
            finished += [start("chain", {"i": i}) for i in range(20)]
            finished += [start("fanout", {"n": 4}) for _ in range(20)]
            finished += [start("report", {"i": i}) for i in range(40)]
            finished.append(start("fanout", {"n": 200}))
            _wait("the finished runs", lambda: settled(finished, ("done", "failed")), 600)
            _wait("the resources' reconciles", lambda: all(
                r.get("last_result") == "done"
                for r in client.request("resource.list", {"limit": 200}).receipt["resources"]), 120)
            decisions = [start("approve", {"version": f"1.{i}"}) for i in range(20)]
            _wait("the decisions", lambda: settled(decisions, ("parked",)))
            for batch in range(2):
                markers = [root / f"marker-{batch}-{i}" for i in range(4)]
                runs = [start("deploy", {"marker": str(marker)}) for marker in markers]
                _wait("the shell steps", lambda markers=markers: all(m.exists() for m in markers))
                active = client.status()["workers"]["active"]
                for worker in active:
                    if worker.get("run_id") in runs and worker.get("pid"):
                        os.kill(int(worker["pid"]), signal.SIGKILL)
                _wait("the ambiguous effects", lambda runs=runs: settled(runs, ("parked",)))
    finally:
        host.stop()


# --- multiplying the parked runs -----------------------------------------------------------------------

#: The tables holding rows of a parked run of the mix, and how their keys get fresh values (the other
#: columns are copied; times stay: a copy waits as its original does). `m` is the row's run in m_run.
PARKED_COPIED: dict[str, dict[str, str]] = {
    "run": {"run_id": "m.new"},
    "run_event": {"run_id": "m.new", "attempt_id": "coalesce((SELECT new FROM m_att WHERE old = t.attempt_id), "
                                                   "t.attempt_id)"},
    "node_attempt": {"attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)", "run_id": "m.new"},
    "interactive_request": {"request_id": "(SELECT new FROM m_req WHERE old = t.request_id)", "run_id": "m.new",
                            "attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)"},
    "effect": {"effect_id": "(SELECT new FROM m_req WHERE old = t.effect_id)", "run_id": "m.new",
               "attempt_id": "(SELECT new FROM m_att WHERE old = t.attempt_id)"},
    "run_worker": {"worker_id": "(SELECT new FROM m_req WHERE old = t.worker_id)", "run_id": "m.new",
                   "launch_id": "(SELECT new FROM m_req WHERE old = t.launch_id)"},
    "worker_message": {"launch_id": "(SELECT new FROM m_req WHERE old = t.launch_id)", "run_id": "m.new"},
    "host_command": {"run_id": "m.new", "idempotency_key": "t.idempotency_key || :suffix",
                     "request_id": "t.request_id || :suffix"},
    "child_process": {"pid": "t.pid + :round * 1000000", "run_id": "m.new"},
}


def multiply_parked(db_path: Path, park_reason: str, wanted: int) -> int:
    """Copy the runs parked for `park_reason` until there are `wanted` of them; their number."""
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")
        base = [r for (r,) in conn.execute("SELECT run_id FROM run WHERE status = 'parked' AND park_reason = ?",
                                           (park_reason,))]
        marks = ",".join("?" * len(base))
        tables = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table not in PARKED_COPIED and "run_id" in _columns(conn, table) and conn.execute(
                    f"SELECT count(*) FROM {table} WHERE run_id IN ({marks})", base).fetchone()[0]:
                raise RuntimeError(f"{table} holds rows of the parked runs; the bench would not copy them")
        attempts = conn.execute(f"SELECT attempt_id, run_id FROM node_attempt WHERE run_id IN ({marks})",
                                base).fetchall()
        others = [k for (k,) in conn.execute(
            f"SELECT request_id FROM interactive_request WHERE run_id IN ({marks}) UNION "
            f"SELECT effect_id FROM effect WHERE run_id IN ({marks}) UNION "
            f"SELECT worker_id FROM run_worker WHERE run_id IN ({marks}) UNION "
            f"SELECT launch_id FROM run_worker WHERE run_id IN ({marks}) UNION "
            f"SELECT launch_id FROM worker_message WHERE run_id IN ({marks})", base * 5)]
        for table in ("m_run", "m_att", "m_req"):
            conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table} (old TEXT PRIMARY KEY, new TEXT)")
        statements = []
        for table, overrides in PARKED_COPIED.items():
            columns = _columns(conn, table)
            if not columns:
                continue
            values = [overrides.get(column, f"t.{column}") for column in columns]
            statements.append(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} "
                              f"FROM {table} t JOIN m_run m ON m.old = t.run_id")
        count, round_no = len(base), 0
        while count < wanted:
            round_no += 1
            chosen = base[:wanted - count]
            conn.execute("BEGIN")
            for table in ("m_run", "m_att", "m_req"):
                conn.execute(f"DELETE FROM {table}")
            conn.executemany("INSERT INTO m_run VALUES (?, ?)", [(r, new_id("run")) for r in chosen])
            conn.executemany("INSERT INTO m_att VALUES (?, ?)",
                             [(a, new_id("att")) for a, r in attempts if r in set(chosen)])
            conn.executemany("INSERT INTO m_req VALUES (?, ?)", [(k, f"{k.split('_')[0]}_{uuid.uuid4().hex[:26]}")
                                                                 for k in others])
            for statement in statements:
                conn.execute(statement, {"suffix": f"-parked{round_no}", "round": round_no})
            conn.execute("COMMIT")
            count += len(chosen)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return count
    finally:
        conn.close()


def build(state_root: Path, runs: int, decisions: int, ambiguous: int) -> None:
    shutil.rmtree(state_root, ignore_errors=True)
    project = state_root / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "console_bench.py").write_text(FLOWS_SOURCE + "\n" + WORKFLOW_SOURCE)
    (project / ".piwf" / "resource-managers").mkdir()
    (project / ".piwf" / "resource-managers" / "sites.py").write_text(MANAGER_SOURCE)
    state = state_root / "state"
    began = time.perf_counter()
    seed(state_root, state, project)
    seeded = time.perf_counter() - began
    db_path = state / "state.db"
    parked = multiply_parked(db_path, "waiting", decisions) + multiply_parked(db_path, "ambiguous_effect", ambiguous)
    # The finished shell steps' effects (applied) are copied with their runs, under fresh ids.
    COPIED.setdefault("effect", {"effect_id": "t.effect_id || :suffix", "run_id": "m.new",
                                 "attempt_id": _mapped("m_att", "t.attempt_id")})
    COPIED.setdefault("child_process", {"run_id": "m.new", "create_time": "t.create_time - :shift"})
    total, events, multiplied = multiply(db_path, runs - parked, 0)
    (state_root / READY_MARK).write_text(f"{total + parked}\n")
    print(f"built {state_root}: real runs in {seeded:.0f} s, then {total:,} finished runs ({events:,} events) and "
          f"{parked:,} parked ones by INSERT … SELECT in {multiplied:.0f} s")


# --- timing the pages ------------------------------------------------------------------------------------


def pages(client: httpx.Client, db_path: Path) -> list[tuple[str, str]]:
    """(label, path) of every page the bench times, with ids read from the state."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        def one(sql: str) -> str:
            row = conn.execute(sql).fetchone()
            if row is None:
                raise RuntimeError(f"the state has no row for: {sql}")
            return str(row[0])

        chain = one("SELECT run_id FROM run WHERE workflow = 'chain' ORDER BY created_at DESC LIMIT 1")
        parent = one("SELECT parent_run_id FROM run WHERE parent_node_id IS NOT NULL GROUP BY parent_run_id "
                     "ORDER BY count(*) DESC LIMIT 1")
        decided = one("SELECT run_id FROM run WHERE park_reason = 'waiting' ORDER BY created_at LIMIT 1")
        oldest = one("SELECT run_id FROM run ORDER BY created_at LIMIT 1")
        middle = conn.execute("SELECT created_at, run_id FROM run ORDER BY created_at LIMIT 1 OFFSET 50000").fetchone()
        old_cursor = f"{middle[0]!r}/{middle[1]}"
    finally:
        conn.close()
    prefix = oldest[:12]
    return [
        ("console: runs", "/console/runs"),
        ("console: runs ?workflow=chain", "/console/runs?workflow=chain"),
        ("console: runs ?status=failed (none)", "/console/runs?status=failed"),
        ("console: runs ?workflow=deploy (rare)", "/console/runs?workflow=deploy"),
        ("console: runs ?workflow=nosuch (none)", "/console/runs?workflow=nosuch"),
        ("console: runs, an old page (cursor)", f"/console/runs?cursor={urllib.parse.quote(old_cursor)}"),
        ("console: runs ?status=parked", "/console/runs?status=parked"),
        ("console: runs ?parent=(200 children)", f"/console/runs?parent={parent}"),
        (f"console: runs ?q={prefix} (id prefix, many)", f"/console/runs?q={prefix}"),
        ("console: runs ?q=(one id: redirects)", f"/console/runs?q={oldest[:20]}"),
        ("console: run (40 nodes)", f"/console/runs/{chain}"),
        ("console: run (200 children)", f"/console/runs/{parent}"),
        ("console: run (waiting on a decision)", f"/console/runs/{decided}"),
        ("console: inbox", "/console/inbox"),
        ("console: effects", "/console/effects"),
        ("console: schedules", "/console/schedules"),
        ("console: resources", "/console/resources"),
        ("console: host", "/console/host"),
        ("api: GET /api/v1/runs", "/api/v1/runs"),
        ("api: GET /api/v1/runs?workflow=chain", "/api/v1/runs?workflow=chain"),
        ("api: GET /api/v1/runs?parent=…", f"/api/v1/runs?parent={parent}"),
        ("api: GET /api/v1/interactions", "/api/v1/interactions"),
        ("api: GET /api/v1/effects", "/api/v1/effects"),
        ("api: GET /api/v1/schedules", "/api/v1/schedules"),
        ("api: GET /api/v1/resources", "/api/v1/resources"),
        ("api: GET /api/v1/host", "/api/v1/host"),
        ("api: GET /api/v1/state?counts=false", "/api/v1/state?counts=false"),
        ("api: GET /api/v1/state (exact counts)", "/api/v1/state"),
    ]


def profile(client: httpx.Client, pid: int, label: str, path: str, fetches: int, directory: Path) -> str:
    """py-spy's record of the host (every thread, with native frames off) while it serves `path`
    `fetches` times; the top of its summary."""
    spy = py_spy()
    if spy is None:
        return "  (no py-spy: `make bench` installs it)"
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / (re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") + ".txt")
    recorder = subprocess.Popen([spy, "record", "--pid", str(pid), "--threads", "--rate", "500", "--format", "raw",
                                 "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # py-spy attaches; a window, not a synchronisation
        for _ in range(fetches):
            client.get(path)
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(30)
    if not out.exists():
        return f"  (py-spy wrote no profile for {label})"
    return "\n".join("  " + line for line in summarise(read_stacks(out), 10, by_thread=True).splitlines())


def measure(base: str, token: str, db_path: Path, rounds: int, host_pid: int, profile_dir: Path | None = None,
            only: str | None = None) -> list[str]:
    """Each page's wall time (p50, max) and the host process's CPU per fetch (all its threads: what the
    page costs the host, whatever else the machine is doing)."""
    problems = []
    host_cpu = psutil.Process(host_pid)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=120) as client:
        listed = [(label, path) for label, path in pages(client, db_path) if only is None or only in label]
        width = max(len(label) for label, _ in listed)
        print(f"\n{'page':<{width}}  {'p50 ms':>8}  {'max ms':>8}  {'cpu ms':>7}  {'bytes':>9}  "
              f"target {TARGET_MS:.0f} ms (p50)")
        for label, path in listed:
            first = client.get(path)
            if first.status_code not in (200, 303):
                problems.append(f"{label}: {first.status_code} {first.text[:200]}")
                continue
            samples = []
            cpu_before = host_cpu.cpu_times()
            for _ in range(rounds):
                t0 = time.perf_counter()
                answer = client.get(path)
                samples.append((time.perf_counter() - t0) * 1000)
                if answer.status_code != first.status_code:
                    problems.append(f"{label}: {answer.status_code}")
            cpu_after = host_cpu.cpu_times()
            cpu_ms = ((cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)) * 1000 / rounds
            p50 = pct(samples, 0.5)
            print(f"{label:<{width}}  {p50:8.1f}  {max(samples):8.1f}  {cpu_ms:7.1f}  {len(first.content):9,}  "
                  f"{'met' if p50 < TARGET_MS else 'NOT met'}", flush=True)
            if profile_dir is not None:
                print(profile(client, host_pid, label, path, max(rounds, 50), profile_dir), flush=True)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=300, help="runs waiting on a decision")
    parser.add_argument("--ambiguous", type=int, default=100, help="runs parked on an ambiguous effect")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--state", type=Path, default=None)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--profile", type=Path, default=None,
                        help="record the host with py-spy while it serves each page again (raw profiles in DIR)")
    parser.add_argument("--only", default=None, help="time only the pages whose label contains this text")
    args = parser.parse_args()
    began = time.monotonic()
    state_root = args.state or Path(f"/tmp/piwf-console-bench-{args.runs}")
    if args.rebuild or not (state_root / READY_MARK).exists():
        build(state_root, args.runs, args.decisions, args.ambiguous)
    else:
        print(f"reusing {state_root} ({(state_root / READY_MARK).read_text().strip()} runs; --rebuild builds it again)")
    state = state_root / "state"
    port = _free_port()
    host = HostProcess(state, 2, "NORMAL", extra=("--http", f"127.0.0.1:{port}",
                                                  "--project", str(state_root / "project")))
    try:
        host.wait_ready(120)
        token = new_token()
        with Client(socket_path=host.socket_path) as client:
            made = client.request("http_token.add", {"name": f"console-bench-{uuid.uuid4().hex[:8]}", "role": "operator",
                                                     "token_sha256": token_digest(token)})
            assert made.outcome == "accepted", made
            counts = client.status().get("runs") or {}
        print(f"host pid {host.pid} on {sum(counts.values()):,} runs ({', '.join(f'{k} {v:,}' for k, v in counts.items())})")
        problems = measure(f"http://127.0.0.1:{port}", token, state / "state.db", args.rounds, host.pid,
                           args.profile, args.only)
    finally:
        host.stop()
    print(closing_line(began))
    if problems:
        print("PROBLEMS: " + "; ".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
