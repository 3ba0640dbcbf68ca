"""Helpers for the interaction tests: a process guard, socket clients, waits and database reads.

- `Harness` (the `ix` fixture in conftest.py) tags every process a test
  causes with an environment variable, starts in-process hosts, host
  subprocesses and `Client` connections for the test, and in teardown stops
  and kills all of them, then checks with psutil that no tagged process is
  left alive.
- `wait_for` polls a predicate with a deadline (never a bare sleep).
- `rows` / `events` (from testsupport) read the state database through the
  test's own read-only sqlite3 connection (works while no host runs).
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

from testsupport import (  # noqa: F401 (re-exported for the test modules)
    POLL_S,
    HostScript,
    ProcessGuard,
    events,
    host_script_args,
    replaced_host_lease_s,
    rows,
    wait_for,
)

from piwf_actors import HostHandle
from piwf_actors.client import Client

WF = Path(__file__).resolve().parent / "wf"
FLOWS = WF / "interaction_flows.py"
TAG_VAR = "PIWF_INTERACTIONS_TEST_TAG"
TERMINAL = ("done", "failed", "cancelled")


def flow(attr: str) -> str:
    """The `run.start` spec of a workflow in wf/interaction_flows.py."""
    return f"{FLOWS}:{attr}"


def assert_one_line(error: Any) -> str:
    assert isinstance(error, str) and error, f"expected a one-line error, got {error!r}"
    assert "\n" not in error and "\r" not in error and len(error) <= 1000, f"not one line: {error!r}"
    return error


# --- the oracle -----------------------------------------------------------------------------


class Oracle:
    """Lines `"<node_id> <run_id>"` written by the workflow nodes, one per execution."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def counts(self, run_id: str | None = None) -> collections.Counter[str]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            lines = []
        pairs = [line.split(" ", 1) for line in lines if line]
        return collections.Counter(node for node, run in pairs if run_id is None or run == run_id)


# --- the database, read by the test itself -----------------------------------------------------


def submissions(state_dir: Path, request_id: str) -> list[dict[str, Any]]:
    found = rows(state_dir, "SELECT submission_id, outcome, payload, provenance, submitted_at "
                            "FROM interactive_submission WHERE request_id = ? ORDER BY submitted_at", (request_id,))
    for item in found:
        item["payload"] = json.loads(item["payload"])
        item["provenance"] = json.loads(item["provenance"])
    return found


def attempts(state_dir: Path, run_id: str, node_id: str) -> list[dict[str, Any]]:
    return rows(state_dir, "SELECT attempt_id, status FROM node_attempt WHERE run_id = ? AND node_id = ?",
                (run_id, node_id))


# --- clients ------------------------------------------------------------------------------------


def run_view(client: Client, run_id: str) -> dict[str, Any]:
    answer = client.request("run.get", run_id=run_id)
    assert answer.outcome == "accepted", answer
    return answer.receipt


def wait_run(client: Client, run_id: str, statuses: tuple[str, ...] = TERMINAL, *, park_reason: str | None = None,
             timeout: float = 20.0) -> dict[str, Any]:
    """Poll `run.get` until the run reaches one of `statuses` (and `park_reason` if given)."""
    seen: dict[str, Any] = {}

    def reached() -> dict[str, Any] | None:
        view = seen["view"] = run_view(client, run_id)
        if view["status"] in statuses and (park_reason is None or view["park_reason"] == park_reason):
            return view
        return None

    return wait_for(reached, timeout, lambda: f"run {run_id} to reach {statuses} / {park_reason}: {seen.get('view')}")


def wait_waiting(client: Client, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    return wait_run(client, run_id, ("parked",), park_reason="waiting", timeout=timeout)


def listed(client: Client, session_id: str | None = None) -> dict[str, Any]:
    payload = {} if session_id is None else {"session_id": session_id}
    answer = client.request("interaction.list", payload)
    assert answer.outcome == "accepted", answer
    return answer.receipt


def requests_of(client: Client, run_id: str, session_id: str | None = None) -> list[dict[str, Any]]:
    return [r for r in listed(client, session_id)["requests"] if r["run_id"] == run_id]


def pending_request(client: Client, run_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """The one pending request of a run that parked waiting."""
    wait_waiting(client, run_id, timeout)
    found = requests_of(client, run_id)
    assert len(found) == 1, found
    return found[0]


def start(client: Client, attr: str, input: Any = None, *, session_id: str | None = None) -> str:
    receipt = client.start(flow(attr), input, session_id=session_id)
    return receipt["run_id"]


# --- processes ---------------------------------------------------------------------------------


class Harness(ProcessGuard):
    """Owns everything one test starts (hosts, host scripts, clients); see the module docstring."""

    def __init__(self, state_dir: Path, tag: str, log_dir: Path) -> None:
        super().__init__(TAG_VAR, tag, log_dir)
        self.state_dir = state_dir
        self.clients: list[Client] = []

    def host(self, **config: Any) -> HostHandle:
        return self.start_host(self.state_dir, **config)

    def client(self, client_id: str | None = None, timeout: float = 30.0) -> Client:
        client = Client(self.state_dir, client_id=client_id, timeout=timeout)
        self.clients.append(client)
        client.connect()
        return client

    def successor(self, **config: Any) -> HostHandle:
        """The host after a SIGKILLed host script, once it is active (`ProcessGuard.start_successor`)."""
        return self.start_successor(self.state_dir, **config)

    def host_script(self, *, max_workers: int = 2, workflow: str | None = None, input: Any = None) -> HostScript:
        """tests/host_script.py on the test's state directory (see `testsupport.HostScript`), with the
        lease of a host that is there to be SIGKILLed (`testsupport.replaced_host_lease_s`)."""
        return self.start_script(host_script_args(self.state_dir, max_workers=max_workers, workflow=workflow,
                                                  input=input, lease_s=replaced_host_lease_s()))

    def teardown(self) -> list[str]:
        for client in self.clients:
            client.close()
        return super().teardown()

