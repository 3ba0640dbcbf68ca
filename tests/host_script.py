"""A host in a process of its own, for the SIGKILL tests (see `testsupport.HostScript`).

    python host_script.py --state-dir DIR [--database URL] [--lease-s S] [--max-workers N] [--warm-workers N]
                          [--reap-grace-s S] [--workflow SPEC --input JSON [--session ID]]
                          [--config-dir DIR --telegram-api-base URL --channel-poll-timeout-s S]

Starts a host (`start_host`); a host that starts as a standby (its database
names a live lease) prints `ROLE standby` and waits until it takes over. Then
it prints `EPOCH <n>` and, when a workflow is
given, starts one run (in session ID if given) and prints `RUN <run_id>`;
then waits until it is stopped or killed. Stdout lines are flushed at once:
the test polls them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from piwf_actors import HostConfig, start_host  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--database")
    parser.add_argument("--lease-s", type=float, default=5.0)
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--warm-workers", type=int, default=1)
    parser.add_argument("--reap-grace-s", type=float, default=0.5)
    parser.add_argument("--workflow")
    parser.add_argument("--input", default="null")
    parser.add_argument("--session")
    parser.add_argument("--config-dir")
    parser.add_argument("--telegram-api-base")
    parser.add_argument("--channel-poll-timeout-s", type=float, default=25.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="host %(process)d: %(name)s: %(message)s")
    host = start_host(HostConfig(state_dir=args.state_dir, database=args.database, lease_s=args.lease_s, max_workers=args.max_workers,
                                 warm_workers=args.warm_workers, reap_grace_s=args.reap_grace_s,
                                 config_dir=args.config_dir,
                                 channel_options={"telegram": {"api_base": args.telegram_api_base}},
                                 channel_poll_timeout_s=args.channel_poll_timeout_s))
    if host.role == "standby":
        # Another host's lease is on record (on a shared database: a SIGKILLed predecessor's, which
        # nothing here can prove dead): serve once it ran out and this host took over.
        print("ROLE standby", flush=True)
        if not host.wait_active(60):
            print("piwf test host: still a standby after 60 s", file=sys.stderr, flush=True)
            host.stop("never became active")
            return 1
    print(f"EPOCH {host.epoch}", flush=True)
    if args.workflow:
        receipt = host.start_run(args.workflow, json.loads(args.input), session_id=args.session)["receipt"]
        print(f"RUN {receipt['run_id']}", flush=True)
    host.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
