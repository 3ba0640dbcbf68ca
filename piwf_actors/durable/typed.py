"""Typed values at the function form's edges: the run input bound to the parameters, a step's or the
function's return value recorded as JSON and restored to its annotated type.

Interim: plain JSON in and out until workflows/typed_values.py lands; then these are its functions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def parameters_shape(fn: Callable[..., Any]) -> dict[str, Any] | None:
    return None


def bind_input(fn: Callable[..., Any], raw_input: Any) -> dict[str, Any]:
    if raw_input is None:
        return {}
    if not isinstance(raw_input, dict):
        raise TypeError(f"the run input must be an object of the parameters of {fn.__name__}()")
    inspect.signature(fn).bind(**raw_input)
    return dict(raw_input)


def to_json(value: Any) -> Any:
    return value


def restore(value: Any, annotation: Any) -> Any:
    return value
