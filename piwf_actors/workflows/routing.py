"""Routing as a pure function: where a run goes after a node's result.

`route(workflow, node_id, outcome, output)` never raises for a valid node id;
a run that cannot continue gets a `RouteDecision` with an `error` whose code
is stored with the run:

- `node_failed`: the node failed and its route does not switch on
  `$result.outcome` (a failed node routes only through such a switch);
- `routing_error`: a switch found no case for the value and has no default.

Switch values become case keys as: str as is, bool → "true"/"false",
int → decimal text, None → "null"; a field missing from the output, or any
other type, matches no case (so the default applies, if any).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from piwf_actors.workflows.model import END, Edge, Switch, Workflow

RESULT_OUTCOME = "$result.outcome"
OUTCOMES = ("ok", "failed")
# `$`, `$output`, `$.a.b`, `$output.a.b`; a purely numeric segment also indexes lists.
_OUTPUT_PATH = re.compile(r"\$(?:output)?((?:\.[A-Za-z0-9_-]+)*)")
_MISSING = object()


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """Exactly one of: a next node, the end of the run (`next_node is None`
    and no error, the run's output is this node's output), or an error
    `(code, one-line message)`."""

    next_node: str | None = None
    error: tuple[str, str] | None = None


def path_segments(on: str) -> tuple[str, ...] | None:
    """The field names of an output path, or None if `on` is not one."""
    match = _OUTPUT_PATH.fullmatch(on)
    if match is None:
        return None
    return tuple(part for part in match.group(1).split(".") if part)


def is_valid_on(on: Any) -> bool:
    return isinstance(on, str) and (on == RESULT_OUTCOME or path_segments(on) is not None)


def lookup(output: Any, segments: Sequence[str]) -> Any:
    """The value at `segments` inside `output`, or `_MISSING`."""
    value = output
    for segment in segments:
        if isinstance(value, Mapping) and segment in value:
            value = value[segment]
        elif isinstance(value, (list, tuple)) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            return _MISSING
    return value


def case_key(value: Any) -> str | None:
    """The case key a looked-up value selects, or None for no match."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if value is None:
        return "null"
    return None


def _target(target: str) -> RouteDecision:
    return RouteDecision(next_node=None if target == END else target)


def route(
    workflow: Workflow, node_id: str, outcome: Literal["ok", "failed"], output: Any
) -> RouteDecision:
    """Where the run goes after `node_id` ended with `outcome` and `output`.

    Raises ValueError only for a node id the workflow does not have or an
    outcome other than "ok"/"failed" (engine bugs, not run errors).
    """
    if node_id not in workflow.nodes:
        raise ValueError(f"workflow {workflow.name!r} has no node {node_id!r}")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be 'ok' or 'failed', got {outcome!r}")
    current = workflow.routes.get(node_id)
    switches_on_outcome = isinstance(current, Switch) and current.on == RESULT_OUTCOME
    if outcome == "failed" and not switches_on_outcome:
        return RouteDecision(error=("node_failed", f"node {node_id!r} failed"))
    if current is None:
        return RouteDecision()
    if isinstance(current, Edge):
        return _target(current.target)
    if switches_on_outcome:
        value: Any = outcome
    else:
        value = lookup(output, path_segments(current.on) or ())
    key = None if value is _MISSING else case_key(value)
    if key is not None and key in current.cases:
        return _target(current.cases[key])
    if current.default is not None:
        return _target(current.default)
    shown = "no value" if value is _MISSING else repr(value)
    shown = shown if len(shown) <= 80 else shown[:79] + "…"
    return RouteDecision(
        error=("routing_error", f"node {node_id!r}: switch on {current.on} has no case for {shown}")
    )
