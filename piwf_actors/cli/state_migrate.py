"""`piwf state migrate --to URL`: move a stopped host's SQLite state into an empty PostgreSQL database.

Offline, like the read-only commands: it takes the state directory's host lock for the whole copy,
so no host can start on the SQLite file meanwhile (a running host makes it refuse). The copy and
its checks are `store/transfer.py`'s; this prints what was copied and what to do next.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from piwf_actors.cli.context import EXIT_OK, EXIT_USAGE, Ctx
from piwf_actors.errors import HostAlreadyRunning, Rejected
from piwf_actors.paths import StatePaths, parse_database_url


def add_command(add: Any, state_sub: Any) -> None:
    p = add(state_sub, "migrate", "copy this (stopped) host's SQLite state into an empty PostgreSQL database, "
            "then verify the copy", cmd_state_migrate)
    p.add_argument("--to", required=True, metavar="URL",
                   help="the empty PostgreSQL database, e.g. postgresql://piwf@/piwf?host=/run/postgresql")


def cmd_state_migrate(ctx: Ctx, parser: argparse.ArgumentParser) -> int:
    from piwf_actors.actors.hostlock import HostLock  # the store and the lock: only for this command
    from piwf_actors.store.engines.transfer import migrate_to_postgres, source_refusal, target_refusal

    try:
        target = parse_database_url(ctx.args.to)
    except ValueError as exc:
        parser.error(f"--to: {exc}")
    refusal = target_refusal(target)
    if refusal is not None:
        parser.error(refusal)
        return EXIT_USAGE
    paths = StatePaths.resolve(ctx.args.state_dir, getattr(ctx.args, "database", None))
    source = paths.database
    refusal = source_refusal(source)
    if refusal is not None:
        raise Rejected(refusal)
    try:
        lock = HostLock.acquire(paths.lock, str(paths.root)) if paths.root.is_dir() else None
    except HostAlreadyRunning as exc:
        raise Rejected(f"a host is running on {paths.root} ({exc}); stop it first (piwf host stop)") from None
    try:
        ctx.note(f"piwf: copying {source} into {target} …")
        result = migrate_to_postgres(source, target, progress=_progress(ctx))
    finally:
        if lock is not None:
            lock.release()
    if ctx.json:
        ctx.emit_json(result)
        return EXIT_OK
    # The summary is a line of its own: as the table's title it was wrapped to the table's width.
    ctx.out.print(Text(f"copied {result['rows']} rows in {result['seconds']} s (schema v{result['schema_version']}); "
                       "row counts and state.verify checked"), soft_wrap=True)
    table = Table("table", "rows")
    for name, rows in result["tables"].items():
        table.add_row(name, str(rows))
    ctx.out.print(table)
    ctx.out.print(Text(f"the SQLite file {source} is unchanged; start the host with "
                       f"--database '{target}' (or set PIWF_DATABASE_URL) to use the copy"))
    return EXIT_OK


def _progress(ctx: Ctx) -> Any:
    """Rows copied so far into a large table (every 10,000); the final counts are the table printed at the end."""
    def report(table: str, rows: int) -> None:
        if not ctx.json and rows:
            ctx.note(f"  {table}: {rows} rows so far …")

    return report
