"""What the console's templates show, made from the operations' receipts. Pure functions: no I/O.

- `picture(view, document, now)`: the run on its workflow's graph as `piwf graph` draws it
  (`graph_render.tree` over `graph_run.overlay`), a tree of `TreeItem`s the run page lays out as nested
  lists with a status class per node; a function workflow's run shows the steps it took.
- `answer_form(request)`: how the inbox answers one pending request, from its contract: a decision's
  choices (each a button, with its text input when the choice has one), a checkpoint's text (or
  JSON), an agent step's JSON value.
- `form_answer(kind, fields)`: the answer route's body made from a submitted form (one line on bad JSON).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from piwf_actors.timefmt import duration, relative
from piwf_actors.workflows.graph import function_run_graph, graph_from_view
from piwf_actors.workflows.graph_data import GraphDataError, graph_of
from piwf_actors.workflows.graph_render import TreeItem, tree
from piwf_actors.workflows.graph_run import overlay, request_words, wait_words

#: Largest text the pages show of one value (a node's output, an input): the rest is cut with a note.
MAX_VALUE_CHARS = 20_000


def pretty(value: Any) -> str:
    """A value as indented JSON for a <pre>, cut at MAX_VALUE_CHARS."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True,
                                                           default=repr)
    if len(text) > MAX_VALUE_CHARS:
        return text[:MAX_VALUE_CHARS] + f"\n… ({len(text) - MAX_VALUE_CHARS} more characters)"
    return text


def when(ts: Any, now: float) -> str:
    """`2026-12-02 16:40:05 UTC (3m12s ago)`; "" for no time."""
    if not isinstance(ts, (int, float)) or isinstance(ts, bool):
        return ""
    stamp = datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp} ({relative(ts, now)})"


def took(start: Any, end: Any) -> str:
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        return duration(end - start)
    return ""


def resource_state(resource: Mapping[str, Any]) -> str:
    """One word for where a resource stands (as `piwf resource list` says it)."""
    if resource.get("deleting"):
        return "deleting"
    if resource.get("reconciling"):
        return "reconciling"
    if resource.get("last_result") == "error":
        return f"error ×{resource.get('consecutive_errors')}"
    if resource.get("queued"):
        return "queued"
    return str(resource.get("last_result") or "new")


def picture(view: Mapping[str, Any], document: Any, now: float) -> tuple[TreeItem, str | None]:
    """The run's tree, and a note when it is drawn from run.get alone (no stored graph, or one unreadable)."""
    run = overlay(view, now)
    if document is not None:
        try:
            graph = graph_of(document)
            return tree(function_run_graph(graph, view) if graph.function else graph, run), None
        except (GraphDataError, ValueError) as exc:
            why = f"its stored graph cannot be read: {' '.join(str(exc).split())[:300]}"
    else:
        why = "it started before its host stored run graphs"
    return tree(graph_from_view(view), run), f"no graph to draw ({why}): the nodes it reached"


def waits(view: Mapping[str, Any], now: float) -> list[str]:
    """Why the run waits, in words (the open requests and waits of run.get)."""
    out = [f"{w.get('node_id')}: {request_words(w, now)}" for w in view.get("waiting") or [] if isinstance(w, Mapping)]
    out += [f"{w.get('node_id')}: {wait_words(w, now, zoned=True)}" for w in view.get("waits") or []
            if isinstance(w, Mapping)]
    return out


def answered_by(node: Mapping[str, Any]) -> str:
    """`person via http (token ci)`, `telegram user 42`, `timeout`: who gave a node's answer."""
    answer = node.get("answer")
    by = answer.get("by") if isinstance(answer, Mapping) else None
    if not isinstance(by, Mapping):
        return ""
    kind = str(by.get("kind") or "someone")
    who = "person" if kind == "human" else kind
    if by.get("via"):
        who += f" via {by['via']}"
        if by.get("token"):
            who += f" (token {by['token']})"
    elif by.get("channel") or by.get("user"):
        who += f" ({by.get('channel') or ''} {by.get('user') or ''})".replace("( ", "(").replace(" )", ")")
    return who


@dataclass(frozen=True, slots=True)
class Choice:
    key: str
    label: str
    input_name: str | None = None
    input_prompt: str = ""
    max_length: int | None = None


@dataclass(frozen=True, slots=True)
class AnswerForm:
    """`kind`: decision (choices), checkpoint (text, or JSON), agent (a JSON value). `schema`: the JSON the
    contract expects, shown beside the textarea."""

    kind: str
    title: str
    text: str = ""
    choices: tuple[Choice, ...] = ()
    schema: str = ""
    blocks: tuple[str, ...] = field(default_factory=tuple)


def answer_form(request: Mapping[str, Any]) -> AnswerForm:
    contract = request.get("contract") if isinstance(request.get("contract"), Mapping) else {}
    assert isinstance(contract, Mapping)
    kind = str(request.get("kind") or contract.get("kind") or "")
    blocks = tuple(pretty(block) for block in contract.get("blocks") or [])
    if kind == "decision":
        choices = []
        for key, spec in (contract.get("choices") or {}).items():
            spec = spec if isinstance(spec, Mapping) else {}
            wanted = spec.get("input") if isinstance(spec.get("input"), Mapping) else None
            choices.append(Choice(str(key), str(spec.get("label") or key),
                                  None if wanted is None else str(wanted.get("name")),
                                  "" if wanted is None else str(wanted.get("prompt") or ""),
                                  None if wanted is None else wanted.get("max_length")))
        return AnswerForm("decision", str(contract.get("title") or "Decision"), str(contract.get("summary") or ""),
                          tuple(choices), blocks=blocks)
    if kind == "agent":
        return AnswerForm("agent", "Agent step", str(contract.get("prompt") or ""),
                          schema=pretty(contract.get("expected_output")), blocks=blocks)
    schema = contract.get("input_schema") or contract.get("schema")
    return AnswerForm("checkpoint", "Checkpoint", str(contract.get("prompt") or ""),
                      schema=pretty(schema) if schema else "", blocks=blocks)


class FormError(ValueError):
    """A form that cannot become an answer (JSON that does not parse): one line."""


def form_json(text: str, what: str) -> Any:
    try:
        return json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError) as exc:
        raise FormError(f"{what} is not JSON: {' '.join(str(exc).split())[:200]}") from None


def form_answer(kind: str, fields: Mapping[str, str]) -> dict[str, Any]:
    """The body of the answer (or submit) route made from a submitted inbox form."""
    if kind == "decision":
        body: dict[str, Any] = {"choice": fields.get("choice", "")}
        inputs = {name[6:]: value for name, value in fields.items() if name.startswith("input.")}
        if inputs:
            body["input"] = inputs
        return body
    if kind == "agent":
        return {"value": form_json(fields.get("json", ""), "the value")}
    if fields.get("json", "").strip():
        return {"input": form_json(fields["json"], "the answer")}
    return {"input": fields.get("text", "")}
