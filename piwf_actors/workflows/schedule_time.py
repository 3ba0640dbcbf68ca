"""When a schedule fires: its timing (cron or interval) and the pure step `due_fires`.

Times are float seconds since the epoch, like every time in the store. A
fire time is an exact instant produced by `Timing` alone, so the same
schedule always names the same fire by the same number (a run's id derives
from it, see `fire_run_id`).

- **Interval** (`every_s`): fires at the whole multiples of `every_s` since
  the Unix epoch (as Temporal's interval schedules do), so fire times do not
  depend on when a host started or how often the definition was reloaded;
  `every_s=3600` fires on the hour (UTC).
- **Cron** (`cron`): a 5-field expression (or 6 with seconds first)
  evaluated by cronsim in the schedule's IANA time zone, through zoneinfo.
  Across DST changes it behaves like Debian's cron, which cronsim follows: a
  daily time that falls into the hour skipped by spring-forward fires right
  after the jump (02:30 becomes 03:00), a daily time in the hour repeated by
  fall-back fires once, at its first occurrence; a job that runs every few
  minutes fires on both passes of the repeated hour (they are distinct
  instants).

`due_fires(state, now)` is what the schedule keeper does on every tick,
without a clock or a database: given the cursor (the earliest fire not yet
handled) and when the keeper began watching, it returns the fires to start
now, how many missed fires it dropped under the catch-up policy, and the new
cursor (always after `now`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from piwf_actors.canonical import canonical_json
from piwf_actors.ids import derived_id

CATCH_UP_MODES = ("latest", "skip", "all")
#: A fire not started within this long of its time counts as missed (like Quartz's misfire threshold):
#: the host was suspended or stalled, and the catch-up policy decides, as after a restart.
MISFIRE_GRACE_S = 60.0
#: At most this many fires per step, whatever happened (a bound on work, not a policy).
MAX_FIRES_PER_STEP = 100
#: Missed fires counted one by one at most this far (the count of skipped cron fires is a lower bound past it).
MAX_COUNTED = 10_000
MIN_EVERY_S = 1.0


class TimingError(ValueError):
    """A cron expression or time zone that cannot be used (one-line message)."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name`; TimingError when zoneinfo does not know it."""
    if not isinstance(name, str) or not name:
        raise TimingError(f"timezone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise TimingError(f"unknown timezone {name!r} (an IANA name such as 'Europe/Berlin' or 'UTC')") from exc


def check_cron(expression: str) -> None:
    """Raise TimingError unless cronsim accepts `expression`."""
    if not isinstance(expression, str) or not expression.strip():
        raise TimingError(f"cron must be a cron expression such as '0 3 * * *', got {expression!r}")
    try:
        CronSim(expression, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise TimingError(f"invalid cron expression {expression!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Timing:
    """When a schedule fires: exactly one of `cron` and `every_s`, and the zone cron is read in."""

    cron: str | None = None
    every_s: float | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_s is None):
            raise TimingError("give exactly one of cron= and every_s=")
        zone(self.timezone)
        if self.cron is not None:
            check_cron(self.cron)
        elif isinstance(self.every_s, bool) or not isinstance(self.every_s, (int, float)) or \
                not math.isfinite(self.every_s) or self.every_s < MIN_EVERY_S:
            raise TimingError(f"every_s must be a number of seconds >= {MIN_EVERY_S:g}, got {self.every_s!r}")

    def key(self) -> str:
        """What fire times depend on: when it changes, the cursor is computed afresh."""
        return canonical_json({"cron": self.cron, "every_s": None if self.every_s is None else float(self.every_s),
                               "timezone": self.timezone if self.cron is not None else "UTC"})

    def describe(self) -> str:
        if self.cron is not None:
            return f"cron {self.cron} ({self.timezone})"
        return f"every {self.every_s:g} s"

    # --- iteration ---------------------------------------------------------------------------

    def _cron(self, start: float, reverse: bool = False) -> Iterator[float]:
        assert self.cron is not None
        at = datetime.fromtimestamp(start, zone(self.timezone))
        try:
            for found in CronSim(self.cron, at, reverse=reverse):
                yield found.timestamp()
        except StopIteration:  # cronsim finds nothing within 50 years
            return

    def next_after(self, t: float) -> float | None:
        """The first fire time strictly after `t` (None: it never fires again)."""
        if self.every_s is not None:
            step = float(self.every_s)
            k = math.floor(t / step) + 1
            while k * step <= t:
                k += 1
            while (k - 1) * step > t:
                k -= 1
            return k * step
        # Cron fires on whole seconds: strictly after t is strictly after its whole second.
        whole = float(math.floor(t))
        for found in self._cron(whole):
            if found > t:
                return found
        return None

    def first_from(self, start: float) -> float | None:
        """The first fire time at or after `start`."""
        if self.every_s is None:
            return self.next_after(float(math.ceil(start)) - 1.0)
        step = float(self.every_s)
        k = math.ceil(start / step)
        while k * step < start:
            k += 1
        while (k - 1) * step >= start:
            k -= 1
        return k * step

    def fires_from(self, start: float, until: float, limit: int) -> list[float]:
        """Fire times t with start <= t <= until, ascending, at most `limit`."""
        found: list[float] = []
        t = self.first_from(start)
        while t is not None and t <= until and len(found) < limit:
            found.append(t)
            t = self.next_after(t)
        return found

    def last_before(self, end: float, start: float, n: int) -> list[float]:
        """The last `n` fire times t with start <= t < end, ascending."""
        if n <= 0 or end <= start:
            return []
        found: list[float] = []
        if self.every_s is not None:
            step = float(self.every_s)
            k = math.ceil(end / step) - 1
            while k * step >= end:
                k -= 1
            while len(found) < n and k * step >= start:
                found.append(k * step)
                k -= 1
        else:
            for t in self._cron(float(math.ceil(end)), reverse=True):
                if t >= end:
                    continue
                if t < start or len(found) >= n:
                    break
                found.append(t)
        return sorted(found)

    def count_between(self, start: float, end: float) -> int:
        """How many fire times t with start <= t < end (cron: counted up to MAX_COUNTED)."""
        if end <= start:
            return 0
        if self.every_s is not None:
            step = float(self.every_s)
            return max(0, math.ceil(end / step) - math.ceil(start / step))
        return len(self.fires_from(start, math.nextafter(end, -math.inf), MAX_COUNTED))


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """What `due_fires` needs of one schedule.

    `cursor`: the earliest fire time not yet handled (None: never computed,
    e.g. a new schedule or one just resumed). `online_since`: when the keeper
    that evaluates it began watching it; fires before that were missed while
    no host ran.
    """

    timing: Timing
    cursor: float | None
    online_since: float
    catch_up: str = "latest"
    max_catch_up: int = 10
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Due:
    """What to do now: start `fires` (ascending), note `skipped` missed fires, store `cursor`."""

    fires: tuple[float, ...]
    missed: tuple[float, ...]  # the subset of `fires` that are catch-ups of missed fires
    skipped: int
    cursor: float | None  # None: the schedule never fires again


def due_fires(state: ScheduleState, now: float) -> Due:
    """The fires of `state` due at `now` (a pure function; see the module docstring).

    A fire time t at or after the cursor is due when t <= now. It is on time
    when t >= online_since and now - t <= MISFIRE_GRACE_S, and then it always
    fires. The others were missed, and `catch_up` picks among them:
    `latest` the most recent one, `skip` none, `all` the most recent
    `max_catch_up`. A paused schedule fires nothing and keeps its cursor. A
    schedule without a cursor gets the first fire time after `now`.
    """
    timing = state.timing
    if state.paused:
        return Due((), (), 0, state.cursor)
    if state.cursor is None:
        return Due((), (), 0, timing.next_after(now))
    cursor = state.cursor
    if cursor > now:
        return Due((), (), 0, cursor)
    on_time_from = max(cursor, state.online_since, now - MISFIRE_GRACE_S)
    on_time = timing.fires_from(on_time_from, now, MAX_FIRES_PER_STEP) if on_time_from <= now else []
    missed_end = min(on_time_from, math.nextafter(now, math.inf))
    if state.catch_up == "skip":
        wanted = 0
    elif state.catch_up == "all":
        wanted = max(0, min(state.max_catch_up, MAX_FIRES_PER_STEP - len(on_time)))
    else:
        wanted = 1
    caught = timing.last_before(missed_end, cursor, wanted)
    missed_total = timing.count_between(cursor, missed_end)
    skipped = max(0, missed_total - len(caught))
    return Due(tuple(caught + on_time), tuple(caught), skipped, timing.next_after(now))


def fire_key(fire_time: float) -> str:
    """The key of the scheduled fire at `fire_time` (a manual trigger's key names its request instead)."""
    return f"at:{fire_time!r}"


def fire_run_id(schedule: str, key: str, fire_time: float) -> str:
    """The run id of a schedule's fire: the same (schedule, fire) always names the same run, and it has
    every run id's shape (`ids.derived_id`: the fire time leads, then a hash of the schedule and key)."""
    return derived_id("run", canonical_json(["schedule", schedule, key]), fire_time)
