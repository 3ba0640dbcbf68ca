"""Workflows for the pipelined-crash tests (test_pipelined_crashes.py).

Chains of pure compute nodes, whose results the worker pipelines, around one
non-idempotent action. Every node records each execution in the oracle file
(`ctx.input["oracle"]`, lines `"<node_id> <run_id>"`, see recovery_flows.py)
when it starts.

Every output is `{"node", "link"}` where `link` is a digest of the previous
node's link and this node's id: an output computed from a stale or missing
predecessor differs from a clean run's (`clean_outputs`).

Input keys the nodes understand:
- `oracle`: the oracle file (required);
- `db`: the state database's URL (`sqlite:///…` or `postgresql://…`), which
  the action opens read-only to see which nodes of its run are committed (a
  test's probe: workers never open the database themselves);
- `seen`: the file where the action appends `"<run_id> <node ids>"`, the
  nodes with a succeeded attempt in its run when it was about to act;
- `effects`: the file where the action appends `"<run_id>"` when it acts
  (its side effect);
- `crash_at`: a node id: that node SIGKILLs its own worker on its first
  execution per the oracle, right after recording itself; for the action,
  `"act"` dies before it acts and `"act+"` right after it acted;
- `sleep`: seconds a pure node sleeps after recording itself (default 0);
- `act_sleep`: seconds the action sleeps between recording itself and acting
  (default 0), so that a host kill can land while it is in flight.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import time

from piwf_actors.workflows import action, compute, define_workflow, edge

#: Six pure nodes, the action, two pure nodes (the worker SIGKILL test).
CHAIN = ["c1", "c2", "c3", "c4", "c5", "c6", "act", "c7", "c8"]
#: Ten pure nodes, the action, ten pure nodes (the host SIGKILL test).
LONG = [*(f"l{i:02d}" for i in range(1, 11)), "act", *(f"l{i:02d}" for i in range(11, 21))]
#: Only pure nodes (the pause test).
PURE = [f"p{i:02d}" for i in range(1, 41)]


def record(ctx) -> None:
    """Append this execution to the oracle in one write (atomic for O_APPEND), as recovery_flows.py
    does (not imported from there: the tests import this module too, where it is no sibling)."""
    _append(ctx.input["oracle"], f"{ctx.node_id} {ctx.run_id}")


def executions(ctx) -> int:
    """How often this node started, in any run, per the oracle."""
    with open(ctx.input["oracle"]) as handle:
        return sum(1 for line in handle.read().splitlines() if line.split(" ")[0] == ctx.node_id)


def _link(previous: str, node_id: str) -> str:
    return hashlib.sha256(f"{previous}/{node_id}".encode()).hexdigest()[:16]


def clean_outputs(order: list[str]) -> dict[str, dict[str, str]]:
    """The node outputs of a run of the chain `order` that nothing disturbed."""
    outputs, previous = {}, "start"
    for node_id in order:
        previous = _link(previous, node_id)
        outputs[node_id] = {"node": node_id, "link": previous}
    return outputs


def _output(ctx, order: list[str]) -> dict[str, str]:
    index = order.index(ctx.node_id)
    previous = ctx.outputs[order[index - 1]]["link"] if index else "start"
    return {"node": ctx.node_id, "link": _link(previous, ctx.node_id)}


def _crash_if(ctx, where: str) -> None:
    """SIGKILL this worker when `where` is the input's crash point and this is the node's first
    execution (it recorded itself already, so the oracle holds exactly one line of it)."""
    if ctx.input.get("crash_at") == where and executions(ctx) == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def committed_nodes(database_url: str, run_id: str) -> list[str]:
    """The node ids of `run_id` with a succeeded attempt, read through a read-only connection of
    its own to `database_url` (`sqlite:///abs/path` or `postgresql://…`, as
    `testsupport.state_database_url` gives it: a worker has no test session to ask)."""
    sql = "SELECT DISTINCT node_id FROM node_attempt WHERE run_id = ? AND status = 'succeeded'"
    if database_url.startswith(("postgresql://", "postgres://")):
        import psycopg

        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.read_only = True
            found = conn.execute(sql.replace("?", "%s"), (run_id,)).fetchall()
    else:
        path = database_url.removeprefix("sqlite://")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            found = conn.execute(sql, (run_id,)).fetchall()
        finally:
            conn.close()
    return sorted(node_id for (node_id,) in found)


def _committed(ctx) -> list[str]:
    return committed_nodes(ctx.input["db"], ctx.run_id)


def _pure(order: list[str]):
    def run(ctx):
        record(ctx)
        _crash_if(ctx, ctx.node_id)
        pause = ctx.input.get("sleep", 0)
        if pause:
            time.sleep(pause)
        return _output(ctx, order)

    return run


def _act(order: list[str]):
    def run(ctx):
        record(ctx)
        _append(ctx.input["seen"], f"{ctx.run_id} {','.join(_committed(ctx))}")
        _crash_if(ctx, "act")
        pause = ctx.input.get("act_sleep", 0)
        if pause:
            time.sleep(pause)
        _append(ctx.input["effects"], ctx.run_id)
        _crash_if(ctx, "act+")
        return _output(ctx, order)

    return run


def _chain_workflow(name: str, order: list[str]):
    nodes = {node_id: action(run=_act(order)) if node_id == "act" else compute(run=_pure(order))
             for node_id in order}
    return define_workflow(name=name, start_at=order[0], nodes=nodes,
                           edges=[edge(a, b) for a, b in zip(order, order[1:], strict=False)])


chain = _chain_workflow("pipelined-chain", CHAIN)
long_chain = _chain_workflow("pipelined-long-chain", LONG)
pure_chain = _chain_workflow("pipelined-pure-chain", PURE)
