"""The three I/O threads of a channel adapter, and what they tell it.

The adapter actor (`actors/channel.py`) never blocks on the network; these
threads do, each on its own so that none waits behind another:

- the **sender** makes one attempt at a time (a delivery, a prompt, a
  notification, an edit) and tells the actor how it ended (`JobDone`);
- the **acknowledger** answers taps and replies (`notice`): best effort, and
  never behind a send that waits out a service's back-off;
- the **poller** waits for updates from the cursor the actor gives it
  (`poll_from`), tells them (`Polled`) or the failure (`PollFailed`), and
  asks again only when the actor says so — after the batch is written.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import safe_tell
from piwf_actors.channels.base import (
    ChannelError,
    ChannelIO,
    Choice,
    DeliveryUnknown,
    Event,
    MessageRef,
    NotDelivered,
    Presented,
    Reply,
    StreamTaken,
    Tap,
)

log = logging.getLogger(__name__)

#: A poll that failed is asked again after this pause, doubling up to POLL_PAUSE_MAX_S.
POLL_PAUSE_S = 1.0
POLL_PAUSE_MAX_S = 30.0


@dataclass(frozen=True, slots=True)
class Job:
    """One attempt for the sender thread (kind: present | ask | announce | settle)."""

    kind: str
    chat_id: str
    effect: dict[str, Any]  # {effect_id, attempt, message_id} of the reservation
    presented: Presented | None = None
    choice: Choice | None = None
    user_id: str = ""
    ref: MessageRef | None = None
    text: str = ""


@dataclass(frozen=True, slots=True)
class JobDone:
    job: Job
    outcome: str  # applied | failed | ambiguous
    result: dict[str, Any] | None
    error: str | None
    retry_after: float | None = None
    moved_to: str | None = None


@dataclass(frozen=True, slots=True)
class Polled:
    events: list[Event]


@dataclass(frozen=True, slots=True)
class PollFailed:
    error: str
    taken: bool  # another program reads this bot's updates (StreamTaken)


class ChannelThreads:
    """Starts, feeds and stops the three threads of one adapter."""

    def __init__(self, name: str, io: ChannelIO, owner: pykka.ActorRef[Any], *, poll_timeout_s: float,
                 lease_expires_at: Callable[[], float | None]) -> None:
        self._name = name
        self._io = io
        self._owner = owner
        self._poll_timeout_s = poll_timeout_s
        self._lease_expires_at = lease_expires_at
        self._halt = threading.Event()
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._notices: queue.SimpleQueue[tuple[Tap | Reply, str] | None] = queue.SimpleQueue()
        self._poll_go = threading.Event()
        self._poll_cursor = ""  # set by the first poll_from, before the poller is let go
        self._poll_delay = 0.0
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for target, role in ((self._send_loop, "send"), (self._notice_loop, "ack"), (self._poll_loop, "poll")):
            thread = threading.Thread(target=target, name=f"channel-{self._name}-{role}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._halt.set()
        self._poll_go.set()
        self._jobs.put(None)
        self._notices.put(None)
        self._io.abort()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._threads = []

    def send(self, job: Job) -> None:
        self._jobs.put(job)

    def notice(self, event: Tap | Reply, text: str) -> None:
        self._notices.put((event, text))

    def poll_from(self, cursor: str, delay: float = 0.0) -> None:
        """Let the poller ask for updates from `cursor`, after `delay` seconds."""
        self._poll_cursor, self._poll_delay = cursor, delay
        self._poll_go.set()

    # --- the threads ---------------------------------------------------------------------

    def _send_loop(self) -> None:
        while not self._halt.is_set():
            job = self._jobs.get()
            if job is None or self._halt.is_set():
                return
            if not safe_tell(self._owner, self._attempt(job)):
                return

    def _attempt(self, job: Job) -> JobDone:
        expires_at = self._lease_expires_at()
        if expires_at is not None and time.time() >= expires_at:
            # The reservation was committed under the lease, but the lease has run out since (the host
            # was paused): another host may own this delivery now. Surely not sent; the settle that
            # follows is refused by the fence, and the host stops once its lease actor notices.
            return JobDone(job, "failed", None, "not sent: the host's lease has run out")
        io = self._io
        try:
            if job.kind == "present":
                assert job.presented is not None
                result: dict[str, Any] | None = io.present(job.chat_id, job.presented).to_wire()
            elif job.kind == "ask":
                assert job.presented is not None and job.choice is not None
                result = io.ask_text(job.chat_id, job.presented, job.choice, job.user_id).to_wire()
            elif job.kind == "announce":
                result = io.announce(job.chat_id, job.text).to_wire()
            else:
                assert job.ref is not None
                io.settle(job.ref, job.text)
                result = job.ref.to_wire()
        except NotDelivered as exc:
            return JobDone(job, "failed", None, exc.one_line(500), exc.retry_after, exc.moved_to)
        except DeliveryUnknown as exc:
            return JobDone(job, "ambiguous", None, exc.one_line(500))
        except Exception as exc:  # anything unexpected: we cannot know whether it happened
            # The type only: a channel module's own exception text could carry what it must not log.
            log.error("channel %s: %s attempt raised %s", self._name, job.kind, type(exc).__name__)
            return JobDone(job, "ambiguous", None, f"the attempt raised {type(exc).__name__}")
        return JobDone(job, "applied", result, None)

    def _notice_loop(self) -> None:
        while not self._halt.is_set():
            item = self._notices.get()
            if item is None or self._halt.is_set():
                return
            event, text = item
            try:
                self._io.notice(event, text)
            except ChannelError as exc:
                log.info("channel %s: notice not shown: %s", self._name, exc.one_line())
            except Exception as exc:
                log.warning("channel %s: notice raised %s", self._name, type(exc).__name__)

    def _poll_loop(self) -> None:
        """Fetch updates from the cursor the actor gave, hand them over, wait for the next go.
        Errors back off (1 s doubling to 30 s, or what the service asks)."""
        pause = POLL_PAUSE_S
        while not self._halt.is_set():
            self._poll_go.wait()
            if self._halt.is_set():
                return
            self._poll_go.clear()
            if self._poll_delay and self._halt.wait(self._poll_delay):
                return
            try:
                result = self._io.poll(self._poll_cursor, self._poll_timeout_s)
            except Exception as exc:  # a channel module's bug must not end the poller in silence
                if self._halt.is_set():
                    return
                taken = isinstance(exc, StreamTaken)
                # A ChannelError's text is the module's own, made safe; anything else: its type only.
                error = exc.one_line(300) if isinstance(exc, ChannelError) else f"poll raised {type(exc).__name__}"
                safe_tell(self._owner, PollFailed(error, taken))
                if self._halt.wait(max(min(pause, 5.0) if taken else pause, getattr(exc, "retry_after", None) or 0.0)):
                    return
                pause = min(pause * 2, POLL_PAUSE_MAX_S)
                self._poll_go.set()
                continue
            pause = POLL_PAUSE_S
            if result.retry_after and self._halt.wait(result.retry_after):
                return
            if not safe_tell(self._owner, Polled(result.events)):
                return
