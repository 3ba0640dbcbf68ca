"""compute: a pure function of the node context; its result may be re-computed freely after a crash.

Its output is what `run(ctx)` returns (JSON-like, checked in the worker against `output=` when one
is given); the worker pipelines it (worker/executors/compute.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, require_callable
from piwf_actors.workflows.kinds.summary import function_name
from piwf_actors.workflows.model import Callback, NodeSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ComputeSpec(NodeSpec):
    """A pure function `run(ctx) -> JSON-able output`; safe to re-run."""

    kind: ClassVar[str] = "compute"
    run: Callback
    timeout_s: float | None = 900.0


def compute(
    run: Callback, timeout_s: float | None = 900, retries: int = 0, retry_backoff_s: float = 0.0, output: Any = None
) -> ComputeSpec:
    """A pure function `run(ctx) -> JSON-able output`; `timeout_s=None` for no timeout. `output` (a shape
    or a Python type, see `shapes.py`) is checked in the worker when `run` returns: a mismatch fails the
    attempt `output_invalid`."""
    return ComputeSpec(run=run, timeout_s=timeout_s, retries=retries, retry_backoff_s=retry_backoff_s,
                       output_shape=output)


def check(node_id: str, spec: Any) -> dict[str, Any]:
    """A function node's checks (compute and action): `run` is callable, and the common options."""
    require_callable(node_id, "run", spec.run)
    return common(node_id, spec)


def describe(spec: Any) -> list[str]:
    """The function's name (a lambda has none to show)."""
    return [function_name(spec.run)]


KIND = NodeKind(spec=ComputeSpec, check=check, describe=describe, drawing=Drawing(('["', '"]'), "box"),
                takes_output_shape=True)
