"""wait_event: the first event `name` whose data matches this run's `match` (Inngest's `waitForEvent`);
its output is the event `{event_id, name, key, data, emitted_at}`. After `timeout_s` the node outputs
`on_timeout` when one is given, else it fails `event_timeout` (routed like any failure).

`match` is declarative: a map of event data paths (dotted: `"order.id"`) to the values they must
equal, or a function of ctx that returns one (computed in the worker when the wait starts, e.g.
`lambda ctx: {"order_id": ctx.input["order_id"]}`). The host compares it with each event in the
emit's transaction, so no user code runs in the writer or on a door's thread and no waiting run is
woken only to test an event. Events emitted before the wait count when they are at most `lookback_s`
older than the wait (None, the default: since the run was created); each event is taken by a run
at most once. The worker asks the host for the wait (worker/executors/wait_event.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.events import check_event_name
from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail, is_json_value
from piwf_actors.workflows.kinds.summary import timeout_part
from piwf_actors.workflows.model import NodeSpec, duration_problem, freeze

#: At most this many fields in a match.
MAX_MATCH_FIELDS = 20


@dataclass(frozen=True, kw_only=True, slots=True)
class WaitEventSpec(NodeSpec):
    """Wait for the first event `name` matching `match` (a map of path → value, or a callable of ctx)."""

    kind: ClassVar[str] = "wait_event"
    name: str
    match: Any = None
    on_timeout: Any = None  # the output after `timeout_s` (frozen JSON); None: fail `event_timeout`
    lookback_s: float | None = None


def wait_event(name: str, match: Any = None, timeout_s: float | None = None, on_timeout: Any = None,
               lookback_s: float | None = None) -> WaitEventSpec:
    """The first event `name` whose data matches `match` (emitted after the run was created, or within
    `lookback_s` before the wait); after `timeout_s` the output is `on_timeout`, or the node fails
    `event_timeout` when there is none."""
    return WaitEventSpec(name=name, match=match, timeout_s=timeout_s, on_timeout=on_timeout, lookback_s=lookback_s)


def match_problem(match: Any) -> str | None:
    """None for a valid computed or literal match (a map of non-empty path → JSON value), else the problem."""
    if match is None:
        return None
    if not isinstance(match, Mapping):
        return "match must be a map of event data paths to values, or a function of ctx returning one"
    if len(match) > MAX_MATCH_FIELDS:
        return f"match has at most {MAX_MATCH_FIELDS} fields"
    for path, value in match.items():
        if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
            return f"match path {path!r} must be a dotted path into the event's data, like 'order.id'"
        if not is_json_value(value):
            return f"match value of {path!r} must be JSON-shaped"
    return None


def check(node_id: str, spec: WaitEventSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    problem = check_event_name(spec.name, "the event name")
    if problem is not None:
        raise fail(node_id, problem)
    if not callable(spec.match):
        problem = match_problem(spec.match)
        if problem is not None:
            raise fail(node_id, problem)
    if spec.on_timeout is not None and not is_json_value(spec.on_timeout):
        raise fail(node_id, "on_timeout must be JSON-shaped (string keys, finite numbers)")
    if spec.on_timeout is not None and spec.timeout_s is None:
        raise fail(node_id, "on_timeout needs timeout_s")
    if spec.lookback_s is not None:
        problem = duration_problem(spec.lookback_s, positive=False)
        if problem is not None:
            raise fail(node_id, f"lookback_s must be {problem}")
    return changes | {"on_timeout": freeze(spec.on_timeout),
                      "match": spec.match if callable(spec.match) else freeze(spec.match)}


def describe(spec: WaitEventSpec) -> list[str]:
    matched = "" if spec.match is None else (" (computed match)" if callable(spec.match) else
                                             " where " + ", ".join(f"{path}" for path in spec.match))
    return [f"event {spec.name}{matched}", *timeout_part(spec)]


KIND = NodeKind(spec=WaitEventSpec, check=check, describe=describe, drawing=Drawing(('(["', '"])'), "ellipse"))
