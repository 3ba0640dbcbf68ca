"""A node's output checked against its declared shape (`compute(output=…)`, `action(output=…)`), in the worker.

The check runs after the node's function returned and before its result is
reported, so a result without its shape is never committed as the node's
output: the attempt fails with error code `output_invalid` and a one-line
message naming the path of each problem (`output.count: expected integer,
got string`), and is retried or routed like any other failure.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.workflows.shapes import value_problem


class OutputInvalid(Exception):
    """The node returned a value without its declared output shape (the message is one line)."""

    code = "output_invalid"


def checked_output_shape(spec: Any, output: Any) -> Any:
    """`output` when it has the shape `spec.output_shape` (or the node declares none); else raises
    OutputInvalid."""
    shape = getattr(spec, "output_shape", None)
    if shape is not None:
        problem = value_problem(shape, output, "output")
        if problem is not None:
            raise OutputInvalid(problem)
    return output
