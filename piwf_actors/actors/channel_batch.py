"""A batch of updates read in the order the service gave it: which updates are new, and where the ids restarted.

A channel's updates carry increasing ids, and a poll's offset (the cursor:
the last update id handled + 1) confirms to the service every update below
it, which it then forgets. The ids can restart lower (Telegram after a week
without updates, a local Bot API server that lost its state), and a poll
from beyond every id the service gave out is then answered from the head of
its queue. Reading a batch sorted by id would mix two generations; it is
read in the service's order instead:

- Updates this adapter handled and the service serves again are passed
  over. The service keeps an update until an offset passes it, so updates
  read just before a restart, if their confirmation had not reached it, stay
  at the head of its queue, and no offset in the new, lower ids passes them.
  `Served` remembers, in the service's order, what was handled and may still
  be held.
- The rest is split where the ids drop (an id not above the one before it).
  The first part belongs to the cursor's generation (its ids below the
  cursor were applied before and are passed over); each later part starts a
  new generation. So does a first part that starts below the cursor with no
  drop after it: that is how a restart looks when nothing older is left.
  Before a new generation's first update the cursor is re-based to it
  (`Restart`).

Pure: no I/O. The adapter (`actors/channel.py`) owns one `Served` and calls
it from its own thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from piwf_actors.channels.base import Event


@dataclass(frozen=True, slots=True)
class Restart:
    """The service's ids restarted: re-base the cursor to `update_id` (a new generation) before the
    updates that follow it."""

    update_id: int


class Served:
    """The ids of the updates the adapter handled that the service may still hold, in its order."""

    def __init__(self) -> None:
        self._ids: list[int] = []

    def read(self, events: Sequence[Event], cursor: int) -> list[Event | Restart]:
        """The work of one batch, in order: its updates, less those handled before that the service
        served again, with a `Restart` before each new generation's first. `cursor` is where the
        adapter stands now. The updates passed over here stay remembered; the adapter reports each
        update it goes on to handle (`handled`)."""
        if not events:
            return []  # a long poll that timed out says nothing about what the service holds
        # What the service still holds of what was handled comes first in the batch, in the same
        # order (an offset makes the service forget ids below it, never change their order).
        position = again = 0
        for event in events:
            try:
                position = self._ids.index(event.update_id, position) + 1
            except ValueError:
                break
            again += 1
        self._ids = [event.update_id for event in events[:again]]
        fresh = events[again:]
        drops = {index for index in range(1, len(fresh)) if fresh[index].update_id <= fresh[index - 1].update_id}
        work: list[Event | Restart] = []
        for index, event in enumerate(fresh):
            if index in drops or (index == 0 and not drops and event.update_id < cursor):
                work.append(Restart(event.update_id))
            work.append(event)
        return work

    def handled(self, update_id: int) -> None:
        """The adapter is done with this update (applied it, or passed over it): the service may
        serve it again until an offset past it reaches the service."""
        self._ids.append(update_id)
