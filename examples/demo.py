"""`make demo`: a host on a temporary state directory running the example workflows.

1. Starts a host through the embedding API (`start_host`).
2. Runs the workflows in examples/workflows/: a compute/shell pipeline, a
   branch via `switch`, a shell failure routed through `$result.outcome`, a
   loop bounded by `max_steps` (once within budget, once past it).
3. People in the loop, through the Unix socket with the client library: a
   release decision answered "ship", and one left unanswered that times out
   to its default response.
4. Decisions in Telegram: a fake Bot API on 127.0.0.1 (nothing leaves this
   machine) stands in for Telegram; a `[telegram.ops]` profile sends the
   release decision to the operators' chat with one button per choice, a
   simulated tap answers it, and the message is edited to show the outcome.
5. Schedules: a workflow file with an `every_s=1` schedule appears in the
   host's project (`piwf-host --project DIR`); the host loads it, it fires
   twice (one run per fire, ids derived from the fire time), and is paused
   through the socket.
6. A resource manager (examples/resources/): `piwf resource apply` of one
   site, reconciled into a `build-site` run whose output lands in the site's
   status, then deleted through the manager's finalizer.
7. Prints each run's nodes and results, the host status, and stops cleanly.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from piwf_actors import HostConfig, start_host  # noqa: E402
from piwf_actors.client import Client  # noqa: E402
from piwf_actors.testing.fake_telegram import FakeBotApi  # noqa: E402

WF = ROOT / "examples" / "workflows"
console = Console()


def short(value: Any, width: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def run_table(title: str, views: list[dict[str, Any]]) -> Table:
    table = Table(title=title, show_lines=True)
    for column in ("workflow", "status", "nodes (attempts) → output", "run output / error"):
        table.add_column(column, overflow="fold")
    for view in views:
        nodes = "\n".join(f"{n['node_id']} ({n['attempts']}) → {short(n['output'] if n['output'] is not None else n['error'], 50)}"
                          for n in view["nodes"])
        result = short(view["output"]) if view["status"] == "done" else short(view["error"])
        status = view["status"] + (f" ({view['park_reason']})" if view.get("park_reason") else "")
        table.add_row(Text(view["workflow"]), Text(status), Text(nodes), Text(result))
    return table


def wait_status(client: Client, run_id: str, statuses: tuple[str, ...], timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = client.get(run_id)
        if view["status"] in statuses:
            return view
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} stayed {view['status']}")
        time.sleep(0.05)


OPERATOR, OPS_CHAT = 1001, 2002


def telegram_config(directory: Path, token: str) -> Path:
    """channels.toml and credentials.toml (0600) for one profile routing `operator` decisions to OPS_CHAT."""
    (directory / "channels.toml").write_text(
        "[telegram.ops]\n"
        'credential = "ops_bot"\n'
        f"allowed_user_ids = [{OPERATOR}]\n"
        f"allowed_chat_ids = [{OPS_CHAT}]\n"
        'audiences = ["operator"]\n')
    credentials = directory / "credentials.toml"
    credentials.touch(mode=0o600)
    credentials.write_text(f'ops_bot = "{token}"\n')
    return directory


def wait_until(predicate: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.05)
    return value


def telegram_part(host: Any, bot: FakeBotApi) -> dict[str, Any]:
    """A release decision delivered to the fake chat, answered by a tap, and settled there."""
    console.print("\n[bold]Decisions in Telegram[/] (a fake Bot API on 127.0.0.1 stands in for Telegram)")
    seen = len(bot.messages(OPS_CHAT))
    run_id = host.start_run(str(WF / "release.py:release"), {"version": "2.0.0"})["receipt"]["run_id"]
    message = wait_until(lambda: len(bot.messages(OPS_CHAT)) > seen and bot.messages(OPS_CHAT)[-1],
                         "the decision in the chat")
    buttons = {row[0]["text"]: row[0]["callback_data"] for row in message["reply_markup"]["inline_keyboard"]}
    console.print(Text(f"chat {OPS_CHAT} got message {message['message_id']}:\n  "
                       + message["text"].replace("\n", "\n  ") + f"\n  buttons: {list(buttons)}"))
    ship = next(data for label, data in buttons.items() if label.startswith("Ship"))
    bot.tap(chat_id=OPS_CHAT, user_id=OPERATOR, message_id=message["message_id"], data=ship)
    console.print(Text(f"user {OPERATOR} taps “Ship it” …"))
    view = host.wait_for_run(run_id, timeout=30)
    edited = wait_until(lambda: next((m for m in bot.messages(OPS_CHAT)
                                      if m["message_id"] == message["message_id"] and m.get("edited")), None),
                        "the message to be settled")
    console.print(Text("the message now reads:\n  " + edited["text"].replace("\n", "\n  ")
                       + f"\n  (buttons: {edited['reply_markup'] or 'none'})"))
    calls = [call["method"] for call in bot.calls if call["method"] != "getUpdates"]
    console.print(Text(f"Bot API calls besides polling: {calls}"))
    return view


SCHEDULE_FILE = """
from piwf_actors.workflows import compute, define_schedule, define_workflow

heartbeat = define_workflow(name="heartbeat", start_at="beat",
                            nodes={"beat": compute(run=lambda ctx: {"beat_at": ctx.input["at"]})}, edges=[])
every_second = define_schedule(name="every-second", workflow=heartbeat, every_s=1,
                               input=lambda fire_time: {"at": fire_time.strftime("%H:%M:%S")})
"""


def schedule_part(host: Any, project: Path, state_dir: str) -> None:
    """A schedule file appears in the host's project: it is loaded, fires twice, and is paused."""
    console.print("\n[bold]Schedules[/] (a workflow file with an every_s=1 schedule appears in the host's project)")
    (project / ".piwf" / "workflows" / "heartbeat.py").write_text(SCHEDULE_FILE)
    with Client(state_dir, client_id="demo-scheduler") as client:
        def fired() -> list[dict[str, Any]]:
            listed = client.request("schedule.list").receipt["schedules"]
            return listed if listed and listed[0]["fire_count"] >= 2 else []

        wait_until(fired, "two fires of the schedule", timeout=30)
        paused = client.request("schedule.pause", {"name": "every-second"})
        console.print(Text(f"schedule.pause every-second → {paused.outcome}"))
        [item] = client.request("schedule.list").receipt["schedules"]
        runs = [run for run in client.request("run.list", {"workflow": "heartbeat"}).receipt["runs"]]
        views = [host.wait_for_run(run["run_id"], timeout=30) for run in reversed(runs)]
    table = Table(title=f"schedule {item['name']}: {item['timing']}, {item['fire_count']} fires, "
                        f"paused={item['paused']}")
    for column in ("run", "fired at", "kind", "output"):
        table.add_column(column)
    for view in views:
        table.add_row(Text(view.run_id), Text(time.strftime("%H:%M:%S", time.localtime(view["schedule"]["fire_time"]))),
                      Text(view["schedule"]["kind"]), Text(short(view.output)))
    console.print(table)


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with tempfile.TemporaryDirectory(prefix="piwf-demo-", dir="/tmp") as state_dir, \
            tempfile.TemporaryDirectory(prefix="piwf-demo-config-") as config_dir, \
            tempfile.TemporaryDirectory(prefix="piwf-demo-project-") as project, FakeBotApi() as bot:
        (Path(project) / ".piwf" / "workflows").mkdir(parents=True)
        os.environ["XDG_CONFIG_HOME"] = config_dir  # the demo's host runs no schedule of your own config dir
        host = start_host(HostConfig(state_dir=state_dir, max_workers=4,
                                     config_dir=telegram_config(Path(config_dir), bot.token),
                                     channel_options={"telegram": {"api_base": bot.url}}, channel_poll_timeout_s=1, projects=(project,)))
        console.print(f"[bold]host started[/] at epoch {host.epoch}, state in {state_dir}")
        try:
            starts = [
                ("pipeline.py:pipeline", {"text": "durable runs survive crashes"}),
                ("branch.py:triage", {"bytes": 5_000_000}),
                ("branch.py:triage", {"bytes": 12}),
                ("recover.py:fallback", {}),
                ("loop.py:counter", {"target": 3}),
                ("loop.py:counter", {"target": 50}),
            ]
            run_ids = [host.start_run(str(WF / spec), data)["receipt"]["run_id"] for spec, data in starts]
            views = [host.wait_for_run(run_id, timeout=60) for run_id in run_ids]
            console.print(run_table("Example workflows", views))

            console.print("\n[bold]People in the loop[/] (through the Unix socket)")
            with Client(state_dir, client_id="demo-operator") as client:
                run_id = client.start(str(WF / "release.py:release"), {"version": "1.4.0"}, session_id="ops")["run_id"]
                wait_status(client, run_id, ("parked",))
                request = client.request("interaction.list", {"session_id": "ops"}).receipt["requests"][0]
                contract = request["contract"]
                console.print(Text(f"decision {request['request_id']}: {contract['title']} — {contract['summary']} "
                                   f"(choices: {', '.join(contract['choices'])})"))
                answer = client.request("decision.answer", {"request_id": request["request_id"],
                                                            "response": {"choice": "ship"}},
                                        expected_revision=request["revision"])
                console.print(Text(f"answered ship → {answer.outcome}"))
                shipped = wait_status(client, run_id, ("done", "failed"))

                quick_id = client.start(str(WF / "release.py:release_quick"), {"version": "1.5.0-rc1"})["run_id"]
                console.print("release-quick: nobody answers; its decision times out after 2 s …")
                timed_out = wait_status(client, quick_id, ("done", "failed"), timeout=30)
                messages = client.request("interaction.list", {"session_id": "ops"}).receipt["messages"]
            console.print(run_table("Decisions", [shipped, timed_out]))
            console.print(Text(f"session 'ops' outbox: {[m['kind'] for m in messages]}"))
            console.print(run_table("Decided in Telegram", [telegram_part(host, bot)]))
            schedule_part(host, Path(project), state_dir)

            resources_part(state_dir)

            status = host.status()
            console.print(f"runs by status: {status['runs']}; writer: {status['writer']['commits']} commits, "
                          f"{status['writer']['commands']} commands")
        finally:
            host.stop("demo finished")
    # After the host and the fake Bot API have stopped: nothing of either may be left running.
    alive = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    console.print(f"host stopped cleanly; threads left: {alive or 'none'}")
    return 0 if not alive else 1


def resources_part(state_dir: Any) -> None:
    """One resource of the `sites` manager: applied, reconciled (a run, an effect), deleted (its finalizer)."""
    console.print("\n[bold]A resource manager[/] (examples/resources/.piwf/resource-managers/sites.py)")
    project = ROOT / "examples" / "resources"
    digest = hashlib.sha256((project / ".piwf" / "resource-managers" / "sites.py").read_bytes()).hexdigest()
    ref = {"manager": "sites", "key": "docs"}
    with Client(state_dir, client_id="demo-resources") as client:
        applied = client.request("resource.apply", {**ref, "spec": {"title": "project docs", "pages": ["index", "api"]},
                                                    "initial_status": {"phase": "new"}, "project_path": str(project),
                                                    "digest": digest})
        console.print(Text(f"resource.apply sites/docs → {applied.outcome}, generation "
                           f"{applied.receipt['generation']}"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            view = client.request("resource.get", ref).receipt
            if view["status"].get("phase") == "published" and not view["reconciling"]:
                break
            time.sleep(0.05)
        console.print(Text(f"status {json.dumps(view['status'], sort_keys=True)}; finalizers {view['finalizers']}; "
                           f"owned runs {[(r['workflow'], r['status']) for r in view['runs']]}"))
        client.request("resource.delete", ref)
        while time.monotonic() < deadline and client.request("resource.get", ref).outcome != "notFound":
            time.sleep(0.05)
        kinds = [e["kind"] for e in client.request("resource.events", ref).receipt["events"]]
        console.print(Text(f"events: {', '.join(kinds)}"))


if __name__ == "__main__":
    sys.exit(main())
