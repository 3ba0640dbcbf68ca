"""Checks of single nodes, names and node outputs.

`checked_node(node_id, spec)` validates a helper-built spec and returns its
normalized copy (floats, frozen mappings, tuples): it runs the checks of the
node's kind (its module in `workflows/kinds/`) and then what holds for every
kind; every error is a `WorkflowDefinitionError` whose message starts with the
node id. Graph-level checks (edges, reachability, includes) live in `define.py`.

The checks kinds share, and a decision's response and deadline checks, are
re-exported from `kinds/checks.py` and `kinds/human_decision.py`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.json_values import json_value_problem
from piwf_actors.workflows.kinds import KINDS, NodeKind
from piwf_actors.workflows.kinds.checks import (
    NODE_ID,
    check_node_id,
    checked_seconds,
    fail,
    is_json_value,
    shape,
)
from piwf_actors.workflows.kinds.human_decision import check_decision_response, decision_timeout_for
from piwf_actors.workflows.model import NodeSpec

_Spec = TypeVar("_Spec", bound=NodeSpec)

WORKFLOW_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def check_workflow_name(name: Any) -> None:
    if not isinstance(name, str) or not WORKFLOW_NAME.fullmatch(name):
        raise WorkflowDefinitionError(
            f"workflow name {name!r} is invalid: it must match [a-z0-9][a-z0-9_-]*"
        )


def _output_shape(node_id: str, spec: NodeSpec, kind: NodeKind) -> Any:
    """The node's checked `output=` shape: only kinds whose output is what their author's function
    returns take one (compute, action); a shell's output, an answer, a child's output have shapes of
    their own."""
    if spec.output_shape is None:
        return None
    if not kind.takes_output_shape:
        raise fail(node_id, f"output= applies to compute and action nodes, not {spec.kind}")
    return shape(node_id, spec.output_shape, "output")


def checked_node(node_id: str, spec: _Spec) -> _Spec:
    """`spec` validated and normalized, or a WorkflowDefinitionError naming `node_id`."""
    if not isinstance(spec, NodeSpec) or type(spec) is NodeSpec:
        raise fail(node_id, f"expected a node helper (compute, shell, …), got {type(spec).__name__}")
    kind = KINDS.of(spec)
    if kind is None:
        raise fail(node_id, f"unsupported node kind {spec.kind!r}")
    changes = kind.check(node_id, spec)
    if not spec.has_side_effect:
        # Only action and shell nodes may declare themselves non-idempotent.
        changes["idempotent"] = True
    changes["output_shape"] = _output_shape(node_id, spec, kind)
    normalized: _Spec = dataclasses.replace(spec, **changes)
    return normalized


def json_problem(value: Any) -> str | None:
    """Why `value` cannot be a node output or a run input (json_values.json_value_problem: not JSON, or
    nested deeper than a view can show), or None."""
    problem = json_value_problem(value, "$")
    return None if problem is None else f"output is not a value a run can hold: {problem}"


__all__ = ["NODE_ID", "WORKFLOW_NAME", "check_decision_response", "check_node_id", "check_workflow_name",
           "checked_node", "checked_seconds", "decision_timeout_for", "fail", "is_json_value", "json_problem"]
