"""A host in a process of its own, for the SIGKILL tests of interactions.

    python interaction_host.py --state-dir DIR [--max-workers N] [--workflow SPEC --input JSON]

Starts a host, prints `EPOCH <n>`, and when a workflow is given starts one
run and prints `RUN <run_id>`; then waits until it is stopped or killed.
Lines are flushed at once: the test polls them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from piwf_actors import HostConfig, start_host  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--workflow")
    parser.add_argument("--input", default="null")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="host %(process)d: %(name)s: %(message)s")
    host = start_host(HostConfig(state_dir=args.state_dir, max_workers=args.max_workers, lease_s=5.0,
                                 warm_workers=1, reap_grace_s=0.5))
    print(f"EPOCH {host.epoch}", flush=True)
    if args.workflow:
        receipt = host.start_run(args.workflow, json.loads(args.input))["receipt"]
        print(f"RUN {receipt['run_id']}", flush=True)
    host.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
