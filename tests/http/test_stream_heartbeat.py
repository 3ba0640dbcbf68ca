"""The door's one heartbeat for all its event streams (http/streams.py, `Heartbeat`): every interval each
open stream is woken once, all from one timer, and no timer runs while no stream is open."""

from __future__ import annotations

import asyncio

from piwf_actors.http.streams import Heartbeat

INTERVAL_S = 0.02
DEADLINE_S = 10.0


class Stream:
    """A stream as the heartbeat sees it: how often it was woken; `order` is every stream's beats in turn."""

    def __init__(self, name: str, order: list[str]) -> None:
        self.name = name
        self.order = order
        self.beats = 0
        self.woken = asyncio.Event()

    def beat(self) -> None:
        self.beats += 1
        self.order.append(self.name)
        self.woken.set()

    async def next_beat(self) -> None:
        self.woken.clear()
        await asyncio.wait_for(self.woken.wait(), DEADLINE_S)


def test_one_timer_wakes_every_open_stream_and_stops_with_the_last() -> None:
    async def scenario() -> None:
        heartbeat = Heartbeat(INTERVAL_S)
        assert not heartbeat.ticking
        order: list[str] = []
        streams = [Stream(name, order) for name in "abc"]
        for stream in streams:
            heartbeat.join(stream)
        assert heartbeat.ticking and len(heartbeat) == 3
        for _ in range(2):
            await asyncio.gather(*(stream.next_beat() for stream in streams))
        # Each beat woke every stream, one after the other in one callback: the beats come in threes.
        assert len(order) >= 6 and len(order) % 3 == 0, order
        assert all(sorted(order[i:i + 3]) == ["a", "b", "c"] for i in range(0, len(order), 3)), order

        heartbeat.leave(streams[0])
        before = streams[0].beats
        await asyncio.gather(streams[1].next_beat(), streams[2].next_beat())
        assert streams[0].beats == before  # a stream that left is not woken again
        heartbeat.leave(streams[1])
        heartbeat.leave(streams[2])
        heartbeat.leave(streams[2])  # leaving twice (a stream's end after the door's stop) is harmless
        assert not heartbeat.ticking and len(heartbeat) == 0

        heartbeat.join(streams[1])  # a new stream starts the timer again
        assert heartbeat.ticking
        await streams[1].next_beat()
        heartbeat.leave(streams[1])
        assert not heartbeat.ticking

    asyncio.run(scenario())
