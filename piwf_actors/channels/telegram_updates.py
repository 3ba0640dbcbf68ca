"""Telegram's update order: what its cursor means, and a batch of updates read in the order the service gave it.

The cursor is where a bot's update stream stands, as text the actor and the
store keep and only this module reads (`UPDATE_ORDER`, the `UpdateOrder` of
`channels/base.py`): the decimal text of the next update id to ask for,
which is getUpdates' ``offset`` (the last update id handled + 1). An offset
confirms to the service every update below it, which it then forgets. The ids can restart lower (Telegram after a week
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

Pure: no I/O. The adapter (`actors/channel.py`) owns one `Served` (the
`BatchReader` of `UPDATE_ORDER.reader()`) and calls it from its own thread
only. Update ids are the decimal text of Telegram's integers (`telegram.py`
makes them so); any other text sorts as no update at all (-1).
"""

from __future__ import annotations

from collections.abc import Sequence

from piwf_actors.channels.base import Event, Restart


def _number(text: str) -> int:
    """An update id or a cursor as Telegram's integer (-1 for text that is not one)."""
    try:
        return int(text)
    except ValueError:
        return -1


class TelegramOrder:
    """`UpdateOrder` for Telegram: the cursor is the next update id to ask for (getUpdates' offset)."""

    start = "0"

    def confirms(self, cursor: str, update_id: str) -> bool:
        return _number(update_id) < _number(cursor)

    def past(self, cursor: str, update_id: str) -> str:
        return str(max(_number(cursor), _number(update_id) + 1))

    def later(self, cursor: str, other: str) -> str:
        return cursor if _number(cursor) >= _number(other) else other

    def reader(self) -> Served:
        return Served()


UPDATE_ORDER = TelegramOrder()


class Served:
    """The ids of the updates the adapter handled that the service may still hold, in its order."""

    def __init__(self) -> None:
        self._ids: list[int] = []

    def read(self, events: Sequence[Event], cursor: str) -> list[Event | Restart]:
        """The work of one batch, in order: its updates, less those handled before that the service
        served again, with a `Restart` before each new generation's first. `cursor` is where the
        adapter stands now. The updates passed over here stay remembered; the adapter reports each
        update it goes on to handle (`handled`)."""
        if not events:
            return []  # a long poll that timed out says nothing about what the service holds
        # What the service still holds of what was handled comes first in the batch, in the same
        # order (an offset makes the service forget ids below it, never change their order).
        ids = [_number(event.update_id) for event in events]
        position = again = 0
        for update_id in ids:
            try:
                position = self._ids.index(update_id, position) + 1
            except ValueError:
                break
            again += 1
        self._ids = ids[:again]
        fresh, fresh_ids = events[again:], ids[again:]
        drops = {index for index in range(1, len(fresh)) if fresh_ids[index] <= fresh_ids[index - 1]}
        work: list[Event | Restart] = []
        for index, event in enumerate(fresh):
            if index in drops or (index == 0 and not drops and fresh_ids[index] < _number(cursor)):
                work.append(Restart(str(fresh_ids[index])))  # the cursor from which this update is new
            work.append(event)
        return work

    def handled(self, update_id: str) -> None:
        """The adapter is done with this update (applied it, or passed over it): the service may
        serve it again until an offset past it reaches the service."""
        self._ids.append(_number(update_id))
