"""Interaction contracts: what a waiting node asks for, and what answers it.

A contract is plain data stored with the interactive request, so the host
can check a person's answer without loading the workflow. The worker builds
it (`decision_contract`, …); the host checks answers against it
(`check_decision`). Presentation text is display-only and plain strings.
"""

from __future__ import annotations

import hashlib
from typing import Any

from piwf_actors.canonical import canonical_json

BLOCK_KINDS = ("paragraph", "section", "bullets", "fields", "preformatted")
MAX_TEXT = 4000


class ContractError(ValueError):
    """A presentation or contract that cannot be shown (raised in the worker; the node fails)."""


def _text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise ContractError(f"{what} must be a plain string")
    if len(value) > limit:
        raise ContractError(f"{what} is longer than {limit} characters")
    return value


def presentation(request: Any) -> dict[str, Any]:
    """Normalise a decision's request: {title, summary?, blocks?: [{kind, …}]}; plain strings only."""
    if not isinstance(request, dict):
        raise ContractError("a decision request must be a map with a title")
    unknown = set(request) - {"title", "summary", "blocks"}
    if unknown:
        raise ContractError(f"unknown request field(s): {', '.join(sorted(unknown))}")
    out: dict[str, Any] = {"title": _text(request.get("title"), "title", 300),
                           "summary": _text(request.get("summary", ""), "summary")}
    blocks = []
    for index, block in enumerate(request.get("blocks") or []):
        if not isinstance(block, dict) or block.get("kind") not in BLOCK_KINDS:
            raise ContractError(f"block {index} needs kind one of {', '.join(BLOCK_KINDS)}")
        kind = block["kind"]
        if kind in ("paragraph", "section", "preformatted"):
            blocks.append({"kind": kind, "text": _text(block.get("text"), f"block {index} text")})
        elif kind == "bullets":
            items = block.get("items")
            if not isinstance(items, list):
                raise ContractError(f"block {index} needs a list of items")
            blocks.append({"kind": kind, "items": [_text(i, f"block {index} item") for i in items]})
        else:
            fields = block.get("fields")
            if not isinstance(fields, list):
                raise ContractError(f"block {index} needs a list of fields")
            blocks.append({"kind": kind, "fields": [
                {"label": _text(f.get("label") if isinstance(f, dict) else None, f"block {index} field label", 200),
                 "value": _text(f.get("value") if isinstance(f, dict) else None, f"block {index} field value")}
                for f in fields]})
    out["blocks"] = blocks
    return out


def contract_digest(contract: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(contract).encode()).hexdigest()


def request_id_for(run_id: str, node_id: str, attempt_id: str, digest: str) -> str:
    """Decision ids are derived from (run, node, attempt, request digest)."""
    raw = hashlib.sha256(f"{run_id}\0{node_id}\0{attempt_id}\0{digest}".encode()).hexdigest()
    return f"req_{raw[:32]}"


def check_decision(contract: dict[str, Any], response: Any) -> str | None:
    """Why `response` does not answer the decision `contract`, or None when it does."""
    choices = contract.get("choices") or {}
    if not isinstance(response, dict) or set(response) - {"choice", "input"}:
        return "a response is a map with 'choice' and optionally 'input'"
    key = response.get("choice")
    chosen = choices.get(key) if isinstance(key, str) else None
    if chosen is None:
        return f"unknown choice {key!r} (choices: {', '.join(choices)})"
    given = response.get("input")
    field = chosen.get("input")
    if field is None:
        return None if given is None else f"choice {key!r} takes no input"
    if not isinstance(given, dict) or set(given) != {field["name"]}:
        return f"choice {key!r} needs input {{{field['name']!r}: text}}"
    text = given[field["name"]]
    if not isinstance(text, str) or not field["min_length"] <= len(text) <= field["max_length"]:
        return f"input {field['name']!r} must be text of {field['min_length']}..{field['max_length']} characters"
    return None
