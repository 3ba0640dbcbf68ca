"""`ChannelAdapter`: one configured channel profile, delivering decisions and taking answers.

The actor owns what is durable and decided; its channel module (`ChannelIO`,
e.g. `channels/telegram.py`) only does the I/O, on three threads the actor
owns (`actors/channel_io.py`): a sender that makes one attempt at a time, an
acknowledger for taps and replies, and a poller that waits for updates. They
tell the actor what happened; the actor never blocks on the network.

Delivery, one message at a time (`actors/channel_plan.py` picks it, the
adapter's `Deliveries` in `actors/channel_delivery.py` carries it out): an open
decision (or a notification) whose audience routes to the profile, not yet
sent to an allowed chat, is reserved (`channel.effect_reserve` commits it
`applying`), then sent; the receipt settles it (`channel.effect_settle`):
`applied` with the message reference, `failed` when surely not sent — tried
again with back-off while the decision is open (a notification: a day), at
once in the new chat when the chat moved — or `ambiguous`, never sent again
without a person. When the decision is settled (answered anywhere, timed
out, cancelled) each delivered message is edited to show the outcome
without buttons.

Answers, one update at a time in the service's order: a tap on a button or
a reply to a text prompt is accepted only from an allowed user in an allowed
chat and for the current copy of the request's current revision;
`channel.answer` applies it and moves the cursor past the update in one
transaction. Every tap and every reply to a prompt is answered. The poller
asks for the next updates only after the batch is written, from the stored
cursor (which confirms them); where the ids restart, the cursor is re-based
(`store/commands/channel_answers.py`). The cursor and every id are opaque
text here: which updates a cursor confirms, where it moves past one and where
the ids restarted, only the channel module's `UpdateOrder` says
(Telegram's: `channels/telegram_updates.py`).

Supervised by the `ChannelManager` (one-for-one): a failure stops only this
profile, which the manager starts again under a new adapter epoch; that
start marks whatever this one left `applying` as ambiguous. A bot whose
updates another program keeps reading is refused (`ChannelRefused`) and
not started again until a reload; the adapter's `PollWatch`
(`actors/channel_polling.py`) tells that from a restart, and keeps the
health the manager is told (`ChannelHealth`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.channel_delivery import Deliveries
from piwf_actors.actors.channel_io import ChannelThreads, Job, JobDone, Polled, PollFailed
from piwf_actors.actors.channel_polling import ChannelHealth, ChannelRefused, PollWatch
from piwf_actors.actors.channel_updates import Prompt, read_update
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.channels.base import ChannelError, ChannelIO, Event, Reply, Restart, Tap, UpdateOrder
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: Tables whose changes may mean work for a channel. Not session_message: every run ends with one (notify: next tick).
_WATCHED = frozenset({"interactive_request", "interactive_submission", "channel_effect"})
#: Refusals of an update's write that pass with time (the update is read again until written).
_TRANSIENT_REFUSALS = frozenset({"disk_full", "read_only", "store_error", "store_refused", "writer_stopped",
                                 "stale_epoch", "lease_expired", "lease_lost"})
#: Writes of one update refused this many times in a row for anything else: it is passed over.
_PASS_OVER_AFTER = 3


@dataclass(frozen=True, slots=True)
class ChannelTick:
    pass


class ChannelAdapter(CoreActor):
    actor_name = "channel"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, profile: ChannelProfile,
                 open_io: Callable[[], ChannelIO], updates: UpdateOrder, adapter_epoch: str, start_reason: str,
                 manager: pykka.ActorRef[Any] | None, stream: str = "", poll_timeout_s: float = 25.0,
                 tick_s: float = 1.0, text_limit: int = 4096, conflict_window_s: float | None = None) -> None:
        """Runs in the manager's thread: stores arguments only."""
        super().__init__(manager)
        self.actor_name = f"channel {profile.profile}"
        self._writer = writer
        self._database = database
        self._profile = profile
        self._open_io = open_io
        self._updates = updates  # the only reader of the cursor and the update ids' order
        self._epoch = adapter_epoch
        self._start_reason = start_reason
        self._stream = stream or f"profile:{profile.profile}"
        self._poll_timeout_s = poll_timeout_s
        self._tick_s = tick_s
        self._text_limit = text_limit
        self._reader: StoreReader | None = None
        self._io: ChannelIO | None = None
        self._threads: ChannelThreads | None = None
        self._ticker: Ticker | None = None
        self._ready = False
        self._deliveries = Deliveries(profile, self._command, text_limit=text_limit)
        self._update_failures: tuple[str | None, int] = (None, 0)  # (update id, writes of it refused in a row)
        self._reply_waits = False  # a reply waits for a replyable message's receipt (it may answer that message)
        self._cursor = updates.start
        self._stored_cursor = updates.start  # the cursor as the database has it
        self._moves: dict[str, str] = {}
        self._served = updates.reader()  # what the service may serve again, where its ids restart
        self._events: deque[Event | Restart] = deque()
        self._applying_event = False
        self._batch_idle = False  # the current batch had updates and moved the cursor past none
        self._polls = PollWatch(profile.profile, poll_timeout_s=poll_timeout_s, conflict_window_s=conflict_window_s)
        self._pending_prompt: Prompt | None = None
        self._pending_event: tuple[Event, str] | None = None  # the update whose write is on its way

    # --- lifecycle -------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the adapter's thread: opens its reader and I/O, then takes over the profile."""
        self._reader = StoreReader(self._database)
        self._io = self._open_io()
        self._command("channel.adapter_start", {"reason": self._start_reason}, "start")

    def release_resources(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        if self._threads is not None:
            self._threads.stop()
            self._threads = None
        elif self._io is not None:
            self._io.abort()
        if self._io is not None:
            self._io.close()
            self._io = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def handlers(self) -> dict[type, Callable[[Any], Any]]:
        return {WriteResult: self._written, ChangeNotice: self._changed, ChannelTick: self._tick,
                JobDone: self._job_done, Polled: self._polled, PollFailed: self._poll_failed}

    def _command(self, name: str, args: dict[str, Any], correlation: str) -> None:
        args = {"profile": self._profile.profile, "adapter_epoch": self._epoch, "stream": self._stream,
                "channel": self._profile.channel_type, **args}
        self._writer.submit(WriteCommand(name, args, correlation_id=correlation), self.actor_ref)

    def _started(self, result: WriteResult) -> None:
        if not result.ok:
            raise ChannelError(f"cannot take over profile {self._profile.profile}: {result.error}")
        stored = result.value["cursor"]  # None: the stream was never read
        self._cursor = self._stored_cursor = self._updates.start if stored is None else str(stored)
        self._moves = {str(chat): str(moved) for chat, moved in (result.value.get("moves") or {}).items()}
        if result.value["ambiguous"]:
            log.warning("channel %s: deliveries left unsettled are now ambiguous (%s): %s", self._profile.profile,
                        self._start_reason, ", ".join(result.value["ambiguous"]))
        assert self._io is not None
        self._threads = ChannelThreads(self._profile.profile, self._io, self.actor_ref,
                                       poll_timeout_s=self._poll_timeout_s,
                                       lease_expires_at=lambda: self._writer.lease_expires_at)
        self._threads.start()
        self._writer.ref.tell(Subscribe(self.actor_ref, _WATCHED))
        self._ticker = Ticker(self.actor_ref, ChannelTick(), self._tick_s, f"channel-{self._profile.profile}").start()
        self._ready = True
        self._threads.poll_from(self._cursor)
        log.info("channel %s started (cursor %s, generation %d)", self._profile.profile, self._cursor,
                 int(result.value["generation"]))
        self._evaluate()

    # --- what to deliver or settle -------------------------------------------------------------

    def _changed(self, notice: ChangeNotice) -> None:
        if _WATCHED.intersection(notice.tables):
            self._evaluate()

    def _tick(self, _message: ChannelTick) -> None:
        self._deliveries.resubmit_receipts()
        self._evaluate()

    def _evaluate(self) -> None:
        """Start the next attempt, if any is due and none is in flight."""
        if self._ready:
            assert self._reader is not None
            self._deliveries.start_next(self._reader, self._moves)

    def _reserved(self, result: WriteResult) -> None:
        assert self._threads is not None
        self._deliveries.reserved(result, self._threads)

    def _job_done(self, done: JobDone) -> None:
        self._deliveries.sent(done, self._moves)

    def _settled(self, result: WriteResult) -> None:
        settled = self._deliveries.settled(result)
        if settled == "kept":
            return
        if settled == "replyable" and self._reply_waits:
            self._reply_waits = self._applying_event = False
            self._next_event()
        self._evaluate()

    # --- answers -------------------------------------------------------------------------------

    def _polled(self, message: Polled) -> None:
        self._tell_manager(self._polls.polled())
        self._events.extend(self._served.read(message.events, self._cursor))
        self._batch_idle = bool(message.events)
        self._next_event()

    def _poll_failed(self, message: PollFailed) -> None:
        told = self._polls.failed(message, time.monotonic())
        self._tell_manager(told)
        if isinstance(told, ChannelRefused):  # another program reads this bot's updates
            self._ready = False
            self.actor_ref.stop(block=False)

    def _tell_manager(self, message: ChannelHealth | ChannelRefused | None) -> None:
        if message is not None:
            safe_tell(self._supervisor, message)

    def _next_event(self) -> None:
        """Apply queued events one at a time; when none is left, let the poller go on."""
        while self._events and not self._applying_event:
            event = self._events.popleft()
            if isinstance(event, Restart):  # re-based before the new generation's updates; the result goes on
                log.warning("channel %s: the service's update ids restarted (%s, below the cursor %s): "
                            "re-basing the cursor", self._profile.profile, event.cursor, self._cursor)
                self._applying_event = True
                self._command("channel.cursor_rebase", {"cursor": event.cursor, "expected": self._stored_cursor}, "rebase")
                return
            if self._updates.confirms(self._cursor, event.update_id):
                self._served.handled(event.update_id)  # applied before
                continue
            try:
                waits = self._handle(event)
            except Exception:
                # A bug must not make one update stop the channel again after every restart: it is
                # answered, logged and passed over.
                log.exception("channel %s: update %s could not be handled; passing over it", self._profile.profile,
                              event.update_id)
                if isinstance(event, Tap | Reply):
                    self._notice(event, "This could not be handled (see the host's log).")
                waits = False
            if waits:
                self._applying_event = True  # a write is on its way; its result continues the loop
                return
            self._done_with(event)
        if not self._events and not self._applying_event:
            assert self._threads is not None
            if self._updates.later(self._stored_cursor, self._cursor) != self._stored_cursor:
                self._command("channel.cursor", {"cursor": self._cursor}, "cursor")
            else:
                # A batch that moved nothing (only updates applied before) must not become a hot loop.
                self._threads.poll_from(self._cursor, 1.0 if self._batch_idle else 0.0)

    def _done_with(self, event: Event, *, stored: bool = False) -> None:
        """The update is handled: the cursor moves past it (as the database has it too, when `stored`)."""
        self._served.handled(event.update_id)
        moved = self._updates.past(self._cursor, event.update_id)
        if moved != self._cursor:
            self._cursor = moved
            self._batch_idle = False
        if stored:
            self._stored_cursor = self._updates.past(self._stored_cursor, event.update_id)

    def _handle(self, event: Event) -> bool:
        """Deal with one event; True when it waits for a write (the cursor moves with it)."""
        assert self._reader is not None
        outcome = read_update(self._reader, self._profile, self._moves, event, text_limit=self._text_limit)
        if isinstance(event, Tap | Reply) and outcome.notice is not None:
            self._notice(event, outcome.notice)
        if isinstance(event, Reply) and not outcome.command and not outcome.notice and self._deliveries.replyable:
            # A reply to a message the store does not know yet: perhaps the prompt or checkpoint just
            # sent, whose receipt is on its way. Look again once it is written.
            self._events.appendleft(event)
            self._reply_waits = True
            return True
        if outcome.command is None:
            return False
        name, args, correlation = outcome.command
        self._pending_event = (event, outcome.label)
        self._pending_prompt = outcome.prompt
        self._command(name, args, correlation)
        return True

    def _notice(self, event: Tap | Reply, text: str) -> None:
        assert self._threads is not None
        self._threads.notice(event, text)

    def _event_written(self, result: WriteResult) -> None:
        assert self._pending_event is not None
        event, label = self._pending_event
        self._pending_event = None
        self._applying_event = False
        if not result.ok:
            update_id, refusals = self._update_failures
            refusals = refusals + 1 if update_id == event.update_id else 1
            self._update_failures = (event.update_id, refusals)
            if refusals < _PASS_OVER_AFTER or result.error_code in _TRANSIENT_REFUSALS:
                # Not written (disk full, the database unreachable …): the update stays unapplied; the
                # poller will see it again from the stored cursor after a pause.
                log.warning("channel %s: cannot apply update %s: %s", self._profile.profile, event.update_id,
                            result.error)
                self._events.clear()
                assert self._threads is not None
                self._threads.poll_from(self._stored_cursor, 1.0)
                return
            # Refused again and again for what it is: passed over, so that one update cannot stop the
            # channel; the person is told.
            log.error("channel %s: update %s refused %d times (%s); passing over it", self._profile.profile,
                      event.update_id, refusals, result.error)
            if isinstance(event, Tap | Reply):
                self._notice(event, "This could not be recorded (see the host's log).")
            self._done_with(event)
            self._next_event()
            return
        value = result.value
        if result.correlation_id == "prompt":
            assert isinstance(event, Tap)
            prompt, self._pending_prompt = self._pending_prompt, None
            if "skip" in value:
                self._notice(event, "Reply to the question above with your text.")
            else:
                assert prompt is not None and self._threads is not None
                self._deliveries.ask(Job("ask", prompt.chat_id, dict(value), presented=prompt.presented,
                                         choice=prompt.choice, user_id=prompt.user_id), self._threads)
                self._notice(event, "Reply to the question with your text.")
        elif result.correlation_id == "answer":
            assert isinstance(event, Tap | Reply)  # an answer is read from a tap or a reply (read_update)
            if value["status"] == "accepted":
                self._notice(event, f"Recorded: {label}")
            elif value["status"] == "refused":
                self._notice(event, f"Not recorded: {value.get('error')}"[:190])
        # The prompt's reservation leaves the cursor; the answer and a found message moved it.
        self._done_with(event, stored=result.correlation_id != "prompt")
        self._next_event()

    def _rebased(self, result: WriteResult) -> None:
        self._applying_event = False
        if not result.ok:
            log.warning("channel %s: cannot re-base the cursor: %s", self._profile.profile, result.error)
            self._events.clear()
            assert self._threads is not None
            self._threads.poll_from(self._cursor, 1.0)
            return
        self._cursor = self._stored_cursor = str(result.value["cursor"])
        self._next_event()

    def _written(self, result: WriteResult) -> None:
        correlation = result.correlation_id or ""
        if correlation == "start":
            self._started(result)
        elif correlation == "reserve":
            self._reserved(result)
        elif correlation.startswith("settle "):
            self._settled(result)
        elif correlation in ("answer", "prompt", "found"):
            self._event_written(result)
        elif correlation == "rebase":
            self._rebased(result)
        elif correlation == "cursor":
            assert self._threads is not None
            if not result.ok:
                log.warning("channel %s: cannot store the cursor: %s", self._profile.profile, result.error)
                self._threads.poll_from(self._cursor, 1.0)
                return
            self._stored_cursor = str(result.value["cursor"])
            self._cursor = self._updates.later(self._cursor, self._stored_cursor)
            self._threads.poll_from(self._cursor)
