"""The small pieces every rendering of `piwf` uses: times and durations (written by
piwf_actors/timefmt.py, the one way every screen writes them), short ids, statuses and errors as
`rich.text.Text` (host text never goes through Rich markup), JSON output. A leaf module of cli/:
cli/render.py (runs, events) and cli/render_flow.py (waits, children) build on it."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterable
from typing import Any

from rich.table import Table
from rich.text import Text

from piwf_actors.timefmt import duration, moment, relative, when  # noqa: F401  (re-exported: cli/render.py)

TERMINAL = ("done", "failed", "cancelled")
#: Lines of a failed shell node's stderr that `piwf show` prints.
STDERR_TAIL_LINES = 20
STATUS_STYLES = {"queued": "cyan", "starting": "cyan", "running": "blue", "parked": "yellow", "done": "green",
                 "failed": "red", "cancelled": "magenta"}


# --- plain values ---------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$base64": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def to_json(value: Any, *, indent: int | None = 2) -> str:
    return json.dumps(value, indent=indent, sort_keys=indent is not None, ensure_ascii=False, default=_json_default)


def compact(value: Any, limit: int = 80) -> str:
    """One-line JSON of `value`, cut to `limit` characters."""
    if value is None:
        return ""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def request_clock(request: dict[str, Any], now: float | None = None) -> str:
    """A pending request's deadline: when it comes (`moment`), `paused (… left)` while its run is paused
    (the clock stands still: docs/protocol.md), `—` without one."""
    if request.get("paused_remaining_s") is not None:
        return f"paused ({duration(request['paused_remaining_s'])} left)"
    if request.get("deadline_at"):
        return moment(request["deadline_at"], now)
    return "—"


def answered_by(provenance: Any) -> str:
    """Who gave an accepted answer, in words, from its provenance (run.get's `answered_by`, the
    `answered_by` of an `interaction_settled` event): `person via cli`, `telegram user 42 (Ann, @ann)`,
    `timeout`, `agent session s1`. A person is named by the program that sent the answer, known from
    its client id (`piwf` and `piwf-top` name theirs) or from the embedding API."""
    if not isinstance(provenance, dict):
        return "unknown"
    kind = provenance.get("kind")
    if kind == "timeout":
        return "timeout"
    if kind == "channel":
        names = [str(provenance[key]) for key in ("name",) if provenance.get(key)]
        names += [f"@{provenance['username']}"] if provenance.get("username") else []
        label = f"{provenance.get('channel') or 'channel'} user {provenance.get('user_id')}"
        return label + (f" ({', '.join(names)})" if names else "")
    client = str(provenance.get("client_id") or "")
    if kind == "agent":
        session = provenance.get("session_id")
        return f"agent session {session}" if session else f"agent client {client or '?'}"
    if provenance.get("via") == "embedded":
        program = "embedding"
    elif provenance.get("via") == "http":
        program = f"http (token {provenance.get('token') or '?'})"
    elif client.startswith("piwf-cli-"):
        program = "cli"
    elif client.startswith("piwf-top-"):
        program = "piwf-top"
    else:
        program = f"client {client}" if client else "socket"
    return f"{'person' if kind == 'human' else kind or 'someone'} via {program}"


def run_duration(run: dict[str, Any], now: float | None = None) -> str:
    """finished_at − created_at, or how long an unfinished run has existed (`… so far`)."""
    created, finished = run.get("created_at"), run.get("finished_at")
    if not isinstance(created, (int, float)):
        return ""
    if isinstance(finished, (int, float)):
        return duration(finished - created)
    return duration((time.time() if now is None else now) - created) + " so far"


#: The ids the host makes: a kind, `_`, then at least 26 characters that end in random (or hashed) ones — a
#: run's, effect's or message's (ids.py: time, then 80 random bits), a request's (32 random hex digits), a
#: channel delivery's (`chf_…-N`). A table shows one by its end; any other id (one a client chose) in full.
_MADE_ID = re.compile(r"[a-z]+_[0-9a-z]{26,}(-[0-9]+)?")
#: How many of an id's last characters a table shows after `…`: 60 random bits of a run id (48 of a
#: request's hex), so the odds that another of a million runs shares a shown run's are about 1 in 10**12.
ID_END_CHARS = 12


def short_ids(ids: Iterable[Any], end_chars: int = ID_END_CHARS) -> dict[str, str]:
    """Each id → how a table shows it: `…` and its last `end_chars` characters (`…c3e9hbn6w0ab`), more
    when two of `ids` share those; an id of another shape in full.

    An id's start is its kind and the time it was made, which runs made together share (a fan-out's
    children share all of it), so a start unique among the rows shown may name several runs of the
    host. Its end is random: the same for an id in every table and whatever else the host holds, and
    `piwf` takes it back as shown (`piwf show …c3e9hbn6w0ab`, or without the `…`: cli/ids.py). Sorted
    by their reversed text, ids share their longest common end with a neighbour, so only neighbours are
    compared."""
    unique = {str(i) for i in ids if i}
    made = sorted((full for full in unique if _MADE_ID.fullmatch(full)), key=lambda full: full[::-1])
    short = {full: full for full in unique}
    for index, full in enumerate(made):
        need = end_chars
        for other in made[max(0, index - 1):index] + made[index + 1:index + 2]:
            common = next((n for n, (a, b) in enumerate(zip(full[::-1], other[::-1], strict=False)) if a != b),
                          min(len(full), len(other)))
            need = max(need, common + 1)
        if need < len(full) - full.index("_") - 1:  # what is left of its kind is longer than its end
            short[full] = "…" + full[-need:]
    return short


def id_column(table: Table, header: str) -> None:
    table.add_column(header, no_wrap=True, overflow="ignore")


def one_line(value: Any, style: str = "") -> Text:
    """A cell that stays one line, cut with "…" when its column must give way (the column itself is left
    wrappable, so Rich narrows it before the no_wrap id columns)."""
    return Text("" if value is None else str(value), style=style, no_wrap=True, overflow="ellipsis")


def text(value: Any, style: str = "") -> Text:
    return Text("" if value is None else str(value), style=style)


def status_text(status: Any, park_reason: Any = None) -> Text:
    label = str(status or "")
    if park_reason:
        label += f" ({park_reason})"
    return Text(label, style=STATUS_STYLES.get(str(status), ""))


def error_text(error: Any) -> Text:
    if not error:
        return Text("")
    if isinstance(error, dict):
        code, message = error.get("code"), error.get("message")
        return Text(f"{code}: {message}" if code else str(message), style="red")
    return Text(str(error), style="red")
