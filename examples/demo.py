"""`make demo`: start a host on a temporary state directory, show it, stop it.

Everything goes through the embedding API (`start_host`), the same one an
application uses to run the host's actors inside its own process.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import threading
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from piwf_actors import HostConfig, start_host  # noqa: E402


def show_status(console: Console, status: dict) -> None:
    lease = status["lease"]
    table = Table(title=f"piwf host — {status['state_dir']}", show_header=False)
    table.add_row("epoch", str(lease["epoch"]))
    table.add_row("pid", str(lease["pid"]))
    table.add_row("lease expires in", f"{lease['expires_at'] - lease['heartbeat_at']:.1f} s")
    writer = status["writer"]
    table.add_row("writer", f"{writer['commits']} commits, {writer['commands']} commands, queue {writer['queue_depth']}")
    table.add_row("runs", ", ".join(f"{k} {v}" for k, v in status["runs"].items()))
    console.print(table)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    console = Console()
    with tempfile.TemporaryDirectory(prefix="piwf-demo-") as state_dir:
        host = start_host(HostConfig(state_dir=state_dir, lease_s=3.0))
        try:
            show_status(console, host.status())
        finally:
            host.stop("demo finished")
        alive = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
        console.print(f"host stopped cleanly; threads left: {alive or 'none'}")
        return 0 if not alive else 1


if __name__ == "__main__":
    sys.exit(main())
