"""`piwf send RUN TOPIC` to a topic no node of the run's workflow waits on warns, and `--strict` refuses
it: `piwf send RUN sign-off` to a run that waits on `signoff` was accepted silently ("pending in the
mailbox", exit 0) and stayed there for good.

The topics come from the definition when the run was made (the host holds it then; it runs none of
the workflow's code for this): the constant topics of its `wait_message` nodes, included workflows'
too. A topic computed by a function could be anything, so a run with one is never warned about; nor
is a run made before the host knew its topics."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import ok_json, piwf, short_dir, wait_status, wait_until

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.client import Client
from piwf_actors.errors import Rejected

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import (
        define_workflow, edge, include_workflow, map_workflow, sleep, wait_message,
    )

    signoff = define_workflow(name="signoff", start_at="w", nodes={"w": wait_message("signoff")}, edges=[])
    later = define_workflow(name="later", start_at="nap", nodes={
        "nap": sleep(seconds=3600), "w": wait_message("go")}, edges=[edge("nap", "w")])
    computed = define_workflow(name="computed", start_at="w", nodes={
        "w": wait_message(lambda ctx: ctx.input["topic"])}, edges=[])
    mounted = define_workflow(name="mounted", start_at="inc", nodes={"inc": include_workflow(signoff)}, edges=[])
    fan = define_workflow(name="fan", start_at="m", nodes={"m": map_workflow(signoff, items=lambda ctx: [1, 2])},
                          edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pst-")
    flows = state / "flows.py"
    flows.write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        yield {"state": state, "host": host, "flows": flows}
    finally:
        host.stop("test module done")


def start(env: dict[str, Any], name: str, run_input: Any = None, status: str = "parked") -> str:
    host: HostHandle = env["host"]
    run_id = host.start_run(f"{env['flows']}:{name}", run_input or {}).run_id
    host.wait_for_run(run_id, (status,), timeout=60)
    return run_id


def mailbox(state: Path, run_id: str) -> dict[str, int]:
    with Client(state) as client:
        return client.get(run_id)["mailbox"]


def test_a_topic_no_node_waits_on_warns_and_strict_refuses_it(env: dict[str, Any]) -> None:
    state, run_id = env["state"], start(env, "signoff")
    sent = piwf(state, "send", run_id, "sign-off", "--value", '"ok"')
    assert sent.returncode == 0, sent.stderr
    assert "pending in the mailbox" in sent.stdout
    assert sent.stderr.strip() == (f"piwf: warning: no node of run {run_id}'s workflow waits for a message on "
                                   "'sign-off' (its topics: 'signoff'); it stays in the mailbox")
    assert mailbox(state, run_id) == {"sign-off": 1}
    refused = piwf(state, "send", run_id, "sign-off", "--strict")
    assert refused.returncode == 1, refused
    assert refused.stderr.strip() == (f"piwf: rejected: no node of run {run_id}'s workflow waits for a message on "
                                      "'sign-off' (its topics: 'signoff'); nothing was sent")
    assert mailbox(state, run_id) == {"sign-off": 1}  # the refused one was not added
    as_json = json.loads(piwf(state, "send", run_id, "sign-off", "--json").stdout)
    assert as_json["topics"] == ["signoff"]  # the receipt says which topics the run can wait on
    taken = piwf(state, "send", run_id, "signoff", "--strict")
    assert taken.returncode == 0 and taken.stderr == "" and "consumed by" in taken.stdout, taken
    assert wait_status(state, run_id, ("done",))["output"] is None


def test_a_topic_a_later_node_waits_on_is_no_warning(env: dict[str, Any]) -> None:
    """Sent before the run gets to its wait (it sleeps first): the message waits for it, no warning."""
    state, run_id = env["state"], start(env, "later")
    early = piwf(state, "send", run_id, "go", "--strict")
    assert early.returncode == 0 and early.stderr == "", early
    assert "warning" in piwf(state, "send", run_id, "gogo").stderr
    assert piwf(state, "cancel", run_id).returncode == 0


def test_included_and_child_workflows_have_their_topics(env: dict[str, Any]) -> None:
    state = env["state"]
    mounted = start(env, "mounted")
    assert piwf(state, "send", mounted, "signoff", "--strict").returncode == 0
    wait_status(state, mounted, ("done",))
    fan = start(env, "fan")
    with Client(state) as client:
        children = wait_until(lambda: [c["run_id"] for c in client.get(fan)["children"]["runs"]
                                       if c["status"] == "parked"] if len(client.get(fan)["children"]["runs"]) == 2
                              and all(c["status"] == "parked" for c in client.get(fan)["children"]["runs"])
                              else None, 60, "both children waiting")
    assert "warning" in piwf(state, "send", fan, "signoff").stderr  # the parent waits for its children only
    for child in children:
        assert piwf(state, "send", child, "signoff", "--strict").returncode == 0
    wait_status(state, fan, ("done",))


def test_a_computed_topic_could_be_any_so_nothing_is_said(env: dict[str, Any]) -> None:
    state, run_id = env["state"], start(env, "computed", {"topic": "t-42"})
    odd = piwf(state, "send", run_id, "anything", "--strict")
    assert odd.returncode == 0 and odd.stderr == "", odd
    assert "topics" not in ok_json(piwf(state, "send", run_id, "t-42", "--json"))
    wait_status(state, run_id, ("done",))


def test_a_restart_knows_the_topics_of_the_code_it_runs(env: dict[str, Any]) -> None:
    state, run_id = env["state"], start(env, "signoff")
    assert piwf(state, "cancel", run_id).returncode == 0
    wait_status(state, run_id, ("cancelled",))
    for extra in ((), ("--same-code",)):
        again = ok_json(piwf(state, "restart", run_id, *extra, "--json"))["run_id"]
        wait_status(state, again, ("parked",))
        assert "its topics: 'signoff'" in piwf(state, "send", again, "nope").stderr, extra
        assert piwf(state, "cancel", again).returncode == 0
        wait_status(state, again, ("cancelled",))
        run_id = again


def test_the_embedding_handle_and_the_client_speak_strict_too(env: dict[str, Any]) -> None:
    host: HostHandle = env["host"]
    run_id = start(env, "signoff")
    with pytest.raises(Rejected, match="waits for a message on 'nope'"):
        host.send_message(run_id, "nope", strict=True)
    receipt = host.send_message(run_id, "nope")
    assert receipt.extra["topics"] == ["signoff"] and receipt.status == "pending"
    with Client(env["state"]) as client:
        assert client.send_message(run_id, "signoff", strict=True)["status"] == "consumed"
    wait_status(env["state"], run_id, ("done",))
