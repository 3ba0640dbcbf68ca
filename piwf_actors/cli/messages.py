"""`piwf send`: a message into a run's mailbox (`message.send`), for its `wait_message` on the topic.

The host records the request under the client's idempotency key, so a resend is the same message
(`adopted`, never a second one). Without `--key` each `piwf send` is a new message; with
`--key K` the key names the message across invocations, which needs the same client id each
time (`context.keyed_client_id`). A message to a run that has ended is refused (exit 1).

A topic no node of the run's workflow waits on (the receipt's `topics`, which the host stored when it
made the run) is sent with a warning on stderr: it would stay in the mailbox for good. `--strict` has
the host refuse it instead (exit 1, nothing sent). A run whose workflow computes a topic could wait on
any: nothing is said.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, Ctx, keyed_client_id
from piwf_actors.cli.values import json_value


def add_commands(add: Any, sub: Any) -> None:
    p = add(sub, "send", "send a message to a run (for its wait_message on TOPIC)", cmd_send,
            "Put a message into a run's mailbox on TOPIC: a wait_message on that topic takes it (now if the run "
            "waits for it, else when it gets there), once, in send order. With --key, sending again under the "
            "same key is the same message, not a second one. A run that has ended refuses it (exit 1). A topic no "
            "node of the run's workflow waits on is sent with a warning, or refused with --strict.")
    p.add_argument("run_id", metavar="RUN",
                   help="a run id, a unique start of one, or its end as tables show it (…3d010ynt2tmw)")
    p.add_argument("topic", metavar="TOPIC", help="the topic the run waits on")
    p.add_argument("--value", type=json_value, default=None, metavar="JSON",
                   help="the message's payload as JSON (the wait_message node's output; default null); @FILE reads "
                        "it from a file, - from standard input")
    p.add_argument("--key", metavar="KEY",
                   help="idempotency key: a send under a key used before is that message again, not a new one")
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 1) a topic no node of the run's workflow waits on, instead of a warning")


def receipt_line(receipt: dict[str, Any], adopted: bool = False) -> Text:
    """`sent msg_… to run_… on go (seq 1): consumed by wait_…` (or `: pending in the mailbox`)."""
    line = Text("already sent " if adopted else "sent ")
    line.append(str(receipt.get("message_id")), style="bold")
    line.append(f" to {receipt.get('run_id')} on {receipt.get('topic')} (seq {receipt.get('seq')}): ")
    if receipt.get("status") == "consumed":
        line.append(f"consumed by {receipt.get('consumed_by')}", style="green")
    else:
        line.append("pending in the mailbox", style="yellow")
    return line


def cmd_send(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    args = ctx.args
    if args.key:
        ctx.client_id = keyed_client_id()  # before the first request: the key means one message for this user
    run_id = ctx.resolve("run", args.run_id)
    payload = {"run_id": run_id, "topic": args.topic, "payload": args.value}
    if args.strict:
        payload["strict"] = True  # absent otherwise: a resend of a send made before --strict existed matches
    answer = ctx.answer("message.send", payload, idempotency_key=args.key)
    receipt = answer.receipt or {}
    topics = receipt.get("topics")
    if isinstance(topics, list) and args.topic not in topics:
        ctx.note(f"piwf: warning: no node of run {run_id}'s workflow waits for a message on {args.topic!r} "
                 f"({'its topics: ' + ', '.join(repr(t) for t in topics) if topics else 'it has no wait_message node'})"
                 "; it stays in the mailbox")
    if ctx.json:
        ctx.emit_json(receipt)
        return EXIT_OK
    adopted = answer.outcome == "adopted"
    ctx.out.print(receipt_line(receipt, adopted), soft_wrap=True)
    if adopted:
        # The stored receipt is the first send's: the message may have been consumed since.
        ctx.note(f"piwf: a message was sent under key {args.key!r} before: that one is shown, no new message "
                 "was sent")
    return EXIT_OK
