"""The writer's change notices: who follows the commits, and which tables each follows.

After every commit that changed something the `DatabaseWriter` (actors/writer.py)
tells a `ChangeNotice` (the commit's seq, the tables and runs it changed) to the
actors that subscribed; this module holds the messages that subscribe and the
`ChangeFeed` the writer keeps them in. The messages are re-exported by
`actors/writer.py`, where the actors that follow commits import them from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import safe_tell
from piwf_actors.store.requests import ChangeNotice


@dataclass(frozen=True, slots=True)
class Subscribe:
    """Tell `subscriber` a ChangeNotice after every commit that changed something, or with `tables`
    only after those that changed one of them: a notice is a thread hand-off, and most commits
    (a node's result) are news to few subscribers."""

    subscriber: pykka.ActorRef[Any]
    tables: frozenset[str] | None = None
    #: Tell the subscriber `Subscribed` once it is registered: every commit after that reaches it. (The
    #: writer registers it when it gets to this message: the batches of a Drain ahead of it take every
    #: command queued meanwhile, also one sent after this message.)
    ack: bool = False


@dataclass(frozen=True, slots=True)
class Subscribed:
    """Told to a subscriber that asked for it: from now on every commit's notice reaches it, so
    what it reads of the database now and the notices it gets after leave no gap between them."""


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    subscriber: pykka.ActorRef[Any]


class ChangeFeed:
    """The subscribers of one writer, each with the tables it follows (None: all). Used in the
    writer's thread only."""

    def __init__(self) -> None:
        self._subscribers: dict[pykka.ActorRef[Any], frozenset[str] | None] = {}  # → the tables it follows

    def subscribe(self, message: Subscribe) -> None:
        self._subscribers[message.subscriber] = message.tables
        if message.ack:
            safe_tell(message.subscriber, Subscribed())

    def unsubscribe(self, message: Unsubscribe) -> None:
        self._subscribers.pop(message.subscriber, None)

    def publish(self, notice: ChangeNotice) -> None:
        """Tell `notice` to every subscriber that follows one of its tables; forget the ones that stopped."""
        changed = notice.tables
        for subscriber, tables in list(self._subscribers.items()):
            if tables is not None and tables.isdisjoint(changed):
                continue
            if not safe_tell(subscriber, notice):
                del self._subscribers[subscriber]
