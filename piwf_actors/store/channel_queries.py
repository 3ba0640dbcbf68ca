"""Reads for the decision channels: what an adapter has to deliver, settle or listen for,
and what `channel.status` lists."""

from __future__ import annotations

import json
from typing import Any

from piwf_actors.store.reader import StoreReader


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _contract(reader: StoreReader, sha256: str) -> dict[str, Any]:
    row = reader.one("SELECT data FROM blob WHERE sha256 = ?", (sha256,))
    return {} if row is None else json.loads(bytes(row[0]).decode())


def open_decisions(reader: StoreReader) -> list[dict[str, Any]]:
    """Decisions waiting for an answer, oldest first: {request_id, run_id, node_id, revision,
    audience, deadline_at, contract}."""
    rows = reader.all(
        """SELECT request_id, run_id, node_id, revision, audience, deadline_at, contract_sha256 FROM interactive_request
           WHERE kind = 'decision' AND status IN ('pending', 'presenting') ORDER BY created_at""")
    keys = ("request_id", "run_id", "node_id", "revision", "audience", "deadline_at")
    return [{**dict(zip(keys, row[:6], strict=True)), "contract": _contract(reader, row[6])} for row in rows]


def effects(reader: StoreReader, profile: str, purpose: str) -> dict[tuple[str, int], dict[str, Any]]:
    """The profile's effects of one purpose by (request id, chat id) (prompts: the latest per pair)."""
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for effect_id, request_id, chat_id, attempt, status, manual, result, detail in reader.all(
            """SELECT effect_id, request_id, chat_id, attempt, status, manual_retries, result, detail
               FROM channel_effect WHERE profile = ? AND purpose = ? ORDER BY created_at""", (profile, purpose)):
        found[(request_id, chat_id)] = {"effect_id": effect_id, "attempt": attempt, "status": status,
                                        "manual_retries": manual, "result": _json(result), "detail": _json(detail)}
    return found


def decisions_to_settle(reader: StoreReader, profile: str) -> list[dict[str, Any]]:
    """Delivered decisions that were answered, timed out or cancelled while a message of this
    profile still shows their buttons: {request_id, chat_id, message, status, contract,
    answer, provenance} per delivered message without a settlement."""
    rows = reader.all(
        """SELECT d.request_id, d.chat_id, d.result, r.status, r.contract_sha256, s.payload, s.provenance
           FROM channel_effect d JOIN interactive_request r ON r.request_id = d.request_id
           LEFT JOIN interactive_submission s ON s.submission_id = r.accepted_submission_id
           WHERE d.profile = ? AND d.purpose = 'delivery' AND d.status = 'applied' AND d.result IS NOT NULL
             AND r.status IN ('settled', 'cancelled')
             AND NOT EXISTS (SELECT 1 FROM channel_effect x WHERE x.profile = d.profile AND x.purpose = 'settlement'
                             AND x.request_id = d.request_id AND x.chat_id = d.chat_id
                             AND x.status IN ('applied', 'ambiguous', 'applying'))
           ORDER BY d.created_at""", (profile,))
    return [{"request_id": request_id, "chat_id": chat_id, "message": _json(result), "status": status,
             "contract": _contract(reader, contract_sha), "answer": _json(payload), "provenance": _json(provenance)}
            for request_id, chat_id, result, status, contract_sha, payload, provenance in rows]


def prompt_for_reply(reader: StoreReader, profile: str, chat_id: int, message_id: int) -> dict[str, Any] | None:
    """The input prompt a reply answers (by the prompt message's id): {request_id, detail}."""
    for request_id, result, detail in reader.all(
            """SELECT request_id, result, detail FROM channel_effect WHERE profile = ? AND purpose = 'input_prompt'
               AND chat_id = ? AND status = 'applied' ORDER BY created_at DESC""", (profile, chat_id)):
        reference = _json(result) or {}
        if reference.get("message_id") == message_id:
            return {"request_id": request_id, "detail": _json(detail) or {}}
    return None


def cursor(reader: StoreReader, profile: str) -> int:
    row = reader.one("SELECT cursor FROM channel_cursor WHERE profile = ?", (profile,))
    return 0 if row is None else int(row[0])


def ambiguous(reader: StoreReader) -> list[dict[str, Any]]:
    """Deliveries waiting for a person (`channel.recover`): {profile, message_id, purpose, request_id,
    chat_id, error}, oldest first."""
    return [{"profile": profile, "message_id": f"{effect_id}-{attempt}", "purpose": purpose,
             "request_id": request_id, "chat_id": chat_id, "error": error}
            for profile, effect_id, attempt, purpose, request_id, chat_id, error in reader.all(
                """SELECT profile, effect_id, attempt, purpose, request_id, chat_id, error FROM channel_effect
                   WHERE status = 'ambiguous' ORDER BY created_at""")]
