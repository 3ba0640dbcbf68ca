"""`piwf inbox`, `piwf answer`, `piwf submit`, `piwf ack`: people and sessions in the loop."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from piwf_actors.cli import render
from piwf_actors.cli.ids import NoMatch
from piwf_actors.cli.values import json_value
from piwf_actors.errors import PiwfError

#: What REQUEST may be, as the help of `answer` and `submit` says it.
REQUEST_HELP = ("a request id (a unique start of one, or its end as tables show it: …a40b532ccf9a), or the "
                "id of the run that waits for it, likewise")


def name_text(raw: str) -> tuple[str, str]:
    """`name=text` for a decision's text input: the text is kept as typed (never parsed as JSON)."""
    name, eq, text = raw.partition("=")
    if not eq or not name:
        raise argparse.ArgumentTypeError(f"expected name=text, got {raw!r}")
    return name, text


def add_commands(add: Any, sub: Any) -> None:
    """Register the commands. A value to send is `--value JSON`; `--json` means JSON output, as everywhere."""
    p = add(sub, "inbox", "pending decisions, checkpoints, agent requests and session messages", cmd_inbox)
    p.add_argument("--session", help="only what is addressed to this session")
    p = add(sub, "answer", "answer a decision (REQUEST CHOICE [--input name=text]) or a checkpoint "
            "(REQUEST --value JSON)", cmd_answer)
    p.add_argument("request_id", metavar="REQUEST", help=REQUEST_HELP)
    p.add_argument("choice", nargs="?", help="the decision's choice")
    p.add_argument("--input", action="append", default=[], type=name_text, metavar="NAME=TEXT",
                   help="text input of the chosen choice")
    p.add_argument("--value", type=json_value, metavar="JSON",
                   help="a checkpoint's answer as JSON (@FILE: from a file; -: from standard input)")
    p.add_argument("--session", help="the session answering (kept as provenance)")
    p = add(sub, "submit", "submit an agent step's output (waits for the worker's verdict)", cmd_submit)
    p.add_argument("request_id", metavar="REQUEST", help=REQUEST_HELP)
    p.add_argument("--value", type=json_value, required=True, metavar="JSON",
                   help="the output as JSON (@FILE: from a file; -: from standard input)")
    p.add_argument("--session", help="the session the request is addressed to")
    p = add(sub, "ack", "acknowledge a session message", cmd_ack)
    p.add_argument("message_id", metavar="MESSAGE",
                   help="a message id, a unique start of one, or its end as tables show it")


def _requests_table(requests: list[dict[str, Any]]) -> Table:
    table = Table(title="pending requests", title_justify="left")
    render.id_column(table, "request")
    table.add_column("kind", no_wrap=True)
    render.id_column(table, "run / node")
    for column in ("asks", "answers", "deadline"):
        table.add_column(column, overflow="fold")
    short = render.short_ids([r["request_id"] for r in requests] + [r["run_id"] for r in requests])
    for request in requests:
        contract = request.get("contract") or {}
        if request["kind"] == "decision":
            asks = f"{contract.get('title', '')}\n{contract.get('summary', '')}".strip()
            answers = ", ".join(
                key + (f" (--input {c['input']['name']}=…)" if c.get("input") else "")
                for key, c in (contract.get("choices") or {}).items())
        else:
            asks = str(contract.get("prompt", ""))
            answers = "--value JSON" + (f" matching {render.compact(contract['expected_output'])}"
                                        if contract.get("expected_output") else "")
        table.add_row(Text(short[request["request_id"]]), Text(request["kind"]),
                      Text(f"{short[request['run_id']]}\n{request['node_id']}"), Text(asks), Text(answers),
                      Text(render.request_clock(request)))
    return table


def _messages_table(messages: list[dict[str, Any]]) -> Table:
    table = Table(title="session messages", title_justify="left")
    render.id_column(table, "message")
    table.add_column("session", overflow="fold")
    table.add_column("kind", no_wrap=True)
    render.id_column(table, "run")
    table.add_column("body", overflow="fold")
    short = render.short_ids([m["message_id"] for m in messages] + [m.get("run_id") for m in messages])
    for message in messages:
        run_id = message.get("run_id")
        table.add_row(Text(short[message["message_id"]]), Text(str(message.get("session_id") or "—")),
                      Text(message["kind"]), Text(short.get(str(run_id), "") if run_id else ""),
                      Text(render.compact(message.get("body"), 100)))
    return table


#: Why the messages part is usually empty: a run without a session writes no session message.
NO_MESSAGES = "no session messages (notify nodes write them, and a run started with --session S tells S how it ended)"


def inbox_view(receipt: dict[str, Any]) -> Group:
    """Both parts of the inbox; an empty one is a line saying so, not a table with no rows."""
    requests, messages = receipt.get("requests") or [], receipt.get("messages") or []
    return Group(_requests_table(requests) if requests else Text("no pending requests", style="dim"),
                 _messages_table(messages) if messages else Text(NO_MESSAGES, style="dim"))


def cmd_inbox(ctx: Any, _parser: argparse.ArgumentParser) -> int:
    payload = {"session_id": ctx.args.session} if ctx.args.session else {}
    receipt = ctx.call("interaction.list", payload)
    ctx.show(receipt, inbox_view)
    return 0


def _find_request(ctx: Any, request_id: str) -> dict[str, Any] | None:
    for request in ctx.call("interaction.list", {}).get("requests", []):
        if request["request_id"] == request_id:
            return request
    return None


def request_named(ctx: Any, value: str) -> str:
    """The request `value` names: a request id (see cli/ids.py), else a run id whose run waits for
    exactly one request (`piwf start` prints the run's id; a run asks one thing at a time). A value that
    names neither is the request's NoMatch; a run that waits for none or several, one line saying so."""
    try:
        return str(ctx.resolve("request", value))
    except NoMatch as no_request:
        try:
            run_id = ctx.resolve("run", value)
        except NoMatch:
            raise no_request from None
    pending = [request["request_id"] for request in ctx.call("interaction.list", {}).get("requests", [])
               if request["run_id"] == run_id]
    if len(pending) == 1:
        return str(pending[0])
    if not pending:
        status = ctx.call("run.get", run_id=run_id).get("status")
        raise PiwfError(f"run {run_id} waits for no request (it is {status})")
    raise PiwfError(f"run {run_id} waits for {len(pending)} requests: name one of {', '.join(pending)}")


def cmd_answer(ctx: Any, parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    if args.choice is None and args.value is None:
        parser.error("give a CHOICE (decision) or --value JSON (checkpoint)")
    if args.choice is not None and args.value is not None:
        parser.error("a decision takes CHOICE [--input name=text], not --value")
    args.request_id = request_named(ctx, args.request_id)
    session = {"session_id": args.session} if args.session else {}
    if args.choice is None:
        receipt = ctx.call("checkpoint.answer", {"request_id": args.request_id, "input": args.value, **session})
    else:
        response: dict[str, Any] = {"choice": args.choice}
        if args.input:
            response["input"] = dict(args.input)
        request = _find_request(ctx, args.request_id)
        envelope = {"expected_revision": request["revision"]} if request else {}
        receipt = ctx.call("decision.answer", {"request_id": args.request_id, "response": response, **session},
                           **envelope)
    ctx.show(receipt, lambda r: Text(f"answered {args.request_id}: run {r.get('run_id')} resumes"))
    return 0


def cmd_submit(ctx: Any, _parser: argparse.ArgumentParser) -> int:
    payload = {"request_id": request_named(ctx, ctx.args.request_id), "value": ctx.args.value}
    if ctx.args.session:
        payload["session_id"] = ctx.args.session
    receipt = ctx.call("interaction.submit", payload)
    ctx.show(receipt, lambda r: Text(f"submission {r.get('submission_id')} {r.get('outcome')}"))
    return 0


def cmd_ack(ctx: Any, _parser: argparse.ArgumentParser) -> int:
    message_id = ctx.resolve("message", ctx.args.message_id)
    receipt = ctx.call("interaction.ack", {"message_id": message_id})
    ctx.show(receipt, lambda _r: Text(f"acknowledged {message_id}"))
    return 0
