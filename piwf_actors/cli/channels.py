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
    p = add(channel, "recover", "settle an ambiguous delivery: confirm it arrived, or send it again",
            cmd_channel_recover)
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("message_id", metavar="MESSAGE",
                   help="the delivery's message id as `piwf channel status` lists it, or a unique prefix of one")
    p.add_argument("action", choices=("confirm", "retry"))


def status_view(status: dict[str, Any]) -> Group:
    """Profiles (running or why not) and ambiguous deliveries."""
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
                          Text(str(entry.get("error") or "")))
        parts.append(table)
    ambiguous = status.get("ambiguous") or []
    if ambiguous:
        parts.append(Text(f"{len(ambiguous)} deliver{'y' if len(ambiguous) == 1 else 'ies'} of unknown outcome "
                          "(piwf channel recover PROFILE MESSAGE confirm|retry):", style="yellow"))
        table = Table(box=None, header_style="bold")
        table.add_column("profile")
        table.add_column("message", no_wrap=True)
        table.add_column("purpose")
        table.add_column("request", no_wrap=True)
        for column in ("chat", "why"):
            table.add_column(column)
        short = render.short_ids([item.get("message_id") for item in ambiguous]
                                 + [item.get("request_id") for item in ambiguous])
        for item in ambiguous:
            cells = {key: str(item.get(key) or "") for key in
                     ("profile", "message_id", "purpose", "request_id", "chat_id", "error")}
            cells["message_id"] = short.get(cells["message_id"], cells["message_id"])
            cells["request_id"] = short.get(cells["request_id"], cells["request_id"])
            table.add_row(*(Text(value) for value in cells.values()))
        parts.append(table)
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
        # Only ambiguous deliveries can be recovered, and channel.status lists all of them.
        listed = ctx.call("channel.status").get("ambiguous") or []
        candidates = [str(item.get("message_id")) for item in listed if item.get("profile") == args.profile]
        args.message_id = ids.resolve_among("delivery", args.message_id, candidates) or args.message_id
    receipt = ctx.call("channel.recover", {"profile": args.profile, "message_id": args.message_id,
                                           "action": args.action})
    if ctx.json:
        ctx.emit_json(receipt)
    elif args.action == "retry":
        ctx.out.print(Text(f"delivery {args.message_id} will be sent again (as {receipt.get('next_message_id')})"))
    else:
        ctx.out.print(Text(f"delivery {args.message_id} confirmed as delivered"))
    return 0
