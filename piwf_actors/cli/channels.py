"""`piwf channel status | reload | recover`: the decision channels of a running host."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text


def add_commands(add: Any, sub: Any) -> None:
    channel = add(sub, "channel", "decision channels (Telegram …)", None).add_subparsers(
        dest="channel_command", required=True, metavar="ACTION")
    add(channel, "status", "configured profiles, whether they run, and deliveries waiting for a person",
        cmd_channel_status)
    add(channel, "reload", "re-read channels.toml and credentials.toml; restart changed profiles", cmd_channel_reload)
    p = add(channel, "recover", "settle an ambiguous delivery: confirm it arrived, or send it again",
            cmd_channel_recover)
    p.add_argument("profile", metavar="PROFILE")
    p.add_argument("message_id", metavar="MESSAGE", help="the delivery's message id, as `piwf channel status` lists it")
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
        for column in ("profile", "message", "purpose", "request", "chat", "why"):
            table.add_column(column)
        for item in ambiguous:
            table.add_row(*(Text(str(item.get(key) or "")) for key in
                            ("profile", "message_id", "purpose", "request_id", "chat_id", "error")))
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
    receipt = ctx.call("channel.recover", {"profile": args.profile, "message_id": args.message_id,
                                           "action": args.action})
    if ctx.json:
        ctx.emit_json(receipt)
    elif args.action == "retry":
        ctx.out.print(Text(f"delivery {args.message_id} will be sent again (as {receipt.get('next_message_id')})"))
    else:
        ctx.out.print(Text(f"delivery {args.message_id} confirmed as delivered"))
    return 0
