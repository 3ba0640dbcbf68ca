"""What can be read of a durable function workflow (`Workflow.function`) without running it: the
`@step` objects and the workflows its code refers to by global name, in the order the code names them
first (nested functions' code included). A step reached another way (an attribute, a helper of
another module, a `step.named(...)` id) is not seen: the run's own history is the full record.

A step is recognised as the digest recognises it (workflows/digest.py): an object with `__wrapped__`
(the user function) and `options` (durable/steps.py), so this floor needs nothing of `durable/`.
"""

from __future__ import annotations

import types
from typing import Any

from piwf_actors.workflows.model import Workflow


def is_step(value: Any) -> bool:
    return (not isinstance(value, types.FunctionType) and isinstance(getattr(value, "__wrapped__", None),
                                                                      types.FunctionType)
            and isinstance(getattr(value, "options", None), dict) and isinstance(getattr(value, "name", None), str))


def function_parts(workflow: Workflow) -> tuple[list[Any], list[Workflow]]:
    """(steps, child workflows) `workflow`'s function names (see the module docstring)."""
    fn = workflow.function
    if fn is None:
        return [], []
    steps: dict[int, Any] = {}
    children: dict[str, Workflow] = {}
    for global_name in _names_in_order(fn.__code__):
        value = fn.__globals__.get(global_name)
        if is_step(value):
            steps.setdefault(id(value), value)
        elif isinstance(value, Workflow) and value is not workflow:
            children.setdefault(value.digest, value)
    return list(steps.values()), list(children.values())


def step_kind(step: Any) -> tuple[str, str]:
    """The node kind a step runs as (compute, action) and its one-line summary."""
    options = step.options
    if options.get("effect"):
        summary = "effect step" + (" · idempotent" if options.get("idempotent") else "")
        kind = "action"
    else:
        summary, kind = "step", "compute"
    if options.get("retries"):
        summary += f" · retries {options['retries']}"
    return kind, summary


def _names_in_order(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names_in_order(const)
    return list(dict.fromkeys(names))
