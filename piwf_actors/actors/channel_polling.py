"""`PollWatch`: how a channel adapter's poller fares, and what the adapter tells its manager about it.

The poller thread (`actors/channel_io.py`) tells the adapter every poll's
end; this decides what that means for the profile, without I/O or threads
(the time is given): the problem to report (`ChannelHealth`, told only when
it changed), and whether a run of 409 Conflicts is a restart (the previous
host's long poll is still open, it ends within a poll timeout) or another
program reading the same bot's updates, which refuses the profile
(`ChannelRefused`) until a reload. The adapter (`actors/channel.py`) tells
the manager what this returns and stops itself on a refusal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from piwf_actors.actors.channel_io import PollFailed

# The adapter's log: these lines are its poller's.
log = logging.getLogger("piwf_actors.actors.channel")


@dataclass(frozen=True, slots=True)
class ChannelHealth:
    """Told to the manager: what is wrong with the profile now (None: nothing)."""

    profile: str
    problem: str | None


@dataclass(frozen=True, slots=True)
class ChannelRefused:
    """Told to the manager before the adapter stops itself: the profile must not run (until a reload)."""

    profile: str
    reason: str


class PollWatch:
    """One profile's polls: made in the adapter's `__init__` (the manager's thread), used in the adapter's
    thread. `now` is `time.monotonic()` seconds."""

    def __init__(self, profile: str, *, poll_timeout_s: float, conflict_window_s: float | None = None) -> None:
        self._profile = profile
        # A previous poller's long poll (a host that just stopped) ends within a poll timeout;
        # conflicts lasting longer mean another program polls the same bot.
        self.conflict_window_s = (2 * poll_timeout_s + 5.0) if conflict_window_s is None else conflict_window_s
        self.problem: str | None = None
        self._health: str | None = None  # the problem the manager was last told
        self._conflict_since: float | None = None  # the first 409 of a run of them
        self._conflict_last = 0.0

    def _report(self) -> ChannelHealth | None:
        """What to tell the manager: what is wrong now, when that changed."""
        if self.problem == self._health:
            return None
        self._health = self.problem
        return ChannelHealth(self._profile, self.problem)

    def polled(self) -> ChannelHealth | None:
        """A poll brought updates (or none): polling works."""
        if self.problem is not None:
            log.info("channel %s: polling works again", self._profile)
        self.problem = None
        return self._report()

    def failed(self, message: PollFailed, now: float) -> ChannelHealth | ChannelRefused | None:
        """A poll failed: what to tell the manager, if anything (on `ChannelRefused` the adapter stops)."""
        if not message.taken:
            problem = f"cannot read updates: {message.error}"
            if problem != self.problem:
                log.warning("channel %s: polling failed: %s", self._profile, message.error)
            self.problem = problem
            return self._report()
        # Polls that succeed in between do not end a run of conflicts (Telegram answers the newer of
        # two pollers and cuts the older off, so both get through now and then); a whole window
        # without one does.
        if self._conflict_since is None or now - self._conflict_last > self.conflict_window_s:
            # Expected for a while after a restart: the previous poller's long poll is still open.
            self._conflict_since = now
            self._conflict_last = now
            # Once per run of conflicts, at INFO: this is what every restart and takeover looks like.
            log.info("channel %s: another poller still holds the bot's updates (409); retrying (a previous "
                     "host's long poll ends within its timeout; lasting %.0f s, it is refused as a second host)",
                     self._profile, self.conflict_window_s)
            return None
        self._conflict_last = now
        if now - self._conflict_since >= self.conflict_window_s:
            reason = (f"another program reads this bot's updates (Telegram answered 409 Conflict for "
                      f"{now - self._conflict_since:.0f} s): one bot serves one host. Give this profile a bot "
                      "of its own or stop the other, then run `piwf channel reload`")
            log.error("channel %s refused: %s", self._profile, reason)
            return ChannelRefused(self._profile, reason)
        return None
