"""`ChannelAdapter`: one configured channel profile, delivering decisions and taking answers.

The actor owns what is durable and decided; its channel module (`ChannelIO`,
e.g. `channels/telegram.py`) only does the I/O, on two threads the actor
owns: a **sender** that makes one attempt at a time, and a **poller** that
waits for updates. Both tell the actor what happened; the actor never blocks
on the network.

Delivery, one message at a time: an open decision whose audience routes to
the profile and that has no delivery to an allowed chat yet is reserved
(`channel.effect_reserve` commits it `applying`), then sent; the receipt
settles it (`channel.effect_settle`: `applied` with the message reference,
`failed` when surely not sent — tried again up to three attempts — or
`ambiguous`, never tried again without a person). When the decision is
settled (answered anywhere, timed out, cancelled) each delivered message is
edited the same way to show the outcome without buttons.

Answers, one update at a time and in order: a tap on a button or a reply to
a text prompt is accepted only from an allowed user in an allowed chat and
for the request's current revision; `channel.answer` applies it and moves
the cursor past the update in one transaction. The poller asks for the next
updates only after the batch is written, from the stored cursor.

Supervised by the `ChannelManager` (one-for-one): a failure stops only this
profile, which the manager starts again under a new adapter epoch; that
start marks whatever this one left `applying` as ambiguous.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from piwf_actors.actors.base import CoreActor, safe_tell
from piwf_actors.actors.ticker import Ticker
from piwf_actors.actors.writer import Subscribe, Unsubscribe, WriterHandle
from piwf_actors.channels import text as channel_text
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
    Tap,
)
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.paths import DatabaseLocation
from piwf_actors.store import channel_queries
from piwf_actors.store.commands.channels import MAX_AUTOMATIC_ATTEMPTS
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import ChangeNotice, WriteCommand, WriteResult

log = logging.getLogger(__name__)

#: Tables whose changes may mean work for a channel.
_WATCHED = frozenset({"interactive_request", "interactive_submission", "channel_effect"})


@dataclass(frozen=True, slots=True)
class ChannelTick:
    pass


@dataclass(frozen=True, slots=True)
class Job:
    """One attempt for the sender thread (kind: present | ask | settle) or a notice."""

    kind: str
    chat_id: int
    presented: Presented | None = None
    choice: Choice | None = None
    user_id: int = 0
    ref: MessageRef | None = None
    text: str = ""
    tap: Tap | None = None
    effect: dict[str, Any] | None = None  # {effect_id, attempt, message_id} of the reservation


@dataclass(frozen=True, slots=True)
class JobDone:
    job: Job
    outcome: str  # applied | failed | ambiguous
    result: dict[str, Any] | None
    error: str | None
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Polled:
    events: list[Event]


@dataclass(frozen=True, slots=True)
class PollFailed:
    error: str


class ChannelAdapter(CoreActor):
    actor_name = "channel"

    def __init__(self, writer: WriterHandle, database: DatabaseLocation, *, profile: ChannelProfile,
                 open_io: Callable[[], ChannelIO], adapter_epoch: str, start_reason: str,
                 manager: pykka.ActorRef[Any] | None, poll_timeout_s: float = 25.0, tick_s: float = 1.0,
                 text_limit: int = 4096) -> None:
        """Runs in the manager's thread: stores arguments only."""
        super().__init__(manager)
        self.actor_name = f"channel {profile.profile}"
        self._writer = writer
        self._database = database
        self._profile = profile
        self._open_io = open_io
        self._epoch = adapter_epoch
        self._start_reason = start_reason
        self._poll_timeout_s = poll_timeout_s
        self._tick_s = tick_s
        self._text_limit = text_limit
        self._reader: StoreReader | None = None
        self._io: ChannelIO | None = None
        self._ticker: Ticker | None = None
        self._halt = threading.Event()
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._ready = False
        self._busy = False  # a reservation or an attempt is in flight (one at a time)
        self._hold_until = 0.0  # after a sure failure, wait before the next attempt
        self._cursor = 0
        self._poll_go = threading.Event()
        self._events: deque[Event] = deque()
        self._applying_event = False
        self._last_error: str | None = None
        self._pending_job: Job | None = None  # the attempt whose reservation is on its way
        self._pending_event: tuple[Event, Job | None, str] | None = None  # the update whose write is on its way

    # --- lifecycle -------------------------------------------------------------------

    def on_start(self) -> None:
        """Runs in the adapter's thread: opens its reader and I/O, then takes over the profile."""
        self._reader = StoreReader(self._database)
        self._io = self._open_io()
        self._command("channel.adapter_start", {"reason": self._start_reason}, "start")

    def release_resources(self) -> None:
        self._halt.set()
        self._poll_go.set()
        self._jobs.put(None)
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        safe_tell(self._writer.ref, Unsubscribe(self.actor_ref))
        if self._io is not None:
            self._io.abort()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._threads = []
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
        args = {"profile": self._profile.profile, "adapter_epoch": self._epoch, **args}
        self._writer.submit(WriteCommand(name, args, correlation_id=correlation), self.actor_ref)

    def _started(self, result: WriteResult) -> None:
        if not result.ok:
            raise ChannelError(f"cannot take over profile {self._profile.profile}: {result.error}")
        self._cursor = int(result.value["cursor"])
        if result.value["ambiguous"]:
            log.warning("channel %s: deliveries left unsettled are now ambiguous (%s): %s", self._profile.profile,
                        self._start_reason, ", ".join(result.value["ambiguous"]))
        for target, name in ((self._send_loop, "send"), (self._poll_loop, "poll")):
            thread = threading.Thread(target=target, name=f"channel-{self._profile.profile}-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._writer.ref.tell(Subscribe(self.actor_ref))
        self._ticker = Ticker(self.actor_ref, ChannelTick(), self._tick_s, f"channel-{self._profile.profile}").start()
        self._ready = True
        self._poll_go.set()
        log.info("channel %s started (cursor %d)", self._profile.profile, self._cursor)
        self._evaluate()

    # --- what to deliver or settle -------------------------------------------------------------

    def _changed(self, notice: ChangeNotice) -> None:
        if _WATCHED.intersection(notice.tables):
            self._evaluate()

    def _tick(self, _message: ChannelTick) -> None:
        self._evaluate()

    def _evaluate(self) -> None:
        """Start the next attempt, if any is due and none is in flight."""
        if not self._ready or self._busy or time.monotonic() < self._hold_until:
            return
        assert self._reader is not None
        job = self._next_delivery() or self._next_settlement()
        if job is None:
            return
        self._busy = True
        args = {"purpose": job[0], "request_id": job[1], "chat_id": job[2].chat_id}
        self._pending_job = job[2]
        self._command("channel.effect_reserve", args, "reserve")

    def _attempt_allowed(self, effect: dict[str, Any] | None) -> bool:
        if effect is None:
            return True
        return effect["status"] == "failed" and effect["attempt"] < MAX_AUTOMATIC_ATTEMPTS + effect["manual_retries"]

    def _next_delivery(self) -> tuple[str, str, Job] | None:
        assert self._reader is not None
        decisions = [d for d in channel_queries.open_decisions(self._reader) if self._profile.routes(d["audience"])]
        if not decisions:
            return None
        delivered = channel_queries.effects(self._reader, self._profile.profile, "delivery")
        for decision in decisions:
            for chat_id in self._profile.allowed_chat_ids:
                if self._attempt_allowed(delivered.get((decision["request_id"], chat_id))):
                    presented = channel_text.presented(decision["request_id"], decision["revision"],
                                                       decision["contract"], decision["deadline_at"],
                                                       limit=self._text_limit)
                    return "delivery", decision["request_id"], Job("present", chat_id, presented=presented)
        return None

    def _next_settlement(self) -> tuple[str, str, Job] | None:
        assert self._reader is not None
        settled = channel_queries.effects(self._reader, self._profile.profile, "settlement")
        for item in channel_queries.decisions_to_settle(self._reader, self._profile.profile):
            if not self._attempt_allowed(settled.get((item["request_id"], item["chat_id"]))):
                continue
            message = item["message"] or {}
            ref = MessageRef(int(message["chat_id"]), int(message["message_id"]))
            text = channel_text.outcome_text(item["contract"], item["status"], item["answer"], item["provenance"],
                                             limit=self._text_limit)
            return "settlement", item["request_id"], Job("settle", ref.chat_id, ref=ref, text=text)
        return None

    def _reserved(self, result: WriteResult) -> None:
        job = self._pending_job
        assert job is not None
        if not result.ok or "skip" in result.value:
            self._busy = False
            if not result.ok:
                log.warning("channel %s: cannot record a delivery: %s", self._profile.profile, result.error)
                self._hold_until = time.monotonic() + 1.0
            return
        self._jobs.put(Job(job.kind, job.chat_id, presented=job.presented, choice=job.choice, user_id=job.user_id,
                           ref=job.ref, text=job.text, tap=job.tap, effect=dict(result.value)))

    def _job_done(self, done: JobDone) -> None:
        effect = done.job.effect
        assert effect is not None
        if done.outcome != "applied":
            log.warning("channel %s: %s %s %s: %s", self._profile.profile, done.job.kind, effect["message_id"],
                        "failed" if done.outcome == "failed" else "may or may not have happened (ambiguous)",
                        done.error)
            self._hold_until = time.monotonic() + max(done.retry_after or 0.0, 1.0)
        self._command("channel.effect_settle", {"effect_id": effect["effect_id"], "attempt": effect["attempt"],
                                                "outcome": done.outcome, "result": done.result,
                                                "error": done.error}, "settle")

    def _settled(self, result: WriteResult) -> None:
        if not result.ok:
            log.warning("channel %s: cannot record a delivery's outcome: %s", self._profile.profile, result.error)
        self._busy = False
        self._evaluate()

    # --- answers -------------------------------------------------------------------------------

    def _polled(self, message: Polled) -> None:
        self._last_error = None
        self._events.extend(sorted(message.events, key=lambda event: event.update_id))
        self._next_event()

    def _poll_failed(self, message: PollFailed) -> None:
        if message.error != self._last_error:
            log.warning("channel %s: polling failed: %s", self._profile.profile, message.error)
        self._last_error = message.error

    def _next_event(self) -> None:
        """Apply queued events one at a time; when none is left, let the poller go on."""
        while self._events and not self._applying_event:
            event = self._events.popleft()
            if event.update_id < self._cursor:
                continue  # applied before (a redelivery after a crash)
            if self._handle(event):
                self._applying_event = True  # a write is on its way; its result continues the loop
                return
            self._cursor = max(self._cursor, event.update_id + 1)
        if not self._events and not self._applying_event:
            self._command("channel.cursor", {"cursor": self._cursor}, "cursor")

    def _handle(self, event: Event) -> bool:
        """Deal with one event; True when it waits for a write (the cursor moves with it)."""
        if isinstance(event, Tap):
            return self._tap(event)
        if isinstance(event, Reply) and event.reply_to is not None:
            return self._reply(event)
        return False

    def _open_decision_for(self, token: str) -> dict[str, Any] | None:
        assert self._reader is not None
        for decision in channel_queries.open_decisions(self._reader):
            if (self._profile.routes(decision["audience"])
                    and channel_text.button_token(decision["request_id"], decision["revision"]) == token):
                return decision
        return None

    def _notice(self, tap: Tap, text: str) -> None:
        self._jobs.put(Job("notice", tap.chat_id, tap=tap, text=text))

    def _tap(self, tap: Tap) -> bool:
        if not self._profile.allows(tap.user_id, tap.chat_id):
            log.info("channel %s: ignored a tap by user %d in chat %d (not allowed)", self._profile.profile,
                     tap.user_id, tap.chat_id)
            self._notice(tap, "You may not answer decisions here.")
            return False
        parsed = channel_text.parse_button(tap.data)
        decision = None if parsed is None else self._open_decision_for(parsed[0])
        if decision is None or parsed is None:
            self._notice(tap, "This decision is no longer open.")
            return False
        options = channel_text.choices(decision["contract"], parsed[0])
        if parsed[1] >= len(options):
            self._notice(tap, "Unknown choice.")
            return False
        choice = options[parsed[1]]
        if choice.input is not None:
            # The choice needs text: ask for it (a message, so an effect) and take the reply.
            presented = channel_text.presented(decision["request_id"], decision["revision"], decision["contract"],
                                               decision["deadline_at"], limit=self._text_limit)
            job = Job("ask", tap.chat_id, presented=presented, choice=choice, user_id=tap.user_id, tap=tap)
            self._pending_event = (tap, job, choice.label)
            self._command("channel.effect_reserve", {
                "purpose": "input_prompt", "request_id": decision["request_id"], "chat_id": tap.chat_id,
                "key_extra": f"{tap.user_id}:{choice.key}:{decision['revision']}",
                "detail": {"choice": choice.key, "input_name": choice.input.get("name"), "user_id": tap.user_id,
                           "revision": decision["revision"]}}, "prompt")
            return True
        self._pending_event = (tap, None, choice.label)
        self._answer(tap.update_id, decision, {"choice": choice.key}, tap.user_id, tap.chat_id)
        return True

    def _reply(self, reply: Reply) -> bool:
        assert self._reader is not None and reply.reply_to is not None
        prompt = channel_queries.prompt_for_reply(self._reader, self._profile.profile, reply.chat_id, reply.reply_to)
        if prompt is None or prompt["detail"].get("user_id") != reply.user_id:
            return False
        if not self._profile.allows(reply.user_id, reply.chat_id):
            return False
        detail = prompt["detail"]
        decision = {"request_id": prompt["request_id"], "revision": detail.get("revision")}
        response = {"choice": detail["choice"], "input": {detail["input_name"]: reply.text}}
        self._pending_event = (reply, None, "")
        self._answer(reply.update_id, decision, response, reply.user_id, reply.chat_id)
        return True

    def _answer(self, update_id: int, decision: dict[str, Any], response: dict[str, Any], user_id: int,
                chat_id: int) -> None:
        self._command("channel.answer", {"channel": self._profile.channel_type, "update_id": update_id,
                                         "request_id": decision["request_id"],
                                         "expected_revision": decision["revision"], "response": response,
                                         "user_id": user_id, "chat_id": chat_id}, "answer")

    def _event_written(self, result: WriteResult) -> None:
        assert self._pending_event is not None
        event, job, label = self._pending_event
        self._applying_event = False
        if not result.ok:
            # Not written (disk full, adapter replaced …): the update stays unapplied; the poller
            # will see it again from the stored cursor after a pause.
            log.warning("channel %s: cannot apply update %d: %s", self._profile.profile, event.update_id,
                        result.error)
            self._events.clear()
            self._hold_poll()
            return
        value = result.value
        if result.correlation_id == "prompt":
            if "skip" in value:
                assert isinstance(event, Tap)
                self._notice(event, "Reply to the question above with your text.")
            else:
                assert job is not None
                self._jobs.put(Job(job.kind, job.chat_id, presented=job.presented, choice=job.choice,
                                   user_id=job.user_id, tap=job.tap, effect=dict(value)))
                assert isinstance(event, Tap)
                self._notice(event, "Reply to the question with your text.")
            self._cursor = max(self._cursor, event.update_id + 1)
        else:
            self._cursor = max(self._cursor, event.update_id + 1)
            if isinstance(event, Tap):
                if value["status"] == "accepted":
                    self._notice(event, f"Recorded: {label}")
                elif value["status"] == "refused":
                    self._notice(event, f"Not recorded: {value.get('error')}"[:190])
        self._next_event()

    def _hold_poll(self) -> None:
        def release() -> None:
            if not self._halt.wait(1.0):
                self._poll_go.set()

        threading.Thread(target=release, name=f"channel-{self._profile.profile}-pause", daemon=True).start()

    def _written(self, result: WriteResult) -> None:
        correlation = result.correlation_id
        if correlation == "start":
            self._started(result)
        elif correlation == "reserve":
            self._reserved(result)
        elif correlation == "settle":
            self._settled(result)
        elif correlation in ("answer", "prompt"):
            self._event_written(result)
        elif correlation == "cursor":
            if not result.ok:
                log.warning("channel %s: cannot store the cursor: %s", self._profile.profile, result.error)
                self._hold_poll()
                return
            self._cursor = max(self._cursor, int(result.value["cursor"]))
            self._poll_go.set()

    # --- the two I/O threads ----------------------------------------------------------------

    def _send_loop(self) -> None:
        """The sender thread: one attempt at a time, each told back to the actor."""
        ref, io = self.actor_ref, self._io
        assert io is not None
        while not self._halt.is_set():
            job = self._jobs.get()
            if job is None or self._halt.is_set():
                return
            if job.kind == "notice":
                try:
                    assert job.tap is not None
                    io.notice(job.tap, job.text)
                except ChannelError as exc:
                    log.info("channel %s: notice not shown: %s", self._profile.profile, exc.one_line())
                continue
            done = self._attempt(io, job)
            if not safe_tell(ref, done):
                return
            if done.retry_after:
                self._halt.wait(done.retry_after)  # the service asked us to slow down

    def _attempt(self, io: ChannelIO, job: Job) -> JobDone:
        expires_at = self._writer.lease_expires_at
        if expires_at is not None and time.time() >= expires_at:
            # The reservation was committed under the lease, but the lease has run out since (the host
            # was paused): another host may own this delivery now. Surely not sent; the settle that
            # follows is refused by the fence, and the host stops once its lease actor notices.
            return JobDone(job, "failed", None, "not sent: the host's lease has run out")
        try:
            if job.kind == "present":
                assert job.presented is not None
                result: dict[str, Any] | None = io.present(job.chat_id, job.presented).to_wire()
            elif job.kind == "ask":
                assert job.presented is not None and job.choice is not None
                result = io.ask_text(job.chat_id, job.presented, job.choice, job.user_id).to_wire()
            else:
                assert job.ref is not None
                io.settle(job.ref, job.text)
                result = job.ref.to_wire()
        except NotDelivered as exc:
            return JobDone(job, "failed", None, exc.one_line(500), exc.retry_after)
        except DeliveryUnknown as exc:
            return JobDone(job, "ambiguous", None, exc.one_line(500))
        except Exception as exc:  # anything unexpected: we cannot know whether it happened
            log.exception("channel %s: %s attempt raised", self._profile.profile, job.kind)
            return JobDone(job, "ambiguous", None, f"{type(exc).__name__}: {exc}"[:500])
        return JobDone(job, "applied", result, None)

    def _poll_loop(self) -> None:
        """The poller thread: fetch updates from the stored cursor, hand them over, wait until they
        are written, repeat. Errors back off (1 s doubling to 30 s, or what the service asks)."""
        ref, io = self.actor_ref, self._io
        assert io is not None
        pause = 1.0
        while not self._halt.is_set():
            self._poll_go.wait()
            if self._halt.is_set():
                return
            self._poll_go.clear()
            try:
                result = io.poll(self._cursor, self._poll_timeout_s)
            except ChannelError as exc:
                if self._halt.is_set():
                    return
                safe_tell(ref, PollFailed(exc.one_line(300)))
                self._halt.wait(max(pause, getattr(exc, "retry_after", None) or 0.0))
                pause = min(pause * 2, 30.0)
                self._poll_go.set()
                continue
            pause = 1.0
            if result.retry_after:
                self._halt.wait(result.retry_after)
            if not safe_tell(ref, Polled(result.events)):
                return
