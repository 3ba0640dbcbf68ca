"""What a run did on its workflow's graph, from a `run.get` view (pure: no I/O, no clock).

`overlay(view, now) -> RunOverlay` gives per node its status, attempts and a short note (the
choice of a decision, a shell node's exit code, an output, an error), its open waits in words (an
answer with its deadline, `sleeping until 14:03:00`, `waiting for a message on 'go'`) and, for a
fan-out, its children by status; and where the run is (`current`: run.get's `current_node`, else
the node it waits at, and for an ended run the node it ended at). Times are relative to the `now`
given; `graph_render` draws the overlay on a `graph.Graph`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from piwf_actors.statuses import TERMINAL_STATUSES
from piwf_actors.timefmt import clock_time, duration, moment
from piwf_actors.workflows.graph import cut

#: How long a note may be (characters); a longer one ends with `…`.
NOTE_CHARS = 48


@dataclass(frozen=True, slots=True)
class NodeState:
    """What a run did at one node. `waits`: its open waits and requests in words; `children`: its
    child runs by status, in a fixed order, with `children_total` when run.get listed only some."""

    status: str
    attempts: int = 0
    note: str = ""
    waits: tuple[str, ...] = ()
    children: tuple[tuple[str, int], ...] = ()
    children_total: int | None = None
    children_partial: bool = False  # run.get listed only some of the run's children: the counts are a part
    child_runs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class RunOverlay:
    run_id: str
    status: str
    park_reason: str | None = None
    current: str | None = None
    nodes: Mapping[str, NodeState] = field(default_factory=dict)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "status": self.status, "park_reason": self.park_reason,
                "current": self.current, "nodes": {key: asdict(value) for key, value in self.nodes.items()}}


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(value)


def note(node: Mapping[str, Any]) -> str:
    """What a node did, shortly: its error, a decision's choice (and text), a shell node's exit code,
    else its output as compact JSON."""
    error = node.get("error")
    if isinstance(error, Mapping) and (error.get("code") or error.get("message")):
        return cut(f"{error.get('code') or 'error'}: {error.get('message') or ''}", NOTE_CHARS)
    output = node.get("output")
    if output is None:
        return ""
    if isinstance(output, Mapping) and "$content" in output:
        return f"({output.get('bytes')} bytes)"
    if isinstance(output, Mapping) and isinstance(output.get("choice"), str):
        typed = output.get("input")
        text = " ".join(str(v) for v in typed.values()) if isinstance(typed, Mapping) else ""
        return cut(f"choice {output['choice']}" + (f' "{text}"' if text else ""), NOTE_CHARS)
    if isinstance(output, Mapping) and isinstance(output.get("exit_code"), int) and "stdout" in output:
        return f"exit {output['exit_code']}"
    return cut(_compact(output), NOTE_CHARS)


def _left(at: Any, remaining: Any, now: float) -> float | None:
    """Seconds until `at` (from `now`), else the `remaining_s` run.get computed when it read the wait."""
    if isinstance(at, (int, float)):
        return at - now
    return float(remaining) if isinstance(remaining, (int, float)) else None


def _deadline(clock: Any, at: Any, remaining: Any, now: float, word: str, zoned: bool) -> str:
    if clock == "paused":  # the clock stands still while the run is paused: what is left, not a time
        left = remaining if isinstance(remaining, (int, float)) else None
        return "clock paused" + (f", {duration(left)} left" if left is not None else "")
    if clock == "running":
        if zoned and isinstance(at, (int, float)):
            return f"{word} {moment(at, now)}"
        left = _left(at, remaining, now)
        return word if left is None else f"{word} in {duration(left)}" if left > 0 else f"{word} due"
    return f"no {word}"


def wait_words(wait: Mapping[str, Any], now: float, *, zoned: bool = False) -> str:
    """An open wait of run.get's `waits` in words: `sleeping until 14:03:00 (in 12s)`, `waiting for a
    message on 'go' (timeout in 30s)`, `waiting for children: 3 of 10 open`. `zoned` (what `piwf show`
    asks for) writes a wake-up or deadline as a `moment`: `sleeping until 2026-12-01 10:00:00 UTC (in
    12s)`, `… (timeout 2026-12-01 10:00:30 UTC (in 30s))`; a tree (`piwf graph`, piwf-top) keeps the
    short form."""
    kind = wait.get("kind")
    if kind == "sleep":
        at = wait.get("wake_at")
        if not isinstance(at, (int, float)):
            return "sleeping"
        if zoned:
            return f"sleeping until {moment(at, now)}" + ("" if at > now else ", waking it is due")
        return f"sleeping until {clock_time(at, now)} ({f'in {duration(at - now)}' if at > now else 'due'})"
    if kind == "message":
        timeout = _deadline(wait.get("clock"), wait.get("deadline_at"), wait.get("remaining_s"), now, "timeout",
                            zoned)
        return f"waiting for a message on {str(wait.get('topic'))!r} ({timeout})"
    if kind == "event":  # (its topic is the event name)
        timeout = _deadline(wait.get("clock"), wait.get("deadline_at"), wait.get("remaining_s"), now, "timeout",
                            zoned)
        return f"waiting for event {str(wait.get('topic'))!r} ({timeout})"
    if kind == "children":
        return f"waiting for children: {wait.get('children_open')} of {wait.get('children_total')} open"
    return f"waiting ({kind})"


def request_words(request: Mapping[str, Any], now: float) -> str:
    """An open request of run.get's `waiting`: `waiting for an answer (decision, deadline in 59m57s)`."""
    deadline = _deadline(request.get("clock"), request.get("deadline_at"), request.get("remaining_s"), now,
                         "deadline", False)
    return f"waiting for an answer ({request.get('kind')}, {deadline})"


def _answered_by(node: Mapping[str, Any]) -> str:
    answer = node.get("answer")
    by = answer.get("by") if isinstance(answer, Mapping) else None
    kind = by.get("kind") if isinstance(by, Mapping) else None
    return "" if not kind or kind == "human" else f"by {kind}"


#: Child statuses in the order they are counted.
CHILD_ORDER = ("running", "starting", "queued", "parked", "done", "failed", "cancelled")


def _child_counts(runs: list[Mapping[str, Any]]) -> tuple[tuple[str, int], ...]:
    counts: dict[str, int] = {}
    for child in runs:
        counts[str(child.get("status"))] = counts.get(str(child.get("status")), 0) + 1
    order = {status: index for index, status in enumerate(CHILD_ORDER)}
    return tuple(sorted(counts.items(), key=lambda item: (order.get(item[0], len(order)), item[0])))


def overlay(view: Mapping[str, Any], now: float) -> RunOverlay:
    """What the run of `view` (a run.get receipt) did at each node, and where it is."""
    waits: dict[str, list[str]] = {}
    totals: dict[str, int] = {}
    for request in view.get("waiting") or []:
        if isinstance(request, Mapping):
            waits.setdefault(str(request.get("node_id")), []).append(request_words(request, now))
    for wait in view.get("waits") or []:
        if isinstance(wait, Mapping):
            waits.setdefault(str(wait.get("node_id")), []).append(wait_words(wait, now))
            if wait.get("kind") == "children" and isinstance(wait.get("children_total"), int):
                totals[str(wait.get("node_id"))] = int(wait["children_total"])
    found = view.get("children")
    children: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    by_node: dict[str, list[Mapping[str, Any]]] = {}
    for child in children.get("runs") or []:
        if isinstance(child, Mapping):
            by_node.setdefault(str(child.get("parent_node_id")), []).append(child)
    listed_all = len(children.get("runs") or []) >= int(children.get("total") or 0)
    states: dict[str, NodeState] = {}
    for node in view.get("nodes") or []:
        if not isinstance(node, Mapping):
            continue
        node_id = str(node.get("node_id"))
        text = " ".join(part for part in (note(node), _answered_by(node)) if part)
        kids = by_node.get(node_id, [])
        total = totals.get(node_id)
        states[node_id] = NodeState(
            str(node.get("status")), int(node.get("attempts") or 0), text, tuple(waits.pop(node_id, ())),
            _child_counts(kids), total if total is not None and total != len(kids) else None,
            bool(kids) and total is None and not listed_all, tuple(dict(child) for child in kids))
    for node_id, words in waits.items():  # a wait whose node has no attempt row yet
        states[node_id] = NodeState("waiting", 0, "", tuple(words))
    current = view.get("current_node")
    if current and str(current) not in states and view.get("status") == "running":
        # A pure node's attempt is recorded when it ends: until then only `current_node` says it runs.
        states[str(current)] = NodeState("running")
    if not current and view.get("status") in TERMINAL_STATUSES:
        # An ended run has no current node: it ended at its last node (a failed one: the last that failed).
        reached = [n for n in view.get("nodes") or [] if isinstance(n, Mapping)]
        failed = [n for n in reached if n.get("status") in ("failed", "timed_out")]
        current = ((failed if view.get("status") == "failed" and failed else reached) or [{}])[-1].get("node_id")
    elif not current:
        waiting = [w for w in (view.get("waiting") or []) + (view.get("waits") or []) if isinstance(w, Mapping)]
        current = waiting[0].get("node_id") if waiting else None
    return RunOverlay(str(view.get("run_id")), str(view.get("status")), view.get("park_reason"),
                      None if current is None else str(current), states)
