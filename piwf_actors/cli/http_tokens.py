"""`piwf http token add NAME [--role viewer|operator] | list | revoke NAME`: the HTTP door's bearer tokens.

The token is made here, printed once and never sent anywhere: the host gets
its sha256 only (`http_token.add`, over the socket, which admits only the
host's uid), stores it in the state database through its writer — so a
standby that takes over knows it — and never shows it again (docs/http.md).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.table import Table
from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, Ctx
from piwf_actors.http.auth import new_token, token_digest
from piwf_actors.http.routes import ROLES, VIEWER
from piwf_actors.timefmt import relative


def add_commands(add: Any, sub: Any) -> None:
    http = add(sub, "http", "the HTTP door: its tokens", None).add_subparsers(
        dest="http_command", required=True, metavar="ACTION")
    token = add(http, "token", "bearer tokens: add, list, revoke", None).add_subparsers(
        dest="token_command", required=True, metavar="ACTION")
    p = add(token, "add", "make a token and print it once (the host keeps its hash)", cmd_token_add,
            "Make a bearer token for the HTTP door, store its sha256 under NAME and print the token once: "
            "keep it; it cannot be shown again. A viewer reads; an operator also acts.")
    p.add_argument("name", metavar="NAME", help="the token's name (shown as who answered)")
    p.add_argument("--role", choices=ROLES, default=VIEWER, help="viewer (default) or operator")
    add(token, "list", "the tokens by name, with their roles (never the tokens)", cmd_token_list)
    p = add(token, "revoke", "revoke a token: it signs in nowhere from now on", cmd_token_revoke)
    p.add_argument("name", metavar="NAME", help="the token's name")


def cmd_token_add(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    token = new_token()
    receipt = ctx.call("http_token.add", {"name": ctx.args.name, "role": ctx.args.role,
                                          "token_sha256": token_digest(token)})
    if ctx.json:
        ctx.emit_json({**receipt, "token": token})
    else:
        ctx.out.print(Text(f"token {receipt['name']} ({receipt['role']}); shown once, keep it:"))
        ctx.out.out(token, highlight=False)  # raw: never wrapped, nothing around it to copy by mistake
    return EXIT_OK


def cmd_token_list(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    def render(receipt: dict[str, Any]) -> Any:
        tokens = receipt.get("tokens") or []
        if not tokens:
            return Text("no tokens: piwf http token add NAME")
        table = Table(box=None, header_style="bold", pad_edge=False)
        for column in ("name", "role", "created", "state"):
            table.add_column(column)
        now = time.time()
        for item in tokens:
            revoked = item.get("revoked_at")
            table.add_row(Text(str(item["name"])), Text(str(item["role"])), Text(relative(item["created_at"], now)),
                          Text(f"revoked {relative(revoked, now)}" if revoked else "live",
                               style="dim" if revoked else "green"))
        return table

    ctx.show(ctx.call("http_token.list"), render)
    return EXIT_OK


def cmd_token_revoke(ctx: Ctx, _parser: argparse.ArgumentParser) -> int:
    receipt = ctx.call("http_token.revoke", {"name": ctx.args.name})
    ctx.show(receipt, lambda r: Text(f"token {r['name']} revoked"))
    return EXIT_OK
