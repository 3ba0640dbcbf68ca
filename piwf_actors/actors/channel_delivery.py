"""`Deliveries`: a channel adapter's outgoing messages, one attempt at a time.

The `ChannelAdapter` (actors/channel.py) owns one and asks it for the next
attempt whenever something may be due. It picks the message
(`actors/channel_plan.py`), reserves it (`channel.effect_reserve` commits it
`applying`), hands it to the sender thread once reserved, and writes the
receipt (`channel.effect_settle`) when the sender tells how the attempt
ended. A receipt the store could not take is what we know about a message
that was or was not sent: it is kept, written again on the next tick, and
nothing new is attempted meanwhile. It also keeps the pause the service
asked for (429), the work the store said was not due yet, and which sent
messages a reply may answer while their receipt is on its way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Literal

from piwf_actors.actors.channel_io import ChannelThreads, Job, JobDone
from piwf_actors.actors.channel_plan import Work, next_work
from piwf_actors.channels.config import ChannelProfile
from piwf_actors.store.reader import StoreReader
from piwf_actors.store.requests import WriteResult

# The adapter's log: these lines are its deliveries'.
log = logging.getLogger("piwf_actors.actors.channel")

#: Sure failures of one message logged as WARNING (the rest at INFO): the first, then every tenth.
_WARN_EVERY = 10
#: Refusals of a receipt that make it final: the attempt is stale (another adapter owns the profile).
_FINAL_REFUSALS = frozenset({"rejected", "adapter_replaced"})

#: The adapter's `_command`: submit a write (name, args, correlation) whose result comes back to it.
Command = Callable[[str, dict[str, Any], str], None]


class Deliveries:
    """One adapter's attempts: reserved, sent, settled. Made in the adapter's `__init__` (the manager's
    thread: it only stores arguments) and used in the adapter's thread only; the adapter hands it the
    results of the writes it submitted (`reserved`, `settled`) and the sender's `JobDone` (`sent`)."""

    def __init__(self, profile: ChannelProfile, command: Command, *, text_limit: int) -> None:
        self._profile = profile
        self._command = command
        self._text_limit = text_limit
        self.in_flight = 0  # reservations and attempts under way (a new one starts only at 0)
        self.hold_until = 0.0  # the service asked us to slow down (429)
        # Effect ids of messages a reply may answer (prompts for text, deliveries: a checkpoint is answered
        # by a reply), sent and their receipt not yet written.
        self.replyable: set[str] = set()
        self._receipts: dict[str, dict[str, Any]] = {}  # effect id -> settle args not written yet
        self._receipts_due: set[str] = set()  # of those, the ones to submit again on the next tick
        self._deferred: dict[tuple[Any, ...], float] = {}  # work the store said was not due, until (monotonic)
        self._pending_work: Work | None = None

    def resubmit_receipts(self) -> None:
        """The tick: write again the receipts the store could not take."""
        for effect_id in sorted(self._receipts_due):
            self._receipts_due.discard(effect_id)
            self._command("channel.effect_settle", self._receipts[effect_id], f"settle {effect_id}")

    def start_next(self, reader: StoreReader, moves: dict[str, str]) -> None:
        """Reserve the next attempt, if any is due and none is in flight."""
        if self.in_flight or time.monotonic() < self.hold_until:
            return
        now = time.monotonic()
        self._deferred = {key: until for key, until in self._deferred.items() if until > now}
        work = next_work(reader, self._profile, moves, text_limit=self._text_limit, deferred=set(self._deferred))
        if work is None:
            return
        self.in_flight += 1
        self._pending_work = work
        self._command("channel.effect_reserve", work.reserve, "reserve")

    def reserved(self, result: WriteResult, threads: ChannelThreads) -> None:
        """The reservation's write came back: send the message, or pass over it for a while."""
        work, self._pending_work = self._pending_work, None
        assert work is not None
        if not result.ok or "skip" in result.value:
            self.in_flight -= 1
            if not result.ok:
                log.warning("channel %s: cannot record a delivery: %s", self._profile.profile, result.error)
                self.hold_until = time.monotonic() + 1.0
            else:
                # Pass over it for a while (the store's clock may run behind ours): the work behind it
                # must not wait.
                wait = max(float(result.value.get("wait_s") or 0.0), 1.0)
                self._deferred[work.key] = time.monotonic() + wait
            return
        if work.kind == "present":
            self.replyable.add(str(result.value["effect_id"]))
        threads.send(Job(work.kind, work.chat_id, dict(result.value), presented=work.presented, ref=work.ref,
                         text=work.text))

    def ask(self, job: Job, threads: ChannelThreads) -> None:
        """Send a prompt for text an answer's write reserved; its receipt comes back as a JobDone like any
        attempt's, and a reply may answer it meanwhile."""
        self.in_flight += 1
        self.replyable.add(str(job.effect["effect_id"]))
        threads.send(job)

    def sent(self, done: JobDone, moves: dict[str, str]) -> None:
        """The sender tells how an attempt ended: write its receipt (a moved chat goes into `moves`)."""
        effect = done.job.effect
        if done.outcome != "applied":
            attempt = int(effect["attempt"])
            quiet = done.outcome == "failed" and attempt > 1 and attempt % _WARN_EVERY
            (log.info if quiet else log.warning)(
                "channel %s: %s %s %s: %s", self._profile.profile, done.job.kind, effect["message_id"],
                "not sent (will be tried again)" if done.outcome == "failed"
                else "may or may not have happened (ambiguous)", done.error)
            if done.retry_after:
                self.hold_until = time.monotonic() + done.retry_after
        args: dict[str, Any] = {"effect_id": effect["effect_id"], "attempt": effect["attempt"],
                                "outcome": done.outcome, "result": done.result, "error": done.error,
                                "retry_after": done.retry_after}
        if done.moved_to is not None:
            args.update(moved_from=done.job.chat_id, moved_to=done.moved_to)
            log.warning("channel %s: chat %s moved to %s (a group became a supergroup); decisions go there now: "
                        "put %s in allowed_chat_ids of channels.toml", self._profile.profile, done.job.chat_id,
                        done.moved_to, done.moved_to)
            moves[done.job.chat_id] = done.moved_to
        self._receipts[effect["effect_id"]] = args
        self._command("channel.effect_settle", args, f"settle {effect['effect_id']}")

    def settled(self, result: WriteResult) -> Literal["kept", "over", "replyable"]:
        """The receipt's write came back: `kept` (not written; tried again on the next tick, the attempt
        stays in flight), `over`, or `replyable` (over, and a reply may have waited for it)."""
        effect_id = (result.correlation_id or "").partition(" ")[2]
        if not result.ok and result.error_code not in _FINAL_REFUSALS:
            # Not written (the database is unreachable or full …): the receipt is what we know about
            # a message that was or was not sent; keep it and write it on the next tick. Nothing new
            # is attempted meanwhile (it stays in flight).
            log.warning("channel %s: cannot record a delivery's outcome (tried again): %s", self._profile.profile,
                        result.error)
            self._receipts_due.add(effect_id)
            return "kept"
        if not result.ok:
            log.warning("channel %s: a delivery's outcome was refused: %s", self._profile.profile, result.error)
        self._receipts.pop(effect_id, None)
        self.in_flight -= 1
        if effect_id in self.replyable:
            self.replyable.discard(effect_id)
            return "replyable"
        return "over"
