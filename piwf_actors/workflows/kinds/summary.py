"""Pieces of a node's one-line summary that several kinds' `describe` share.

A summary is made of a node's literal options only: an option computed at run time (a callable of
ctx) is named as computed, never called. `graph.summary` joins a kind's parts with ` · ` and cuts the
line.
"""

from __future__ import annotations

from typing import Any

from piwf_actors.timefmt import duration


def text_of(value: Any, computed: str = "") -> str:
    """A literal option as text; one computed at run time (a callable) as `computed`."""
    if callable(value):
        return computed
    return "" if value is None else str(value)


def function_name(value: Any) -> str:
    """`name()` of a function the node calls; "" for a lambda or a callable without a name."""
    name = getattr(value, "__name__", "")
    return "" if not name or name == "<lambda>" else f"{name}()"


def seconds(value: Any) -> str:
    """A literal time as a duration; one computed from the run (a callable) as `(computed)`."""
    return "(computed)" if callable(value) else duration(value)


def timeout_part(spec: Any) -> list[str]:
    """`timeout 5m` when the node waits with a deadline (`timeout_s`), else nothing."""
    return [] if spec.timeout_s is None else [f"timeout {seconds(spec.timeout_s)}"]
