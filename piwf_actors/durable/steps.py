"""`@step`: a plain function made a durable step of a workflow function.

A step call inside a `@workflow` function is one node of the run: a pure step is a `compute` node
(its result recorded, pipelined), an `effect=True` step an `action` node (its effect reserved in the
ledger before it runs, so a cut-off effect parks the run `ambiguous_effect` unless it is
idempotent). Its arguments are not recorded — only its result, as JSON (`to_json`), restored to the
annotated return type on every launch (`restore`), so the function sees the same value whether the
step ran now or was replayed. Outside a run, call `step.fn(...)` (the plain function).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from piwf_actors.durable.replay import checked_name, current_replay
from piwf_actors.errors import WorkflowDefinitionError
from piwf_actors.workflows.kinds.action import ActionSpec
from piwf_actors.workflows.kinds.compute import ComputeSpec
from piwf_actors.workflows.typed_values import restore, return_annotation, to_json
from piwf_actors.workflows.validation import checked_node

#: A step's timeout when none is given: a compute node's.
DEFAULT_TIMEOUT_S = 900.0


class Step:
    """A function decorated with `@step`: calling it inside a workflow function runs it as a node (or
    returns its recorded result). `fn` is the plain function; `name` the step's id (its function's
    name unless given); `options` what it was declared with (part of the workflow's digest)."""

    def __init__(self, fn: Callable[..., Any], *, name: str | None, effect: bool, idempotent: bool | None,
                 retries: int, retry_backoff_s: float, timeout_s: float | None, rate: Any = None) -> None:
        if not callable(fn):
            raise WorkflowDefinitionError(f"@step needs a function, got {type(fn).__name__}")
        functools.update_wrapper(self, fn)  # __name__, __doc__, __wrapped__ (the digest follows it)
        self.fn = fn
        self.name = checked_name(name if name is not None else getattr(fn, "__name__", ""), "step",
                                  WorkflowDefinitionError)
        if idempotent is not None and not effect:
            raise WorkflowDefinitionError(f"step {self.name!r}: idempotent= applies to effect=True steps only")
        self.options = {"effect": bool(effect), "idempotent": bool(idempotent) if effect else True,
                        "retries": retries, "retry_backoff_s": retry_backoff_s, "timeout_s": timeout_s}
        if rate is not None:  # absent otherwise: digests of steps without a limiter stay as they were
            self.options["rate"] = rate
        template: Any = (ActionSpec(run=fn, idempotent=bool(idempotent), timeout_s=timeout_s, retries=retries,
                                    retry_backoff_s=retry_backoff_s, rate=rate) if effect else
                         ComputeSpec(run=fn, timeout_s=timeout_s, retries=retries, retry_backoff_s=retry_backoff_s,
                                     rate=rate))
        self._template = checked_node(self.name, template)  # a bad option is a definition error, now
        self._returns: Any = _UNREAD
        try:
            self._returns = return_annotation(fn)
        except WorkflowDefinitionError:
            pass  # perhaps a forward reference: tried again at the first call, which raises it then

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(self.name, args, kwargs)

    def named(self, name: str) -> Callable[..., Any]:
        """This step under another id (`fetch.named("fetch_eu")(url)`): calls of one step that mean
        different things keep their ids when the function changes the order it makes them in."""
        given = checked_name(name, "step")
        return lambda *args, **kwargs: self._call(given, args, kwargs)

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        replay = current_replay(f"step {name!r}")
        fn = self.fn
        spec = dataclasses.replace(self._template, run=lambda _ctx: to_json(fn(*args, **kwargs)))
        return restore(replay.call(name, spec), self.returns)

    @property
    def returns(self) -> Any:
        """The annotated return type (`restore` brings recorded results back to it). Read when the step
        is defined; an annotation naming what the module defines later is read at the first call."""
        if self._returns is _UNREAD:
            self._returns = return_annotation(self.fn)  # a WorkflowDefinitionError line if it cannot be
        return self._returns

    def __repr__(self) -> str:
        return f"<step {self.name}{' (effect)' if self.options['effect'] else ''}>"


_UNREAD = object()


def step(fn: Callable[..., Any] | None = None, *, name: str | None = None, effect: bool = False,
         idempotent: bool | None = None, retries: int = 0, retry_backoff_s: float = 0.0,
         timeout_s: float | None = DEFAULT_TIMEOUT_S, rate: Any = None) -> Any:
    """Make `fn` a durable step (`@step`, `@step()` or `@step(effect=True, retries=2, …)`).

    `effect=True`: a side effect under the effect ledger, as an `action` node (`idempotent=True` says
    running it again after a crash or a timeout is harmless). `retries`, `retry_backoff_s` and
    `timeout_s` as on nodes. `name`: the step's id (default: the function's name). `rate`: a named
    `rate_limiter` each call takes a start of before it runs (workflows/rate_limits.py)."""
    def make(function: Callable[..., Any]) -> Step:
        return Step(function, name=name, effect=effect, idempotent=idempotent, retries=retries,
                    retry_backoff_s=retry_backoff_s, timeout_s=timeout_s, rate=rate)

    return make(fn) if fn is not None else make
