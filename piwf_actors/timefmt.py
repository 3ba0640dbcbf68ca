"""Times and durations in words, the one way every screen writes them (`piwf`, `piwf-top`, `piwf graph`,
the test kit's messages). A leaf module: it imports nothing of the package.

- `duration(s)`: `450ms`, `2.4s`, `18s`, `3m12s`, `2h05m`, `3d04h`, `over 100 years`;
- `relative(ts, now)`: `in 18s`, `3m12s ago`, `now`;
- `when(ts)`: `2026-12-02 16:40:05` (local time); `clock_time(ts, now)`: `16:40:05`, with the date
  when it is not within the next 20 hours; `moment(ts, now)`: `2026-12-02 16:40:05 UTC (in 18s)`.

Every figure is cut toward zero, never rounded up: a deadline 599.7 s away is `in 9m59s`, not a ten
minutes it has not reached, and a run that took 59.97 s took `59s`.
"""

from __future__ import annotations

import time

#: From this long on a duration is written `over 100 years`.
CENTURY_S = 100 * 365.25 * 86400


def duration(seconds: float | None) -> str:
    """`450ms`, `2.4s` (tenths below ten seconds, `2s` for a whole one), `18s`, `3m12s`, `2h05m`,
    `3d04h`; `""` for None, `0s` for nothing or less (a deadline already passed has nothing left)."""
    if seconds is None:
        return ""
    seconds = float(seconds)
    if seconds != seconds:  # NaN: not a duration
        return ""
    if seconds <= 0:
        return "0s"
    if seconds >= CENTURY_S:  # (a definition refuses longer ones); never a 300-digit day count
        return "over 100 years"
    if seconds < 1:
        return f"{int(seconds * 1000 + 1e-6)}ms"
    if seconds < 10:
        tenths = int(seconds * 10 + 1e-6)  # + a hair: 2.3 * 10 is 22.999…
        return f"{tenths // 10}s" if tenths % 10 == 0 else f"{tenths // 10}.{tenths % 10}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 1:
        return f"{secs}s"
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def relative(ts: float | None, now: float | None = None, *, suffix: bool = True) -> str:
    """`in 18s` / `3m12s ago` from `now` (default: the clock), `now` within a millisecond; `""` without a
    time. Without `suffix` a past time is just how long ago it was (`3m12s`: an age column)."""
    if not isinstance(ts, (int, float)) or not ts:
        return ""
    delta = ts - (time.time() if now is None else now)
    if abs(delta) < 0.001:
        return "now" if suffix else "0s"
    if delta > 0:
        return f"in {duration(delta)}"
    return f"{duration(-delta)} ago" if suffix else duration(-delta)


def when(ts: float | None, *, precise: bool = False) -> str:
    """`2026-12-02 16:40:05` (local time; `.123` milliseconds added when `precise`); `""` without a time."""
    if not ts:
        return ""
    try:
        base = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return str(ts)
    return f"{base}.{int((ts % 1) * 1000):03d}" if precise else base


def clock_time(ts: float, now: float) -> str:
    """`14:03:00` (local time); with the date when it is not within the next 20 hours."""
    shown = "%H:%M:%S" if 0 <= ts - now < 20 * 3600 else "%Y-%m-%d %H:%M:%S"
    try:
        return time.strftime(shown, time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return str(ts)


def moment(ts: float | None, now: float | None = None) -> str:
    """A deadline or wake-up time as people read it: local time with its zone, and how far it is:
    `2026-12-02 16:40:05 UTC (in 18s)` / `(18s ago)`."""
    if not ts:
        return ""
    try:
        zone = time.strftime("%Z", time.localtime(ts))
    except (OverflowError, OSError, ValueError):
        return str(ts)
    return f"{when(ts)} {zone} ({relative(ts, now)})"
