"""One-line display text for `piwf-top`, made from host values (pure helpers shared by the panes and the header).

Everything that comes from the host (ids, names, titles, outputs, errors,
tracebacks) is untrusted: `clean` turns control characters (ESC included)
into `�` and, for a one-line cell, line breaks into spaces; the result only
ever goes into `rich.text.Text`, never into a markup string, so `[red]` is
shown as typed. Times and durations are written by piwf_actors/timefmt.py
(as everywhere), relative to the snapshot's `now`, never to the clock.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from rich.text import Text

from piwf_actors.cli.render import STATUS_STYLES
from piwf_actors.top.model import WorkerRow

NARROW = 100  # below this width, ids are shortened and optional columns are left out
SHORT_ID = 20  # a run id in narrow panes: …tail (the random end tells runs apart; `piwf show …tail` takes it)


def clean(value: Any) -> str:
    """`value` as one line of display text: line breaks and tabs become spaces, other control characters `�`."""
    text = "" if value is None else str(value)
    out = []
    for char in text:
        if char in "\n\t\r":
            out.append(" ")
        elif unicodedata.category(char) == "Cc":
            out.append("\ufffd")
        else:
            out.append(char)
    return "".join(out)


def cell(value: Any, style: str = "") -> Text:
    """One line of untrusted text, cut with `…` when its column is narrower."""
    return Text(clean(value), style=style, no_wrap=True, overflow="ellipsis")


def line(*parts: str | tuple[str, str] | Text) -> Text:
    """A one-line Text from constant strings, (string, style) pairs and Texts; cut with `…` at the edge."""
    result = Text(no_wrap=True, overflow="ellipsis", end="\n")
    for part in parts:
        if isinstance(part, Text):
            result.append_text(part)
        elif isinstance(part, tuple):
            result.append(part[0], style=part[1])
        else:
            result.append(part)
    return result


def short(value: Any, width: int) -> str:
    """`value` cut at the front to `width` characters, `…` + its end. An id's start is its kind and the
    time it was made, which runs made together share; its end is random and tells them apart, and
    `piwf` takes it back as it is shown (`piwf show …vqyrxvjp2mvr1rtt`: cli/ids.py)."""
    text = clean(value)
    if len(text) <= width:
        return text
    return "…" + text[len(text) - (width - 1):]


def run_id_cell(value: Any, narrow: bool) -> Text:
    return Text(short(value, SHORT_ID) if narrow else clean(value), no_wrap=True, overflow="ellipsis")


def compact(value: Any, limit: int = 200) -> str:
    """One-line JSON of a host value (never raises), cut to `limit` characters."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def worker_figures(worker: WorkerRow) -> str:
    """`37.5% 50.0 MiB`; `…` for the CPU of a first sample, `-` for what could not be read."""
    return f"{'…' if worker.cpu_percent is None else f'{worker.cpu_percent:.1f}%'} {size(worker.rss_bytes)}"


def size(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def status_cell(status: Any, park_reason: Any = None) -> Text:
    label = clean(status)
    if park_reason:
        label += f" ({clean(park_reason)})"
    style = "bold white on red" if status == "parked" and park_reason == "ambiguous_effect" else \
        STATUS_STYLES.get(str(status), "")
    return Text(label, style=style, no_wrap=True, overflow="ellipsis")
