"""docs/cli.md's "The `piwf` command" section stays true: its transcript runs as written (against a test
host, with the ids it printed in place of the page's), and every command form its table lists runs."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import REPO, LineReader, ok_json, piwf, popen, short_dir, wait_status, wait_until
from testsupport import hosts_on_postgres

from piwf_actors import HostConfig, HostHandle, start_host
from piwf_actors.client import Client

RUN_ID = re.compile(r"run_[0-9a-z]+")
REQUEST_ID = re.compile(r"req_[0-9a-f]+")
RUN_END = re.compile(r"…[0-9a-z]{12}")


def section() -> str:
    text = (REPO / "docs" / "cli.md").read_text()
    start = text.index("## The `piwf` command\n")
    return text[start:text.index("\n## ", start + 1)]


def transcript() -> list[str]:
    """The commands (`$ …` lines) of the section's console blocks."""
    blocks = re.findall(r"```console\n(.*?)```", section(), flags=re.S)
    return [line[2:] for block in blocks for line in block.splitlines() if line.startswith("$ ")]


def table_forms() -> list[str]:
    """Every `piwf …` form in the first column of the section's table (`\\|` read as `|`)."""
    forms = []
    for row in section().splitlines():
        if row.startswith("| `piwf"):
            first_cell = re.split(r"(?<!\\)\|", row)[1]
            forms += [form.replace("\\|", "|") for form in re.findall(r"`(piwf [^`]*)`", first_cell)]
    return forms


def substitute(word: str, run_id: str | None, request_id: str | None) -> str:
    """The page's ids → this test's: a run id prefix of the same length, a run id's end as a table shows it
    (`…` and 12 characters), the request prefix the hint gave."""
    word = RUN_ID.sub(lambda match: (run_id or "?")[:len(match.group())], word)
    word = RUN_END.sub(lambda _match: "…" + (run_id or "?")[-12:], word)
    return REQUEST_ID.sub(lambda _match: request_id or "?", word)


#: A schedule for the `piwf schedule` forms: hourly, so it does not fire during the test by itself.
SCHEDULE_FILE = """
from piwf_actors.workflows import compute, define_schedule, define_workflow

tock = define_workflow(name="tock", start_at="t", nodes={"t": compute(run=lambda ctx: {"tock": True})}, edges=[])
hourly = define_schedule(name="hourly", workflow=tock, every_s=3600, catch_up="skip")
"""


@pytest.fixture
def host(state_dir: Path) -> Iterator[HostHandle]:
    project = short_dir("psc-")
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "hourly.py").write_text(SCHEDULE_FILE)
    handle = start_host(HostConfig(state_dir=state_dir, max_workers=2, projects=(str(project),)))
    try:
        yield handle
    finally:
        handle.stop("test done")
        shutil.rmtree(project, ignore_errors=True)


def test_the_transcript_runs_as_written(host: HostHandle, state_dir: Path) -> None:
    commands = transcript()
    assert commands[0].startswith("piwf-host "), commands[0]  # the test's host stands in for it
    state_env = {"PIWF_STATE_DIR": str(state_dir)}  # the commands name no state directory: the default
    assert len(commands) >= 8
    last_run: str | None = None
    request: str | None = None
    waiting: list[tuple[Any, LineReader]] = []
    for command in commands[1:]:
        words = shlex.split(command, comments=True)
        assert words[0] == "piwf", command
        args = [substitute(word, last_run, request) for word in words[1:]]
        if args[0] == "start" and "--wait" in args:
            process = popen(None, *args, extra_env=state_env)
            stderr = LineReader(process.stderr)
            last_run = stderr.until(lambda line: line.startswith("started ")).split()[1].rstrip(";")
            view = wait_status(state_dir, last_run, ("done", "failed", "cancelled", "parked"))
            if view["status"] == "parked":  # it waits for an answer: the transcript gives it next
                hint = stderr.until(lambda line: line.lstrip().startswith("piwf answer req_"))
                request = REQUEST_ID.search(hint).group()  # type: ignore[union-attr]
                waiting.append((process, stderr))
            else:
                assert process.wait(30) == 0, stderr.rest()
            continue
        result = piwf(None, *args, extra_env=state_env)
        assert result.returncode == 0, (command, args, result.stdout, result.stderr)
        if args[0] == "host":
            break
    for process, stderr in waiting:  # answered: the run ended and the wait with it
        assert process.wait(30) == 0, stderr.rest()
        assert "node ship succeeded" in stderr.rest()


FORMS_FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import agent, checkpoint, define_workflow, shell, wait_message

    gate = define_workflow(name="gate", start_at="wait", nodes={"wait": checkpoint(prompt="a number?")}, edges=[])
    summarize = define_workflow(name="summarize", start_at="step", nodes={
        "step": agent(prompt="Summarize", expected_output={"type": "object", "required": ["text"],
                                                           "properties": {"text": {"type": "string"}}})},
        edges=[])
    # Runs until the trigger file exists (so it can be paused, resumed and cancelled while it runs).
    gated = define_workflow(name="gated", start_at="wait", nodes={"wait": shell(
        command=lambda ctx: ["sh", "-c", 'while [ ! -e "$1" ]; do sleep 0.1; done', "sh", ctx.input["trigger"]])},
        edges=[])
    listen = define_workflow(name="listen", start_at="w", nodes={"w": wait_message("go", timeout_s=600)}, edges=[])
''')


@pytest.mark.slow  # kept out of make test's 10-minute budget: make test-slow (CI runs it too)
def test_every_command_form_of_the_table_runs(host: HostHandle, state_dir: Path, tmp_path: Path) -> None:
    forms = table_forms()
    assert len(forms) >= 18
    covered: set[str] = set()
    project = short_dir("pcr-")
    workflows = project / ".piwf" / "workflows"
    workflows.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "workflows" / "pipeline.py", workflows / "pipeline.py")
    shutil.copy(REPO / "examples" / "workflows" / "release.py", workflows / "release.py")
    (workflows / "forms.py").write_text(FORMS_FLOWS)

    def run(form: str, *args: str, code: int = 0) -> Any:
        assert form in forms, f"not a form of docs/cli.md's table: {form!r}"
        covered.add(form)
        result = piwf(state_dir, *args, cwd=project)
        assert result.returncode == code, (form, args, result.stdout, result.stderr)
        return result

    def pending(run_id: str, *session: str) -> dict[str, Any]:
        def find() -> Any:
            with Client(state_dir) as client:
                listed = client.request("interaction.list", {"session_id": session[0]} if session else {}).receipt
            return next((r for r in listed["requests"] if r["run_id"] == run_id), None)

        return wait_until(find, 30, f"the pending request of {run_id}")

    try:
        start = "piwf start WORKFLOW [--input JSON | key=value …] [--project DIR] [--session S] [--priority N] [--wait]"
        done = json.loads(run(start, "start", "pipeline", "--input", '{"text": "a b c"}', "--project", str(project),
                              "--session", "s1", "--priority", "3", "--wait", "--json").stdout)
        assert done["status"] == "done" and done["output"] == {"first": "a", "words": 3}
        run_id = done["run_id"]
        run(start, "start", str(REPO / "examples" / "workflows" / "pipeline.py"), "text=x y")
        listing = json.loads(run("piwf workflows [--project DIR]", "workflows", "--project", str(project),
                                 "--json").stdout)
        assert {"pipeline", "release", "gate", "summarize", "gated"} <= {w["name"] for w in listing["workflows"]}
        drawn = "piwf graph WORKFLOW|RUN [--format text|mermaid|dot] [--project DIR]"
        run(drawn, "graph", "release", "--format", "mermaid", "--project", str(project))
        assert "◀ ended here" in run(drawn, "graph", run_id[:20], "--format", "text").stdout
        run("piwf list [--status S] [--workflow NAME] [--since DATE] [--parent RUN] [--limit N]",
            "list", "--status", "done", "--workflow", "pipeline", "--since", "1h", "--parent", run_id[:20], "--limit",
            "5")
        run("piwf show RUN", "show", run_id[:20])  # a prefix (runs of one second share 12 characters)
        run("piwf logs RUN [NODE] [-f]", "logs", run_id, "count")
        run("piwf logs RUN [NODE] [-f]", "logs", run_id[:20], "-f")
        run("piwf events RUN [--after N] [-f]", "events", run_id, "--after", "2", "-f")
        run("piwf watch [RUN]", "watch", run_id)
        trigger = tmp_path / "trigger"
        gated = ok_json(piwf(state_dir, "start", "gated", f"trigger={trigger}", "--json", cwd=project))["run_id"]
        wait_status(state_dir, gated, ("running",))
        for action in ("pause", "resume", "cancel"):
            run("piwf cancel|pause|resume RUN", action, gated)
        listening = ok_json(piwf(state_dir, "start", "listen", "--json", cwd=project))["run_id"]
        run("piwf send RUN TOPIC [--value JSON] [--key KEY] [--strict]", "send", listening[:20], "go", "--value",
            '{"ok": 1}', "--key", "k1", "--strict")
        wait_status(state_dir, listening, ("done",))
        emit = "piwf emit NAME [--value JSON] [--key K]"
        emitted = json.loads(run(emit, "emit", "order.created", "--value", '{"n": 1}', "--key", "o1", "--json").stdout)
        assert "already recorded" in run(emit, "emit", "order.created", "--value", '{"n": 1}', "--key", "o1").stdout
        listed_events = json.loads(run("piwf event list [--name NAME] [--limit N]", "event", "list", "--name",
                                       "order.created", "--limit", "5", "--json").stdout)
        assert [item["event_id"] for item in listed_events] == [emitted["event_id"]]
        assert "started and woke nothing" in run("piwf event show EVENT", "event", "show", emitted["event_id"]).stdout
        run("piwf restart RUN [--from NODE] [--same-code]", "restart", run_id, "--from", "report", "--same-code")
        effect = done["effects"][0]["effect_id"]
        refused = run("piwf effect resolve EFFECT confirm|retry [--output JSON]",
                      "effect", "resolve", effect[:20], "confirm", "--output", "{}", code=1)
        assert refused.stderr.startswith("piwf: rejected: ")  # found by its prefix; it is not ambiguous

        run("piwf inbox [--session S]", "inbox", "--session", "s1")
        decision = ok_json(piwf(state_dir, "start", "release", "version=3", "--json", cwd=project))["run_id"]
        run("piwf answer REQUEST CHOICE [--input name=text]",
            "answer", pending(decision)["request_id"][:12], "fix", "--input", "instructions=tweak it")
        checkpoint = ok_json(piwf(state_dir, "start", "gate", "--json", cwd=project))["run_id"]
        run("piwf answer REQUEST --value JSON", "answer", pending(checkpoint)["request_id"], "--value", "5")
        agent_run = ok_json(piwf(state_dir, "start", "summarize", "--session", "a1", "--json", cwd=project))["run_id"]
        run("piwf submit REQUEST --value JSON [--session S]", "submit", pending(agent_run, "a1")["request_id"],
            "--value", '{"text": "short"}', "--session", "a1")
        with Client(state_dir) as client:
            messages = client.request("interaction.list", {"session_id": "s1"}).receipt["messages"]
        run("piwf ack MESSAGE", "ack", next(m for m in messages if m["run_id"] == run_id)["message_id"][:20])

        run("piwf status", "status")
        state = "piwf state status|verify|backup DEST|prune --before DATE [--apply]"
        run(state, "state", "status")
        run(state, "state", "verify")
        if hosts_on_postgres():  # docs/postgresql.md: a PostgreSQL state is backed up with pg_dump
            assert "pg_dump" in run(state, "state", "backup", str(tmp_path / "backup.db"), code=1).stderr
        else:
            run(state, "state", "backup", str(tmp_path / "backup.db"))
        run(state, "state", "prune", "--before", "2000-01-01", "--apply")
        channel = "piwf channel status | reload | recover PROFILE MESSAGE confirm|retry"
        run(channel, "channel", "status")
        run(channel, "channel", "reload")
        run(channel, "channel", "recover", "ops", "chf_nope-1", "confirm", code=1)
        schedule = "piwf schedule list|pause|resume|trigger NAME"
        listed = json.loads(run(schedule, "schedule", "list", "--json").stdout)
        assert [item["name"] for item in listed["schedules"]] == ["hourly"]
        run(schedule, "schedule", "pause", "hourly")
        run(schedule, "schedule", "resume", "hourly")
        fired = json.loads(run(schedule, "schedule", "trigger", "hourly", "--json").stdout)
        assert wait_status(state_dir, fired["run_id"], ("done",))["output"] == {"tock": True}
        resource = "piwf resource list|get|apply -f FILE|reconcile|delete|events"
        sites = REPO / "examples" / "resources"
        run(resource, "resource", "apply", "-f", str(sites / "docs-site.toml"), "--project", str(sites))
        run(resource, "resource", "reconcile", "sites", "docs")
        run(resource, "resource", "get", "sites", "docs")
        assert [item["key"] for item in json.loads(run(resource, "resource", "list", "--json").stdout)["resources"]] \
            == ["docs"]
        run(resource, "resource", "delete", "sites", "docs")
        run(resource, "resource", "events", "sites", "docs")
        run("piwf host stop", "host", "stop")
    finally:
        shutil.rmtree(project, ignore_errors=True)
    assert covered == set(forms), f"forms not run: {set(forms) - covered}"
