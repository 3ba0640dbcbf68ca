"""The README's quickstart runs as written, from nothing to a run a person answered: its workflow file
saved in a new directory, then its console transcript typed in that directory — a real `piwf-host` in the
background, the shell commands that make its files, `piwf start`, `piwf inbox`, `piwf answer`, `piwf
logs`, `piwf host stop` from the installed commands — each command's output exactly as the README shows
it, with this run's ids in place of the README's and its deadline's date, time and time left read as
such (they are a day from when the test runs). Like a person, the test waits for the run to come to rest
(to ask, or to end) before the next command; the README's `/tmp/piwf-hello` paths move into a temporary
directory."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from testsupport import wait_for

from piwf_actors.client import Client

REPO = Path(__file__).resolve().parents[2]
README_STATE = "/tmp/piwf-hello"  # the README's paths, all under this prefix
RUN_ID = re.compile(r"run_[0-9a-z]{26}")
REQUEST_ID = re.compile(r"req_[0-9a-f]{32}")
ID_END = re.compile(r"…[0-9a-z]{12}")
AT_REST = ("parked", "done", "failed", "cancelled")
#: What changes with the day the transcript is typed: a deadline's date and time, and the time left.
CLOCK = ((re.compile(r"\b\d{4}-\d\d-\d\d\b"), "DATE"), (re.compile(r"\b\d\d:\d\d:\d\d\b"), "TIME"),
         (re.compile(r"\b\d+[dhm]\d*[hms]?\)"), "LEFT)"))


def clockless(line: str) -> str:
    for pattern, name in CLOCK:
        line = pattern.sub(name, line)
    return line


def quickstart() -> str:
    text = (REPO / "README.md").read_text()
    start = text.index("## Quickstart\n")
    return text[start:min(text.index("\n## ", start + 1), text.index("\n### ", start + 1))]


def transcript(section: str) -> list[tuple[str, list[str]]]:
    """(command, the output lines the README shows for it) of the section's console block."""
    [block] = re.findall(r"```console\n(.*?)```", section, flags=re.S)
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line.rstrip())
    return steps


def command_path() -> str:
    """The installed commands first (`piwf-host`, `piwf` beside this interpreter), as after the README's install."""
    here = Path(sys.executable).parent
    assert (here / "piwf-host").exists() and (here / "piwf").exists(), f"piwf is not installed in {here}"
    return f"{here}{os.pathsep}{os.environ.get('PATH', '')}"


def request_of(state: Path, run_id: str) -> str | None:
    """The pending request of the run, if it asks one yet."""
    with Client(state) as client:
        listed = client.request("interaction.list").receipt["requests"]
    return next((request["request_id"] for request in listed if request["run_id"] == run_id), None)


def at_rest(state: Path, run_id: str) -> dict[str, object] | None:
    """The run's view once it asked or ended: what a person waits for before the next command."""
    with Client(state) as client:
        view = client.get(run_id)
    return view if view["status"] in AT_REST else None


def test_the_quickstart_runs_as_written() -> None:
    section = quickstart()
    # The workflow (about 20 lines) and the transcript with its inbox table: no more.
    assert len(section.splitlines()) < 70, "the quickstart is longer than a quickstart"
    [source] = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    saved_as = re.match(r"# (\S+\.py)\n", source)
    assert saved_as is not None, "the workflow block does not say where it is saved"
    steps = transcript(section)
    assert [shlex.split(command, comments=True)[0] for command, _ in steps] == [
        "export", "piwf-host", "mkdir", "piwf", "piwf", "piwf", "piwf", "ls", "piwf"]

    # The README's ids, and which of its ends name them (every end it shows is one of its two ids').
    block = "\n".join(f"{command}\n" + "\n".join(shown) for command, shown in steps)
    readme_run, readme_request = RUN_ID.search(block).group(), REQUEST_ID.search(block).group()  # type: ignore[union-attr]
    assert set(ID_END.findall(block)) == {"…" + readme_run[-12:], "…" + readme_request[-12:]}
    ids: dict[str, str] = {}  # README id or end → this run's

    def ours(text: str) -> str:
        for theirs, mine in ids.items():
            text = text.replace(theirs, mine)
        return text

    base = Path(tempfile.mkdtemp(prefix="pqs-", dir="/tmp"))  # a short socket path
    directory = base / "new-directory"
    (directory / saved_as.group(1)).parent.mkdir(parents=True)
    (directory / saved_as.group(1)).write_text(source)
    env = {key: value for key, value in os.environ.items()
           if key not in ("PIWF_STATE_DIR", "PIWF_DATABASE_URL", "COLUMNS")}
    env["PATH"] = command_path()
    host: subprocess.Popen[bytes] | None = None
    try:
        for command, shown in steps:
            words = [ours(word).replace(README_STATE, f"{base}/piwf-hello")
                     for word in shlex.split(command, comments=True)]
            if words[0] == "export":
                env.update(assignment.split("=", 1) for assignment in words[1:])
                continue
            state = Path(env["PIWF_STATE_DIR"])
            if words[-1] == "&":  # the host, in the background, its log where the README sends it
                assert words[-3] == "2>" and not shown, words
                log = Path(words[-2])
                with log.open("wb") as stderr:
                    host = subprocess.Popen(words[:-3], cwd=directory, env=env, stderr=stderr, start_new_session=True)
                wait_for((state / "host.sock").exists, 60, lambda: f"the host to listen; its log: {log.read_text()}")  # noqa: B023
                continue
            if readme_run in ids:
                wait_for(lambda: at_rest(state, ids[readme_run]), 60, "the run to ask or end")  # noqa: B023
            if words[0] != "piwf":  # a plain shell command (making files, looking at them), as a shell runs it
                done = subprocess.run(["sh", "-c", command], cwd=directory, env=env, capture_output=True, text=True,
                                      timeout=60, stdin=subprocess.DEVNULL)
            else:
                done = subprocess.run([shutil.which(words[0], path=env["PATH"]) or words[0], *words[1:]],
                                      cwd=directory, env=env, capture_output=True, text=True, timeout=60,
                                      stdin=subprocess.DEVNULL)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
            if words[0] == "piwf" and words[1] == "start":
                started = RUN_ID.search(done.stdout)
                assert started is not None, done.stdout
                ids.update({readme_run: started.group(), "…" + readme_run[-12:]: "…" + started.group()[-12:]})
                asked = wait_for(lambda: request_of(state, ids[readme_run]), 60, "the run to ask")  # noqa: B023
                ids.update({readme_request: asked, "…" + readme_request[-12:]: "…" + asked[-12:]})
            assert [clockless(line.rstrip()) for line in done.stdout.splitlines()] == [
                clockless(ours(line)) for line in shown], command
        assert host is not None and host.wait(30) == 0  # `piwf host stop` stopped it cleanly
    finally:
        if host is not None and host.poll() is None:
            os.killpg(host.pid, signal.SIGKILL)
            host.wait(10)
        shutil.rmtree(base, ignore_errors=True)
