"""Child runs: `run_workflow`, `map_workflow` and `parallel` nodes (workflows/waits.py).

The node's first `wait_request` creates its `children` wait and every child in the same
transaction, each an ordinary queued run (own worker, snapshot and history) with
`parent_run_id`, `parent_node_id`, `parent_wait_id` and `child_index` set. A child's id derives
from (parent run, node, attempt, index): a request sent again, or a launch after a crash, finds
the wait and never starts a child twice. A fan-out's `max_parallel` is a limit like a workflow's
(store/slots.py): the children beyond it start held, and each child that ends lets the next go.

Every child's end runs `_on_run_finished` in the transaction that ends it: the wait counts it,
and the child that ends last (or, `fail_fast`, the first that fails) settles the wait and wakes
the parent. A run that ends with children still open (cancelled, failed) cancels them. A
restarted parent re-uses the children of the run it restarts that finished with the same
workflow and input (`copied_from`), so their work is not done again.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.canonical import canonical_json, loads
from piwf_actors.errors import Rejected
from piwf_actors.ids import derived_id, id_time
from piwf_actors.json_values import json_value_problem
from piwf_actors.statuses import TERMINAL_SQL, TERMINAL_STATUSES
from piwf_actors.store.blobs import get_blob, put_blob
from piwf_actors.store.commands.holds import held_by, let_go
from piwf_actors.store.commands.registry import WriteContext
from piwf_actors.store.commands.runs import insert_run
from piwf_actors.store.commands.waits import cancel_open_waits, settle, wait_row
from piwf_actors.store.events import append_event
from piwf_actors.store.runstate import QUEUE_FRESH, QUEUE_HELD, RunEnd, claim_row, on_run_finished, set_status
from piwf_actors.store.values import get_value, put_value
from piwf_actors.workflows.graph_data import GraphDataError, child_document, document_bytes, document_from_bytes
from piwf_actors.workflows.waits import MAX_CHILDREN


def child_run_id(run_id: str, node_id: str, attempt_id: str, index: int) -> str:
    """Derived from (parent run, node, attempt, index), with every run id's shape (`ids.derived_id`):
    the attempt id's time leads, so a fan-out's children go in at the end of the run table's key
    b-tree instead of scattered across it (STYLE.md: random keys slow batched inserts)."""
    key = canonical_json(["child", run_id, node_id, attempt_id, index])
    return derived_id("run", key, id_time(attempt_id) or 0.0)


def start_children(ctx: WriteContext, run: dict[str, Any], wait: dict[str, Any], payload: dict[str, Any]) -> None:
    """Create the children of a new `children` wait (payload.children: [{workflow, workflow_attr,
    definition_digest, input, concurrency_key?, concurrency_max?}], payload.max_parallel)."""
    children = payload.get("children")
    if not isinstance(children, list):
        raise Rejected("wait_request: children must be a list")
    if len(children) > MAX_CHILDREN:
        raise Rejected(f"a node starts at most {MAX_CHILDREN} children, not {len(children)}")
    max_parallel = payload.get("max_parallel")
    reusable = _reusable(ctx, run, wait["node_id"])
    graphs = _ChildGraphs(ctx, run["graph_sha256"])
    admitted = open_ = 0
    for index, child in enumerate(children):
        run_id = child_run_id(run["run_id"], wait["node_id"], wait["attempt_id"], index)
        spec = {"run_id": run_id, "workflow": child["workflow"], "workflow_path": run["workflow_path"],
                "workflow_attr": child["workflow_attr"], "definition_digest": child["definition_digest"],
                "project_path": run["project_path"], "session_id": run["session_id"],
                "parent_run_id": run["run_id"], "parent_node_id": wait["node_id"], "parent_wait_id": wait["wait_id"],
                "child_index": index, "fanout_max": max_parallel, "priority": run["priority"],
                "concurrency_key": child.get("concurrency_key"), "concurrency_max": child.get("concurrency_max"),
                "rate_key": child.get("rate_key"), "rate_max": child.get("rate_max"),
                "rate_per_s": child.get("rate_per_s"), "wait_topics": child.get("wait_topics")}
        stored = put_value(ctx.conn, child.get("input"), ctx.now)
        graph_sha = graphs.of(child["definition_digest"])
        earlier = reusable.get(index)
        if earlier is not None and earlier["definition_digest"] == child["definition_digest"] \
                and (earlier["input_json"], earlier["input_sha256"]) == stored:
            _insert_copy(ctx, spec, stored, run["source_sha256"], graph_sha, earlier)
            continue
        held = max_parallel is not None and admitted >= max_parallel
        admitted += 1
        open_ += 1
        if held:  # beyond max_parallel: let go as the first ones end (store/commands/holds.py)
            spec["held_by"] = held_by("parent_wait_id", wait["wait_id"])
        insert_run(ctx, spec, stored_input=stored, source_sha=run["source_sha256"], graph_sha=graph_sha,
                   queue_class=QUEUE_HELD if held else QUEUE_FRESH, check_id=False)
    ctx.conn.execute("UPDATE run_wait SET children_total = ?, children_open = ? WHERE wait_id = ?",
                     (len(children), open_, wait["wait_id"]))
    wait.update(children_total=len(children), children_open=open_)


class _ChildGraphs:
    """The graph blob of each child workflow, cut from the parent's stored graph by the digest the
    worker names (workflows/graph_data.py): no code is loaded here. None when the parent has no graph
    (stored before schema v16) or its graph does not hold that definition (a module the file imports
    changed between the start and the worker's load): that child is drawn from the nodes it reached."""

    def __init__(self, ctx: WriteContext, parent_graph_sha: str | None) -> None:
        self._ctx = ctx
        self._parent_sha = parent_graph_sha
        self._document: dict[str, Any] | None = None
        self._shas: dict[str, str | None] = {}

    def of(self, digest: Any) -> str | None:
        if not isinstance(digest, str) or self._parent_sha is None:
            return None
        if digest not in self._shas:
            if self._document is None:
                data = get_blob(self._ctx.conn, self._parent_sha)
                try:
                    self._document = document_from_bytes(data) if data is not None else {}
                except GraphDataError:
                    self._document = {}
            document = child_document(self._document, digest)
            self._shas[digest] = None if document is None else put_blob(self._ctx.conn, document_bytes(document),
                                                                         self._ctx.now)
        return self._shas[digest]


def _reusable(ctx: WriteContext, run: dict[str, Any], node_id: str) -> dict[int, dict[str, Any]]:
    """The finished children of this node in the run this one restarts (a restart has `parent_run_id`
    without `parent_node_id`), by index: the latest one of each."""
    if run["parent_run_id"] is None or run["parent_node_id"] is not None:
        return {}
    keys = ("run_id", "child_index", "definition_digest", "input_json", "input_sha256", "output_json", "output_sha256")
    found: dict[int, dict[str, Any]] = {}
    for row in ctx.conn.execute(
            f"SELECT {', '.join(keys)} FROM run WHERE parent_run_id = ? AND parent_node_id = ? AND status = 'done' "
            "ORDER BY created_at", (run["parent_run_id"], node_id)):
        child = dict(zip(keys, row, strict=True))
        found[int(child["child_index"])] = child
    return found


def _insert_copy(ctx: WriteContext, spec: dict[str, Any], stored: tuple[str | None, str | None], source_sha: str,
                 graph_sha: str | None, earlier: dict[str, Any]) -> None:
    """A child that finished in the run restarted: recorded done with its output, not run again."""
    insert_run(ctx, spec, stored_input=stored, source_sha=source_sha, graph_sha=graph_sha, check_id=False)
    ctx.conn.execute("UPDATE run SET status = 'done', output_json = ?, output_sha256 = ?, copied_from = ?, "
                     "finished_at = ?, revision = revision + 1 WHERE run_id = ?",
                     (earlier["output_json"], earlier["output_sha256"], earlier["run_id"], ctx.now, spec["run_id"]))
    append_event(ctx.conn, spec["run_id"], "run_copied", ctx.now, payload={"copied_from": earlier["run_id"]})


# --- settling the wait ------------------------------------------------------------------------------


_CHILD_KEYS = ("child_index", "run_id", "status", "output_json", "output_sha256", "error_code", "error_message")


def _children(ctx: WriteContext, wait_id: str) -> list[dict[str, Any]]:
    return [dict(zip(_CHILD_KEYS, row, strict=True)) for row in ctx.conn.execute(
        f"SELECT {', '.join(_CHILD_KEYS)} FROM run WHERE parent_wait_id = ? ORDER BY child_index", (wait_id,))]


def _error(child: dict[str, Any]) -> dict[str, Any]:
    return {"status": child["status"], "code": child["error_code"] or child["status"],
            "message": (child["error_message"] or f"the child run was {child['status']}")[:1000]}


def _failure(child: dict[str, Any], name: str | None) -> dict[str, Any]:
    error = _error(child)
    what = f"child {name!r}" if name is not None else f"child {child['child_index']}"
    return {"outcome": "failed", "error_code": "child_cancelled" if child["status"] == "cancelled" else "child_failed",
            "error": f"{what} ({child['run_id']}) ended {child['status']}: {error['code']}: {error['message']}",
            "output": {"index": child["child_index"], "name": name, "run_id": child["run_id"], "error": error}}


def _result(ctx: WriteContext, wait: dict[str, Any]) -> dict[str, Any]:
    """The node's result once every child has ended: an output gathered from the children's outputs
    is one or two levels deeper than they are, so one past what a run holds fails the node, as an
    output the worker checks would (worker/output_check.py)."""
    result = _gathered(ctx, wait)
    problem = json_value_problem(result.get("output"), "output") if result["outcome"] == "ok" else None
    if problem is not None:
        return {"outcome": "failed", "error_code": "output_invalid",
                "error": f"the children's outputs gathered: {problem}"}
    return result


def _gathered(ctx: WriteContext, wait: dict[str, Any]) -> dict[str, Any]:
    detail = loads(wait["detail"] or "{}")
    mode, names, collect = detail.get("mode"), detail.get("names"), detail.get("on_failure") == "collect"
    children = _children(ctx, wait["wait_id"])
    outputs = [get_value(ctx.conn, c["output_json"], c["output_sha256"]) if c["status"] == "done" else None
               for c in children]
    failed = [c for c in children if c["status"] != "done"]
    if failed and not collect:
        first = failed[0]
        return _failure(first, names[first["child_index"]] if names else None)
    if mode == "run":
        return {"outcome": "ok", "output": outputs[0]}
    shaped: Any = dict(zip(names, outputs, strict=True)) if mode == "parallel" and names else outputs
    if not collect:
        return {"outcome": "ok", "output": shaped}
    failures = [{"index": c["child_index"], "run_id": c["run_id"], "error": _error(c),
                 **({"name": names[c["child_index"]]} if names else {})} for c in failed]
    return {"outcome": "ok", "output": {"outputs": shaped, "failed": failures}}


def settle_if_done(ctx: WriteContext, wait: dict[str, Any]) -> None:
    """A pending children wait with no child left open (none at all, or all re-used) settles."""
    if wait["status"] == "pending" and wait["children_open"] == 0:
        settle(ctx, wait, _result(ctx, wait), reason="children")


def _child_ended(ctx: WriteContext, run_id: str, status: str, wait_id: str) -> None:
    row = ctx.conn.execute("UPDATE run_wait SET children_open = children_open - 1 WHERE wait_id = ? "
                           "AND status = 'pending' RETURNING children_open", (wait_id,)).fetchone()
    if row is None:
        return  # the wait is over already (settled by a failure, or its run ended)
    wait = wait_row(ctx, "wait_id = ?", (wait_id,))
    assert wait is not None
    if status != "done" and loads(wait["detail"] or "{}").get("on_failure") != "collect":
        child = next(c for c in _children(ctx, wait_id) if c["run_id"] == run_id)
        names = loads(wait["detail"] or "{}").get("names")
        settle(ctx, wait, _failure(child, names[child["child_index"]] if names else None), reason="children")
        cancel_children(ctx, wait_id)  # fail fast: the others are not needed any more
    elif int(row[0]) <= 0:
        settle(ctx, wait, _result(ctx, wait), reason="children")


def cancel_children(ctx: WriteContext, wait_id: str) -> None:
    """Cancel every child of `wait_id` that has not ended: a queued or parked one at once, an active
    one through its runner (it ends `cancelled` when its launch is settled)."""
    for child_id, status in ctx.conn.execute(
            f"SELECT run_id, status FROM run WHERE parent_wait_id = ? AND status NOT IN {TERMINAL_SQL}",
            (wait_id,)).fetchall():
        if status in TERMINAL_STATUSES:
            continue
        if claim_row(ctx.conn, child_id) is not None:
            ctx.conn.execute("UPDATE run SET cancel_requested = 1 WHERE run_id = ?", (child_id,))
            ctx.changes.touch("run_control", child_id)
            append_event(ctx.conn, child_id, "cancel_requested", ctx.now, payload={"by": "parent"})
        else:
            set_status(ctx, child_id, "cancelled", "run_cancelled", payload={"by": "parent"})


@on_run_finished
def _on_run_finished(ctx: WriteContext, run_id: str, status: str, limits: RunEnd) -> None:
    parent_wait_id, fanout_max, concurrency_key, concurrency_max, open_waits = limits
    for wait in cancel_open_waits(ctx, run_id) if open_waits else ():
        if wait["kind"] == "children":
            cancel_children(ctx, wait["wait_id"])
    if parent_wait_id is not None:
        _child_ended(ctx, run_id, status, parent_wait_id)
        if fanout_max:
            let_go(ctx, "parent_wait_id", parent_wait_id, fanout_max)
    if concurrency_key is not None and concurrency_max:
        let_go(ctx, "concurrency_key", concurrency_key, concurrency_max)

