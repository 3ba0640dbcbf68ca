"""Decisions, checkpoints and notifications as plain text for chat channels, and the data their
buttons carry.

Presentation text is display-only and plain (no markup: a decision's title may
contain anything). A button carries `<token>:<choice index>`, where the token
is derived from the request id and revision: it fits Telegram's 64-byte
`callback_data`, it names no secret, and a tap on a message of an older
revision of the request no longer matches (the answer is refused, not
mis-applied).

A checkpoint has no buttons: it is answered by a reply to its message,
whose text becomes the answer's input (`checkpoint_input`).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

from piwf_actors.channels.base import Choice, Presented

# Exactly what `choices` writes: 16 lower-case hex digits, a colon, a decimal index (ASCII only:
# str.isdigit would take "²", which int() refuses).
_BUTTON = re.compile(r"([0-9a-f]{16}):(0|[1-9][0-9]{0,3})")


def button_token(request_id: str, revision: int, copy: int = 0) -> str:
    """The token of a decision's buttons at `revision`, in its `copy`-th delivered copy (a copy
    sent again at a person's word has buttons of its own; the first keeps the original token)."""
    key = f"{request_id}\0{revision}" + (f"\0{copy}" if copy else "")
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def parse_button(data: object) -> tuple[str, int] | None:
    """(token, choice index) of a button's data, or None when it is not ours."""
    match = _BUTTON.fullmatch(data) if isinstance(data, str) else None
    if match is None:
        return None
    return match.group(1), int(match.group(2))


def choices(contract: dict[str, Any], token: str) -> tuple[Choice, ...]:
    """The decision's choices in a stable order (the contract is stored with sorted keys)."""
    return tuple(Choice(key=key, label=str(spec.get("label") or key), input=spec.get("input"),
                        data=f"{token}:{index}")
                 for index, (key, spec) in enumerate(sorted((contract.get("choices") or {}).items())))


def _block(block: dict[str, Any]) -> str:
    kind = block.get("kind")
    if kind == "bullets":
        return "\n".join(f"• {item}" for item in block.get("items") or [])
    if kind == "fields":
        return "\n".join(f"{field.get('label')}: {field.get('value')}" for field in block.get("fields") or [])
    if kind == "section":
        return f"▸ {block.get('text', '')}"
    return str(block.get("text", ""))


def decision_text(contract: dict[str, Any], deadline_at: float | None, *, limit: int) -> str:
    """Title, summary, blocks and the deadline, cut to `limit` characters."""
    parts = [str(contract.get("title") or "Decision")]
    if contract.get("summary"):
        parts.append(str(contract["summary"]))
    parts += [_block(block) for block in contract.get("blocks") or []]
    default = contract.get("default_response")
    if deadline_at is not None:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(deadline_at))
        if default:
            label = ((contract.get("choices") or {}).get(default.get("choice")) or {}).get("label") or default["choice"]
            parts.append(f"If nobody answers by {when}: {label}.")
        else:
            parts.append(f"Answer by {when}.")
    return _cut("\n\n".join(part for part in parts if part), limit)


def is_checkpoint(contract: dict[str, Any]) -> bool:
    return contract.get("kind") == "checkpoint"


def _title(contract: dict[str, Any]) -> str:
    if is_checkpoint(contract):
        first = (str(contract.get("prompt") or "").strip().splitlines() or ["A run waits for your answer"])[0]
        return _cut(f"Checkpoint: {first}", 200)
    return str(contract.get("title") or "Decision")


def checkpoint_text(contract: dict[str, Any], deadline_at: float | None, *, limit: int) -> str:
    """The prompt, how to answer it, and the deadline, cut to `limit` characters (the how first,
    so that a long prompt cannot push it out)."""
    how = "↩ Reply to this message with your answer: plain text, or a JSON object."
    if deadline_at is not None:
        how += f" Answer by {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(deadline_at))}."
    prompt = str(contract.get("prompt") or "").strip() or "A run waits for your answer."
    return _cut(f"{how}\n\n{prompt}", limit)


def checkpoint_input(text: str) -> tuple[Any, str | None]:
    """A reply's text as a checkpoint's answer: a JSON object when the text is one (it starts with
    "{"), else {"text": the text}. Returns (input, None), or (None, why it cannot be taken)."""
    if not text.lstrip().startswith("{"):
        return {"text": text}, None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        return None, (f"Not recorded: this starts like a JSON object but is not one ({exc.msg} at character "
                      f"{exc.pos + 1}). Reply again with a JSON object, or with plain text (taken as "
                      '{"text": …}).')
    except ValueError:
        return None, "Not recorded: JSON numbers must be finite. Reply again with a JSON object, or plain text."
    except RecursionError:
        value = None
    if value is None or _depth(value) > MAX_ANSWER_DEPTH:
        return None, f"Not recorded: the JSON is nested deeper than {MAX_ANSWER_DEPTH} levels."
    return value, None


#: Nesting a checkpoint's answer from a chat may have (the client protocol refuses deeper than 32).
MAX_ANSWER_DEPTH = 16


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(item) for item in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(item) for item in value), default=0)
    return 0


def _answer_line(answer: Any) -> str:
    if isinstance(answer, dict) and set(answer) == {"text"}:
        return str(answer["text"])
    return json.dumps(answer, ensure_ascii=False, sort_keys=True)


def replaced_text(contract: dict[str, Any], *, limit: int) -> str:
    """What a copy that was sent again says instead of its buttons."""
    title = _title(contract)
    return _cut(f"{title}\n\n↻ Sent again below: answer the newer message.", limit)


def outcome_text(contract: dict[str, Any], status: str, answer: Any, provenance: Any, *, limit: int) -> str:
    """What a settled decision's (or checkpoint's) message says instead of its buttons."""
    title = _title(contract)
    if status != "settled" or (not isinstance(answer, dict) and not is_checkpoint(contract)):
        return _cut(f"{title}\n\n✖ Closed without an answer (the run ended or the request was cancelled).", limit)
    if is_checkpoint(contract):
        line = f"✔ Answered: {_answer_line(answer)}"
    else:
        choice = (contract.get("choices") or {}).get(answer.get("choice")) or {}
        line = f"✔ {choice.get('label') or answer.get('choice')}"
        text_input = answer.get("input")
        if isinstance(text_input, dict) and text_input:
            line += ": " + "; ".join(str(value) for value in text_input.values())
    provenance = provenance if isinstance(provenance, dict) else {}
    if provenance.get("kind") == "timeout":
        line += " (no answer in time: the default)"
    elif provenance.get("kind") == "channel":
        line += f" (answered in {provenance.get('channel')} by user {provenance.get('user_id')})"
    else:
        line += " (answered elsewhere)"
    return _cut(f"{title}\n\n{line}", limit)


def notification_text(message: Any, *, limit: int) -> str:
    """A notification as a chat shows it: the message itself (one that is not text as compact JSON),
    cut to `limit` characters."""
    text = message if isinstance(message, str) else json.dumps(message, ensure_ascii=False, sort_keys=True)
    return _cut(text.strip() or "(an empty notification)", limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def presented(request_id: str, revision: int, contract: dict[str, Any], deadline_at: float | None, *,
              limit: int, copy: int = 0) -> Presented:
    if is_checkpoint(contract):
        text = checkpoint_text(contract, deadline_at, limit=limit)
        if copy:
            text = _cut(f"(sent again: reply to this copy)\n\n{text}", limit)
        return Presented(request_id, text, ())  # no buttons: a reply answers it
    text = decision_text(contract, deadline_at, limit=limit)
    if copy:
        text = _cut(f"(sent again: an earlier copy of this question no longer answers)\n\n{text}", limit)
    return Presented(request_id, text, choices(contract, button_token(request_id, revision, copy)))
