"""sleep: the run parks with a durable wake-up time and no worker; its output is
`{"slept_until": epoch seconds}`. `seconds=` counts from when the node starts; `until=fn(ctx)` is a
time (epoch seconds or an aware datetime) computed in the worker (worker/executors/sleep.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.timefmt import duration
from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.checks import common, fail, optional_callable
from piwf_actors.workflows.model import Callback, NodeSpec, duration_problem


@dataclass(frozen=True, kw_only=True, slots=True)
class SleepSpec(NodeSpec):
    """Park until `seconds` after the node starts, or until the time `until(ctx)` returns."""

    kind: ClassVar[str] = "sleep"
    seconds: float | None = None
    until: Callback | None = None


def sleep(seconds: float | None = None, until: Callback | None = None) -> SleepSpec:
    """A durable sleep: `seconds` from when the node starts, or until `until(ctx)` (epoch seconds
    or an aware datetime). A time that has passed already goes on at once."""
    return SleepSpec(seconds=seconds, until=until)


def check(node_id: str, spec: SleepSpec) -> dict[str, Any]:
    changes = common(node_id, spec)
    if (spec.seconds is None) == (spec.until is None):
        raise fail(node_id, "sleep needs exactly one of seconds= or until=")
    problem = None if spec.seconds is None else duration_problem(spec.seconds, positive=False)
    if problem is not None:
        raise fail(node_id, f"sleep seconds must be {problem}")
    optional_callable(node_id, "until", spec.until)
    return changes | {"seconds": None if spec.seconds is None else float(spec.seconds)}


def describe(spec: SleepSpec) -> list[str]:
    return [duration(spec.seconds) if spec.seconds is not None else "until (computed)"]


KIND = NodeKind(spec=SleepSpec, check=check, describe=describe, drawing=Drawing(('(["', '"])'), "ellipse"))
