"""action: a function with a side effect, reserved as an effect (`applying`) before it runs and
settled after; cut off in between, it parks the run `ambiguous_effect` unless it is idempotent.

Checked and described as compute is (kinds/compute.py); drawn as a parallelogram, like shell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from piwf_actors.workflows.kinds.base import Drawing, NodeKind
from piwf_actors.workflows.kinds.compute import check, describe
from piwf_actors.workflows.model import Callback, NodeSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionSpec(NodeSpec):
    """A side effect `run(ctx) -> JSON-able output`, reserved as an effect before it runs."""

    kind: ClassVar[str] = "action"
    has_side_effect: ClassVar[bool] = True
    run: Callback
    timeout_s: float | None = 900.0
    idempotent: bool = False


def action(
    run: Callback,
    idempotent: bool = False,
    timeout_s: float | None = 900,
    retries: int = 0,
    retry_backoff_s: float = 0.0,
    output: Any = None,
    rate: Any = None,
) -> ActionSpec:
    """A side effect `run(ctx) -> JSON-able output`; `idempotent` allows re-running after a crash.
    `output` is checked like compute's, but a mismatch is not retried: `run` returned, so the effect
    happened (it is recorded `applied`). `rate`: a named `rate_limiter` the action takes a start of
    before it runs (workflows/rate_limits.py)."""
    return ActionSpec(
        run=run, idempotent=idempotent, timeout_s=timeout_s, retries=retries,
        retry_backoff_s=retry_backoff_s, output_shape=output, rate=rate,
    )


KIND = NodeKind(spec=ActionSpec, check=check, describe=describe,
                drawing=Drawing(('[/"', '"/]'), "parallelogram"), takes_output_shape=True)
