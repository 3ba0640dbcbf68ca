"""The schedules line of the `piwf-top` header: each schedule and when it fires next (a pure function).

`schedules_line(schedules, now, width)` takes the `schedules` of a
`schedule.list` receipt; None when the host has none, so the header keeps its
height. Schedules soonest first (paused and unloaded ones last), each as
`name in 42s` (its next fire, relative to the snapshot's `now`), `name
paused`, `name not loaded`, or `name failing` when its last fire started no
run; what does not fit the width is counted as `+N`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from piwf_actors.timefmt import duration
from piwf_actors.top.cells import clean, line


def _until(seconds: float) -> str:
    return "due" if seconds < 0 else f"in {duration(seconds)}"


def _entry(item: dict[str, Any], now: float) -> tuple[str, str]:
    if not item.get("loaded"):
        return "not loaded", "yellow"
    if item.get("paused"):
        return "paused", "yellow"
    upcoming = item.get("next_fire_at")
    state = _until(upcoming - now) if isinstance(upcoming, (int, float)) else "-"
    return (state + " failing", "red") if item.get("last_error") else (state, "green")


def schedules_line(schedules: Sequence[dict[str, Any]], now: float, width: int) -> Text | None:
    if not schedules:
        return None

    def order(item: dict[str, Any]) -> tuple[int, float, str]:
        upcoming = item.get("next_fire_at")
        if item.get("loaded") and not item.get("paused") and isinstance(upcoming, (int, float)):
            return (0, upcoming, str(item.get("name")))
        return (1, 0.0, str(item.get("name")))

    result = line(("schedules", "bold"))
    ordered = sorted(schedules, key=order)
    for index, item in enumerate(ordered):
        state, style = _entry(item, now)
        piece = f"  {clean(item.get('name'))} "
        left = len(ordered) - index - 1
        room = width - len(result.plain) - (len(f"  +{left}") if left else 0)
        if len(piece) + len(state) > room:
            result.append(f"  +{len(ordered) - index}", style="dim")
            break
        result.append(piece)
        result.append(state, style=style)
    return result
