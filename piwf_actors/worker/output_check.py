"""A node's output checked in the worker, after the node returned and before its result is reported.

Every output must be a value a run can hold — JSON, nested at most
`MAX_VALUE_DEPTH` deep, so that every view can show it (json_values.py) —
and not too large (`checked_output`); a compute or action node's output must also
have its declared shape (`compute(output=…)`, `action(output=…)`:
`checked_output_shape`). A result that fails a check is never committed as the
node's output: the attempt fails with error code `output_too_large` or
`output_invalid` and a one-line message naming the path of each problem
(`output.count: expected integer, got string`).

What follows depends on whether the node has acted (`returned_report`). A
compute node's failure is retried and routed like any other. An action whose
function returned has done its effect whatever it returned, so running it
again would do the effect twice: the report says `effect_applied` (the host
settles the effect `applied`, with the output when it is a wire value), and
the engine routes the failure without retrying it (docs/durability.md).
"""

from __future__ import annotations

from typing import Any

from piwf_actors.errors import EncodeError
from piwf_actors.json_values import json_value_problem
from piwf_actors.wire import pack
from piwf_actors.workflows.shapes import value_problem

#: The largest node output, packed (larger ones fail the node `output_too_large`).
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
#: The largest request a waiting node may present, and the largest notification: they are
#: listed to people and programs (`interaction.list`), many in one answer.
MAX_PRESENTED_BYTES = 64 * 1024


class OutputInvalid(Exception):
    """The node returned a value without its declared output shape (the message is one line)."""

    code = "output_invalid"


class OutputTooLarge(Exception):
    code = "output_too_large"


def checked_output(value: Any, limit: int = MAX_OUTPUT_BYTES, what: str = "output") -> Any:
    """`value` when it is a value a run can hold (JSON, nested at most MAX_VALUE_DEPTH deep:
    json_values.json_value_problem) of at most `limit` bytes packed; else raises OutputInvalid,
    OutputTooLarge, or EncodeError (what JSON holds but the wire does not: an int past 64 bits)."""
    problem = json_value_problem(value, what)
    if problem is not None:
        raise OutputInvalid(problem)
    return checked_size(value, limit, what)


def checked_size(value: Any, limit: int, what: str) -> Any:
    """`value` when it packs into at most `limit` bytes; else raises OutputTooLarge or EncodeError."""
    size = len(pack(value))
    if size > limit:
        raise OutputTooLarge(f"{what} of {size} bytes exceeds the limit of {limit} bytes")
    return value


def checked_children(request: dict[str, Any]) -> dict[str, Any]:
    """A fan-out's wait request: each child's input is a run input (`checked_output`), and all of them
    together at most MAX_OUTPUT_BYTES packed."""
    for index, child in enumerate(request.get("children") or ()):
        checked_output(child.get("input"), MAX_OUTPUT_BYTES, f"the input of child {index}")
    return checked_size(request, MAX_OUTPUT_BYTES, "the children's inputs")


def checked_output_shape(spec: Any, output: Any) -> Any:
    """`output` when it has the shape `spec.output_shape` (or the node declares none); else raises
    OutputInvalid."""
    shape = getattr(spec, "output_shape", None)
    if shape is not None:
        problem = value_problem(shape, output, "output")
        if problem is not None:
            raise OutputInvalid(problem)
    return output


def returned_report(spec: Any, output: Any) -> dict[str, Any]:
    """The outcome fields of the report of a compute or action node whose function returned `output`.

    A compute node's output that fails a check raises (OutputTooLarge, OutputInvalid,
    EncodeError), to be reported like any failure of the node. An action's is a failure that
    says its effect happened: `effect_applied`, and `effect_output` when the output is at least
    a value a run can hold that fits.
    """
    try:
        return {"outcome": "ok", "output": checked_output_shape(spec, checked_output(output))}
    except (OutputTooLarge, OutputInvalid, EncodeError) as exc:
        if not spec.has_side_effect:
            raise
        report: dict[str, Any] = {
            "outcome": "failed", "error_code": OutputTooLarge.code if isinstance(exc, OutputTooLarge)
            else OutputInvalid.code, "error": f"{exc}; the effect was applied, so the node is not retried",
            "effect_applied": True}
        if isinstance(exc, OutputInvalid) and json_value_problem(output) is None:  # a value of another shape
            report["effect_output"] = output
        return report
