"""`piwf channel status | reload | recover`: the decision channels of a running host."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from piwf_actors.cli import ids, render


def add_commands(add: Any, sub: Any) -> None:
    channel = add(sub, "channel", "decision channels (Telegram …)", None).add_subparsers(
        dest="channel_command", required=True, metavar="ACTION")
    add(channel, "status", "configured profiles, whether they run, and deliveries waiting for a person",
        cmd_channel_status)
    add(channel, "reload", "re-read channels.toml and credentials.toml; restart changed profiles", cmd_channel_reload)
    p = add(channel, "recover", "settle a waiting delivery: confirm it arrived, send it again, or try now",
            cmd_channel_recover)
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("message_id", metavar="MESSAGE",
                   help="the delivery's message id as `piwf channel status` lists it, or a unique prefix of one")
    p.add_argument("action", choices=("confirm", "retry"))


def _table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    table = Table(box=None, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=column in ("message", "request"))
    for row in rows:
        table.add_row(*(Text(value) for value in row))
    return table


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def status_view(status: dict[str, Any]) -> Group:
    """Profiles (running or why not), then every message that waits for something: not sent yet,
    of unknown outcome, or showing buttons that no longer answer; and chats that moved."""
    parts: list[Any] = []
    if not status.get("configured"):
        parts.append(Text(f"no channels configured (no channels.toml in {status.get('config_dir', '?')})"))
    if status.get("error"):
        parts.append(Text(f"configuration refused: {status['error']}", style="red"))
    profiles = status.get("profiles") or []
    if profiles:
        table = Table(box=None, header_style="bold")
        for column in ("profile", "running", "problem"):
            table.add_column(column)
        for entry in profiles:
            table.add_row(Text(str(entry["profile"])),
                          Text("yes", style="green") if entry.get("running") else Text("no", style="red"),
                          Text(str(entry.get("error") or entry.get("problem") or ""),
                               style="red" if entry.get("error") else "yellow"))
        parts.append(table)
    listed = [item.get("message_id") for key in ("ambiguous", "undelivered", "unsettled")
              for item in status.get(key) or []]
    listed += [item.get("request_id") for key in ("ambiguous", "undelivered", "unsettled")
               for item in status.get(key) or []]
    short = render.short_ids(listed)

    def cut(value: Any) -> str:
        return short.get(str(value), str(value or ""))

    undelivered = status.get("undelivered") or []
    if undelivered:
        parts.append(Text(f"{_plural(len(undelivered), 'message', 'messages')} not sent yet, tried again "
                          "automatically (piwf channel recover PROFILE MESSAGE retry tries now):", style="yellow"))
        parts.append(_table(("profile", "message", "purpose", "request", "chat", "tries", "next try", "why"), [
            (str(item["profile"]), cut(item["message_id"]), str(item["purpose"]), cut(item["request_id"]),
             str(item["chat_id"]), str(item.get("attempts") or ""), render.moment(item.get("retry_at")),
             str(item.get("error") or "")) for item in undelivered]))
    ambiguous = status.get("ambiguous") or []
    if ambiguous:
        parts.append(Text(f"{_plural(len(ambiguous), 'delivery', 'deliveries')} of unknown outcome "
                          "(piwf channel recover PROFILE MESSAGE confirm|retry):", style="yellow"))
        parts.append(_table(("profile", "message", "purpose", "request", "chat", "why"), [
            (str(item["profile"]), cut(item["message_id"]), str(item["purpose"]), cut(item["request_id"]),
             str(item["chat_id"]), str(item.get("error") or "")) for item in ambiguous]))
    unsettled = status.get("unsettled") or []
    if unsettled:
        parts.append(Text(f"{_plural(len(unsettled), 'message', 'messages')} may still show buttons that no "
                          "longer answer, and cannot be edited yet:", style="yellow"))
        parts.append(_table(("profile", "message", "request", "chat", "why"), [
            (str(item["profile"]), cut(item["message_id"]), cut(item["request_id"]), str(item["chat_id"]),
             str(item.get("why") or "")) for item in unsettled]))
    moved = status.get("moved_chats") or []
    if moved:
        parts.append(Text(f"{_plural(len(moved), 'chat', 'chats')} moved (decisions follow; put the new id in "
                          "allowed_chat_ids of channels.toml):", style="yellow"))
        parts.append(_table(("profile", "chat", "now"), [
            (str(item["profile"]), str(item["chat_id"]), str(item["moved_to"])) for item in moved]))
    return Group(*parts)


def cmd_channel_status(ctx: Any, _parser: Any) -> int:
    ctx.show(ctx.call("channel.status"), status_view)
    return 0


def cmd_channel_reload(ctx: Any, _parser: Any) -> int:
    ctx.show(ctx.call("channel.reload"), status_view)
    return 0


def cmd_channel_recover(ctx: Any, _parser: Any) -> int:
    args = ctx.args
    if not ids.is_full("delivery", args.message_id):
        # Only ambiguous and failed deliveries can be recovered, and channel.status lists all of them.
        shown = ctx.call("channel.status")
        listed = (shown.get("ambiguous") or []) + (shown.get("undelivered") or [])
        candidates = [str(item.get("message_id")) for item in listed if item.get("profile") == args.profile]
        args.message_id = ids.resolve_among("delivery", args.message_id, candidates) or args.message_id
    receipt = ctx.call("channel.recover", {"profile": args.profile, "message_id": args.message_id,
                                           "action": args.action})
    if ctx.json:
        ctx.emit_json(receipt)
    elif args.action == "retry" and receipt.get("next_message_id"):
        ctx.out.print(Text(f"delivery {args.message_id} will be tried now (as {receipt['next_message_id']})"))
    elif args.action == "retry":
        ctx.out.print(Text(f"delivery {args.message_id} will be sent again as a new copy; the earlier copy's "
                           "buttons no longer answer"))
    else:
        ctx.out.print(Text(f"delivery {args.message_id} confirmed as delivered"))
    return 0
