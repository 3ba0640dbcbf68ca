"""Flow control by rate: the workflow options `rate=rate_limit(n, per_s=s, key=fn)` and
`debounce=debounce(s, key=fn, max_wait_s=m)`, and the named limiters `rate_limiter(name, n, per_s=s)`.

- `rate_limit(n, per_s=s, key=fn(input))`: at most `n` runs of the workflow *start* in any `s`
  seconds, per value of `key(input)` (no key: per workflow). A run over the budget stays queued,
  held, and is let go when the oldest start of its window leaves it (store/rates.py counts the
  starts in the claim transaction).
- `rate_limiter(name, n, per_s=s)`: a budget with a name of its own, shared by every workflow that
  names it (`rate=mail_api`, or `rate=mail_api.per(key_fn)` for a budget per key of it): a module-level
  object such as `mail_api = rate_limiter("mail-api", 60, per_s=60)`. Runs of two workflows that
  name one limiter count against one budget.
- `debounce(s, key=fn(input), max_wait_s=m, inputs="last")`: starts of the workflow with one key
  collapse into one run, started once the key has been quiet for `s` seconds or `m` seconds after
  the first start; the run gets the last input (`inputs="all"`: the list of every input, in order).

`flow_spec` computes what a run's start row records: the key functions run here (inside a `KEY`
phase, on a host's user-code thread when the resolver calls it), never in the claim.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from piwf_actors.errors import Rejected, WorkflowDefinitionError
from piwf_actors.workflows.limit_keys import EXPECTED, KeyValueError, key_text
from piwf_actors.workflows.model import Workflow
from piwf_actors.workflows.user_code import KEY, phase

#: A limiter's name: what the queue reason and the metrics label show.
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}\Z")
#: Longest period and debounce window (a year): a longer one is a mistake, not a rate.
MAX_PERIOD_S = 366 * 86400.0
DEBOUNCE_INPUTS = ("last", "all")


@dataclass(frozen=True, kw_only=True, slots=True)
class RateLimit:
    """At most `max` starts in any `per_s` seconds per value of `key(input)`. `name` is the budget's
    name: a named limiter's (shared by every workflow naming it), else None (the workflow's own)."""

    max: int
    per_s: float
    key: Callable[[Any], Any] | None = None
    name: str | None = None

    def per(self, key: Callable[[Any], Any]) -> RateLimit:
        """This limiter's budget per value of `key(input)` (a budget per key, under the limiter's name)."""
        return replace(self, key=key)


@dataclass(frozen=True, kw_only=True, slots=True)
class Debounce:
    """Starts with one `key(input)` within `seconds` of each other make one run."""

    seconds: float
    key: Callable[[Any], Any] | None = None
    max_wait_s: float | None = None
    inputs: str = "last"


def rate_limit(max: int, *, per_s: float, key: Callable[[Any], Any] | None = None) -> RateLimit:
    """For `define_workflow(rate=…)` / `@workflow(rate=…)`: at most `max` starts per `per_s` seconds
    per `key(input)`."""
    return RateLimit(max=max, per_s=per_s, key=key)


def rate_limiter(name: str, max: int, *, per_s: float) -> RateLimit:
    """A named budget of `max` starts per `per_s` seconds, shared by every workflow that names it."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise WorkflowDefinitionError(f"rate_limiter name must match [a-z0-9][a-z0-9_.-]*, got {name!r}")
    limiter = RateLimit(max=max, per_s=per_s, name=name)
    _check_rate(f"rate_limiter {name!r}", limiter)
    return limiter


def debounce(seconds: float, *, key: Callable[[Any], Any] | None = None, max_wait_s: float | None = None,
             inputs: str = "last") -> Debounce:
    """For `define_workflow(debounce=…)` / `@workflow(debounce=…)` (see the module docstring)."""
    return Debounce(seconds=seconds, key=key, max_wait_s=max_wait_s, inputs=inputs)


def _positive_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value > 0


def _seconds(value: Any) -> bool:
    return (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and 0 < value <= MAX_PERIOD_S)


def _check_rate(where: str, value: RateLimit) -> None:
    if not _positive_int(value.max):
        raise WorkflowDefinitionError(f"{where}: rate_limit needs a positive integer, got {value.max!r}")
    if not _seconds(value.per_s):
        raise WorkflowDefinitionError(f"{where}: per_s must be a number of seconds above 0 (at most a year), "
                                      f"got {value.per_s!r}")
    if value.key is not None and not callable(value.key):
        raise WorkflowDefinitionError(f"{where}: rate key must be a callable of the run input")


def checked_rate(name: str, value: Any) -> RateLimit | None:
    """`define_workflow(rate=…)`'s value, checked (one WorkflowDefinitionError naming the workflow)."""
    if value is None:
        return None
    if not isinstance(value, RateLimit):
        raise WorkflowDefinitionError(f"workflow {name!r}: rate must be built with rate_limit(n, per_s=…, key=…) "
                                      "or rate_limiter(…)")
    _check_rate(f"workflow {name!r}", value)
    return value


def node_rate_problem(value: Any) -> str | None:
    """What is wrong with a node's or step's `rate=` (a named limiter), or None."""
    if value is None:
        return None
    if not isinstance(value, RateLimit) or value.name is None:
        return "rate must be a named limiter, rate_limiter(name, n, per_s=…)"
    return None


def node_rate_key(value: RateLimit, node_input: Any) -> str:
    """The rate key a node of limiter `value` takes its start from: the limiter's name, or
    `name[key]` for `limiter.per(fn)`, `fn` called with (a copy of) the node's input."""
    assert value.name is not None
    if value.key is None:
        return value.name
    with phase(KEY, f"rate limiter {value.name!r}: its key"):
        raw = value.key(copy.deepcopy(node_input))
        try:
            return f"{value.name}[{key_text(raw)}]"
        except KeyValueError as exc:
            raise Rejected(f"rate limiter {value.name!r}: its key must be JSON-like ({EXPECTED}), got {exc}") from None


def checked_debounce(name: str, value: Any) -> Debounce | None:
    """`define_workflow(debounce=…)`'s value, checked."""
    if value is None:
        return None
    where = f"workflow {name!r}"
    if not isinstance(value, Debounce):
        raise WorkflowDefinitionError(f"{where}: debounce must be built with debounce(seconds, key=…, max_wait_s=…)")
    if not _seconds(value.seconds):
        raise WorkflowDefinitionError(f"{where}: debounce needs seconds above 0 (at most a year), got "
                                      f"{value.seconds!r}")
    if value.max_wait_s is not None and (not _seconds(value.max_wait_s) or value.max_wait_s < value.seconds):
        raise WorkflowDefinitionError(f"{where}: max_wait_s must be a number of seconds, at least the debounce "
                                      f"window ({value.seconds:g}), got {value.max_wait_s!r}")
    if value.key is not None and not callable(value.key):
        raise WorkflowDefinitionError(f"{where}: debounce key must be a callable of the run input")
    if value.inputs not in DEBOUNCE_INPUTS:
        raise WorkflowDefinitionError(f"{where}: debounce inputs must be 'last' or 'all', got {value.inputs!r}")
    return value


# --- what a start records -----------------------------------------------------------------------


def _key(workflow: Workflow, what: str, fn: Callable[[Any], Any], run_input: Any) -> str:
    with phase(KEY, f"workflow {workflow.name!r}: its {what} key"):
        value = fn(copy.deepcopy(run_input))  # a copy: what the key function changes is not the run's input
        try:
            return key_text(value)
        except KeyValueError as exc:
            raise Rejected(f"workflow {workflow.name!r}: its {what} key must be JSON-like ({EXPECTED}), "
                           f"got {exc}") from None


def flow_spec(workflow: Workflow, run_input: Any) -> dict[str, Any]:
    """The run columns a start of `workflow` with `run_input` records for its rate limit
    (`rate_key`, `rate_max`, `rate_per_s`) and the `debounce` of its start, or {}.

    A rate key is `NAME` or `NAME[key]`, NAME the limiter's name or else the workflow's: runs of
    two workflows naming one limiter share its budget. A debounce key is `workflow[key]`."""
    spec = rate_spec(workflow, run_input)
    bounce = workflow.debounce
    if bounce is not None:
        key = workflow.name if bounce.key is None else (
            f"{workflow.name}[{_key(workflow, 'debounce', bounce.key, run_input)}]")
        spec["debounce"] = {"key": key, "seconds": float(bounce.seconds),
                            "max_wait_s": None if bounce.max_wait_s is None else float(bounce.max_wait_s),
                            "inputs": bounce.inputs}
    return spec


def rate_spec(workflow: Workflow, run_input: Any) -> dict[str, Any]:
    """The rate columns alone (`flow_spec` without the debounce): what a child run of `workflow` records
    (a child is started by its parent's node, never debounced)."""
    rate = workflow.rate
    if rate is None:
        return {}
    name = rate.name or workflow.name
    key = name if rate.key is None else f"{name}[{_key(workflow, 'rate', rate.key, run_input)}]"
    return {"rate_key": key, "rate_max": int(rate.max), "rate_per_s": float(rate.per_s)}


def runs_flow_code(workflow: Workflow) -> bool:
    """Whether `flow_spec` calls the workflow's own code (a key function)."""
    return ((workflow.rate is not None and workflow.rate.key is not None)
            or (workflow.debounce is not None and workflow.debounce.key is not None))


__all__ = ["Debounce", "RateLimit", "checked_debounce", "checked_rate", "debounce", "flow_spec", "node_rate_key",
           "node_rate_problem", "rate_limit", "rate_limiter", "rate_spec", "runs_flow_code"]
