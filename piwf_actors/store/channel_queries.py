"""Reads for the decision channels: what an adapter has to deliver, settle or listen for,
and what `channel.status` lists for a person. Chat and message ids are text, as the channel names
them (a reference stored before schema v17 held integers: it was migrated to their text)."""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from typing import Any

from piwf_actors.store.reader import StoreReader

_OPEN = "('pending', 'presenting')"
#: How long after it was written a notification is still sent to a chat (a new profile or chat, or a
#: channel back after an outage, gets the notifications of the last day, never an older backlog).
NOTIFICATION_WINDOW_S = 24 * 3600.0


def notifications_since(now: float | None = None) -> float:
    """The oldest a notification may be and still be sent (`NOTIFICATION_WINDOW_S` before `now`)."""
    return (time.time() if now is None else now) - NOTIFICATION_WINDOW_S


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _contract(reader: StoreReader, sha256: str) -> dict[str, Any]:
    row = reader.one("SELECT data FROM blob WHERE sha256 = ?", (sha256,))
    return {} if row is None else json.loads(bytes(row[0]).decode())


def _same_id(stored: Any, wanted: str) -> bool:
    """Whether an id kept in a JSON reference is `wanted` (ids are text; a number counts as its decimal text)."""
    return stored is not None and str(stored) == wanted


def _copy(detail: Any) -> int:
    return int((detail or {}).get("copy") or 0) if isinstance(detail, dict) else 0


def open_decisions(reader: StoreReader) -> list[dict[str, Any]]:
    """Decisions and checkpoints waiting for an answer, oldest first: {request_id, run_id, node_id,
    revision, audience, deadline_at, kind, contract}."""
    rows = reader.all(
        f"""SELECT request_id, run_id, node_id, revision, audience, deadline_at, kind, contract_sha256
            FROM interactive_request WHERE kind IN ('decision', 'checkpoint') AND status IN {_OPEN}
            ORDER BY created_at""")
    keys = ("request_id", "run_id", "node_id", "revision", "audience", "deadline_at", "kind")
    return [{**dict(zip(keys, row[:7], strict=True)), "contract": _contract(reader, row[7])} for row in rows]


def addressed_notifications(reader: StoreReader, profile: str, since: float, *,
                            audiences: Collection[str] | None = None,
                            chats: tuple[Collection[str], int] | None = None) -> list[dict[str, Any]]:
    """Notifications that name an audience, written at `since` or later, oldest first, each with the
    profile's notification effects for it: {message_id, audience, effects: {chat id: {effect_id,
    status, retry_at}}}. The bodies are read one at a time (`notification_body`), for what is sent.

    An adapter plans on every tick, so what it reads must not grow with the day's notifications that
    need nothing more from it: `audiences` keeps those for these audiences only (None: any), and
    `chats` = (the chat ids whose effects count, how many chats the profile sends to) leaves out a
    notification that has as many effects in those chats that are not `failed` (sent, being sent, or
    waiting for a person) as there are chats: each of them has it."""
    conditions, params = "", [profile, since]
    if audiences is not None:
        listed = sorted(audiences)
        if not listed:
            return []
        conditions += f" AND m.audience IN ({', '.join('?' * len(listed))})"
        params += listed
    if chats is not None:
        counted, targets = sorted(chats[0]), chats[1]
        if not counted or targets <= 0:
            return []
        conditions += f""" AND (SELECT count(*) FROM channel_effect d WHERE d.request_id = m.message_id
                                AND d.profile = ? AND d.purpose = 'notification' AND d.status <> 'failed'
                                AND d.chat_id IN ({', '.join('?' * len(counted))})) < ?"""
        params += [profile, *counted, targets]
    found: dict[str, dict[str, Any]] = {}
    for message_id, audience, effect_id, chat_id, status, retry_at in reader.all(
            f"""SELECT m.message_id, m.audience, e.effect_id, e.chat_id, e.status, e.retry_at
                FROM session_message m LEFT JOIN channel_effect e
                     ON e.request_id = m.message_id AND e.profile = ? AND e.purpose = 'notification'
                WHERE m.audience IS NOT NULL AND m.created_at >= ?{conditions} ORDER BY m.created_at""",
            tuple(params)):
        notice = found.setdefault(message_id, {"message_id": message_id, "audience": audience, "effects": {}})
        if effect_id is not None:
            notice["effects"][str(chat_id)] = {"effect_id": effect_id, "status": status, "retry_at": retry_at}
    return list(found.values())


def notification_body(reader: StoreReader, message_id: str) -> dict[str, Any]:
    """A notification's outbox body: {node_id, message, audience}."""
    row = reader.one("SELECT body FROM session_message WHERE message_id = ?", (message_id,))
    return {} if row is None else dict(json.loads(row[0]))


def effects(reader: StoreReader, profile: str, purpose: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The profile's effects of one purpose by (request id, chat id): the latest per pair (a
    delivery's latest copy, a prompt's latest asking). {effect_id, attempt, status, retry_at,
    result, detail, copy}."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for effect_id, request_id, chat_id, attempt, status, retry_at, result, detail in reader.all(
            """SELECT effect_id, request_id, chat_id, attempt, status, retry_at, result, detail
               FROM channel_effect WHERE profile = ? AND purpose = ? ORDER BY created_at""", (profile, purpose)):
        detail = _json(detail)
        effect = {"effect_id": effect_id, "attempt": attempt, "status": status, "retry_at": retry_at,
                  "result": _json(result), "detail": detail, "copy": _copy(detail)}
        earlier = found.get((request_id, str(chat_id)))
        if earlier is None or effect["copy"] >= earlier["copy"]:  # by copy, whatever the clock did
            found[(request_id, str(chat_id))] = effect
    return found


def tappable_copies(reader: StoreReader, profile: str) -> list[dict[str, Any]]:
    """Every delivered copy a tap may come from and that still matters: copies of open decisions,
    and copies whose message is not known yet (a tap on them shows where they are).
    {effect_id, request_id, chat_id, copy, status, known, revision (of its buttons), open}."""
    rows = reader.all(
        f"""SELECT d.effect_id, d.request_id, d.chat_id, d.detail, d.status, d.result IS NOT NULL, r.revision,
                   r.status IN {_OPEN}
            FROM channel_effect d JOIN interactive_request r ON r.request_id = d.request_id
            WHERE d.profile = ? AND d.purpose = 'delivery' AND (r.status IN {_OPEN} OR d.result IS NULL)
              AND d.status IN ('applied', 'ambiguous', 'replaced', 'applying')
            ORDER BY d.created_at""", (profile,))
    copies = []
    for effect_id, request_id, chat_id, detail, status, known, revision, open_ in rows:
        detail = _json(detail) or {}
        # The revision its buttons were made for (settling a decision moves the request's revision on).
        copies.append({"effect_id": effect_id, "request_id": request_id, "chat_id": str(chat_id), "copy": _copy(detail),
                       "status": status, "known": bool(known), "revision": detail.get("revision", revision),
                       "open": bool(open_)})
    return copies


def decisions_to_settle(reader: StoreReader, profile: str) -> list[dict[str, Any]]:
    """Delivered copies whose buttons no longer answer — the decision was answered, timed out or
    cancelled, or the copy was replaced by a newer one — and whose message is known but not edited
    yet: {request_id, chat_id, delivery_effect_id, copy, message, status, replaced, contract, answer,
    provenance, settlement}, `settlement` the earlier failed edit's {status, retry_at} if any."""
    rows = reader.all(
        f"""SELECT d.effect_id, d.request_id, d.chat_id, d.detail, d.status, d.result, r.status, r.contract_sha256,
                   s.payload, s.provenance, x.status, x.retry_at
            FROM channel_effect d JOIN interactive_request r ON r.request_id = d.request_id
            LEFT JOIN interactive_submission s ON s.submission_id = r.accepted_submission_id
            LEFT JOIN channel_effect x ON x.effect_key = REPLACE(d.effect_key, '|delivery|', '|settlement|')
            WHERE d.profile = ? AND d.purpose = 'delivery' AND d.status IN ('applied', 'replaced')
              AND d.result IS NOT NULL AND (r.status NOT IN {_OPEN} OR d.status = 'replaced')
              AND (x.status IS NULL OR x.status = 'failed')
            ORDER BY d.created_at""", (profile,))
    return [{"request_id": request_id, "chat_id": chat_id, "delivery_effect_id": effect_id,
             "copy": _copy(_json(detail)), "message": _json(result), "status": request_status,
             "replaced": status == "replaced", "contract": _contract(reader, contract_sha),
             "answer": _json(payload), "provenance": _json(provenance),
             "settlement": None if edit_status is None else {"status": edit_status, "retry_at": edit_retry_at}}
            for (effect_id, request_id, chat_id, detail, status, result, request_status, contract_sha, payload,
                 provenance, edit_status, edit_retry_at) in rows]


def prompt_for_reply(reader: StoreReader, profile: str, chat_id: str, message_id: str) -> dict[str, Any] | None:
    """The input prompt a reply answers (by the prompt message's id): {request_id, detail}."""
    for request_id, result, detail in reader.all(
            """SELECT request_id, result, detail FROM channel_effect WHERE profile = ? AND purpose = 'input_prompt'
               AND chat_id = ? AND status = 'applied' ORDER BY created_at DESC""", (profile, chat_id)):
        reference = _json(result) or {}
        if _same_id(reference.get("message_id"), message_id):
            return {"request_id": request_id, "detail": _json(detail) or {}}
    return None


def checkpoint_for_reply(reader: StoreReader, profile: str, chat_id: str, message_id: str) -> dict[str, Any] | None:
    """The checkpoint a reply answers, by the id of a delivered copy's message in `chat_id` (where
    it was sent, a moved chat's new id): {request_id, revision, open}, or None."""
    for request_id, result, revision, open_ in reader.all(
            f"""SELECT d.request_id, d.result, r.revision, r.status IN {_OPEN}
                FROM channel_effect d JOIN interactive_request r ON r.request_id = d.request_id
                WHERE d.profile = ? AND d.purpose = 'delivery' AND r.kind = 'checkpoint'
                  AND d.status IN ('applied', 'replaced') AND d.result IS NOT NULL
                ORDER BY d.created_at DESC""", (profile,)):
        reference = _json(result) or {}
        if _same_id(reference.get("chat_id"), chat_id) and _same_id(reference.get("message_id"), message_id):
            return {"request_id": request_id, "revision": revision, "open": bool(open_)}
    return None


# --- what channel.status shows a person ------------------------------------------------------------

def _waiting(reader: StoreReader, status: str, settlements: bool) -> list[tuple[Any, ...]]:
    """The channel effects of `status` (a literal, so that its partial index serves the statement) a
    person may have to act on: deliveries of decisions still open (`settlements`: edits too, also
    after), and notifications still wanted."""
    assert status in ("ambiguous", "failed")
    edits = "e.purpose = 'settlement' OR " if settlements else ""
    return reader.all(
        f"""SELECT e.profile, e.effect_id, e.attempt, e.purpose, e.request_id, e.chat_id, e.error, e.retry_at,
                   e.created_at
            FROM channel_effect e JOIN interactive_request r ON r.request_id = e.request_id
            WHERE e.status = '{status}' AND e.purpose <> 'input_prompt' AND ({edits}r.status IN {_OPEN})
            UNION ALL
            SELECT e.profile, e.effect_id, e.attempt, e.purpose, e.request_id, e.chat_id, e.error, e.retry_at,
                   e.created_at
            FROM channel_effect e JOIN session_message m ON m.message_id = e.request_id
            WHERE e.status = '{status}' AND e.purpose = 'notification' AND m.created_at >= ?
            ORDER BY 9""", (notifications_since(),))


def ambiguous(reader: StoreReader) -> list[dict[str, Any]]:
    """Deliveries of unknown outcome for decisions still open, and notifications of unknown outcome
    still wanted, waiting for a person (`channel.recover confirm|retry`): {profile, message_id, purpose,
    request_id, chat_id, error}, oldest first. (A prompt for text is asked again when its person taps
    again: it waits for no one else.)"""
    return [{"profile": profile, "message_id": f"{effect_id}-{attempt}", "purpose": purpose,
             "request_id": request_id, "chat_id": chat_id, "error": error}
            for profile, effect_id, attempt, purpose, request_id, chat_id, error, _retry, _at in _waiting(
                reader, "ambiguous", settlements=False)]


def undelivered(reader: StoreReader) -> list[dict[str, Any]]:
    """Messages that surely failed and are being tried again (`channel.recover retry` tries now):
    deliveries of open decisions, edits, and notifications still wanted. {profile, message_id,
    purpose, request_id, chat_id, attempts, error, retry_at}, oldest first."""
    return [{"profile": profile, "message_id": f"{effect_id}-{attempt}", "purpose": purpose,
             "request_id": request_id, "chat_id": chat_id, "attempts": attempt, "error": error,
             "retry_at": retry_at}
            for profile, effect_id, attempt, purpose, request_id, chat_id, error, retry_at, _at in _waiting(
                reader, "failed", settlements=True)]


def unsettled(reader: StoreReader) -> list[dict[str, Any]]:
    """Copies that may still show buttons which no longer answer (the decision closed, or the copy
    was replaced), whose message is not known, so it cannot be edited until someone taps it:
    {profile, message_id, request_id, chat_id, status, why}."""
    rows = reader.all(
        f"""SELECT e.profile, e.effect_id, e.attempt, e.request_id, e.chat_id, e.status, e.error
            FROM channel_effect e JOIN interactive_request r ON r.request_id = e.request_id
            WHERE e.purpose = 'delivery' AND e.result IS NULL AND e.status IN ('applied', 'ambiguous', 'replaced')
              AND (r.status NOT IN {_OPEN} OR e.status = 'replaced')
            ORDER BY e.created_at""")
    why = {"applied": "confirmed by a person, so where the message is is not known",
           "ambiguous": "the send's outcome was never known",
           "replaced": "sent again at a person's word; this copy's buttons no longer answer"}
    return [{"profile": profile, "message_id": f"{effect_id}-{attempt}", "request_id": request_id,
             "chat_id": chat_id, "status": status,
             "why": f"{why[status]}; it is edited as soon as anyone taps it"}
            for profile, effect_id, attempt, request_id, chat_id, status, _error in rows]


def chat_moves(reader: StoreReader) -> list[dict[str, Any]]:
    """Chats the service moved: {profile, chat_id, moved_to, moved_at}."""
    return [{"profile": profile, "chat_id": chat_id, "moved_to": moved_to, "moved_at": moved_at}
            for profile, chat_id, moved_to, moved_at in reader.all(
                "SELECT profile, chat_id, moved_to, moved_at FROM channel_chat_move ORDER BY moved_at")]


def deliveries_status(reader: StoreReader) -> dict[str, list[dict[str, Any]]]:
    """Everything `channel.status` lists about messages, in one place."""
    return {"ambiguous": ambiguous(reader), "undelivered": undelivered(reader), "unsettled": unsettled(reader),
            "moved_chats": chat_moves(reader)}
