"""`UserCode`: workflow code on threads of its own, each phase bounded, hung threads abandoned and
counted; and loads of workflow files on it, which share no lock: a file whose import blocks holds up
no other file, while two loads whose sibling modules share a name still each get their own.

Blocking code waits on a `threading.Event` (in process) or a release file (in a workflow file) that
the test sets; nothing waits on a bare sleep."""

from __future__ import annotations

import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testsupport import gated_source, wait_for

from piwf_actors.errors import UserCodeTimeout, UserCodeUnavailable
from piwf_actors.workflows import user_code
from piwf_actors.workflows.resolver import WorkflowResolver
from piwf_actors.workflows.user_code import KEY, LOAD, UserCode, UserCodeLimits, phase, shared


@pytest.fixture
def releases() -> Iterator[list[threading.Event]]:
    """Events the test's blocked code waits on; all set at teardown so no thread is left waiting."""
    events: list[threading.Event] = []
    yield events
    for event in events:
        event.set()


def blocked(releases: list[threading.Event], kind: str = KEY, subject: str = "workflow 'w': its key"
            ) -> tuple[Any, threading.Event, threading.Event]:
    """Work that enters a phase, says it started, and waits for its release."""
    started, release = threading.Event(), threading.Event()
    releases.append(release)

    def work() -> str:
        with phase(kind, subject):
            started.set()
            release.wait(60)
        return "returned"

    return work, started, release


def test_a_call_past_its_limit_is_answered_and_its_thread_abandoned(releases: list[threading.Event]) -> None:
    code = UserCode(UserCodeLimits(key_timeout_s=0.2))
    work, started, release = blocked(releases)
    with pytest.raises(UserCodeTimeout) as caught:
        code.call(work)
    assert caught.value.one_line() == "workflow 'w': its key did not return within 0.2 s (key_timeout_s)"
    assert started.is_set()
    assert code.status()["hung"] == 1 and code.status()["oldest_hung"] == "workflow 'w': its key"
    release.set()
    wait_for(lambda: code.status()["hung"] == 0, 10, "the abandoned thread to return")
    assert code.call(lambda: "again") == "again"  # the thread serves again


def test_code_outside_a_phase_is_not_timed_and_threads_are_daemons() -> None:
    code = UserCode(UserCodeLimits(key_timeout_s=0.05))
    done = threading.Event()

    def work() -> bool:
        threading.Timer(0.2, done.set).start()
        done.wait(10)  # the host's own code between phases: no limit
        return threading.current_thread().daemon

    assert code.call(work) is True
    assert code.call(lambda: 1) == 1
    with phase(KEY, "anything"):  # not on a user-code thread: the block just runs
        assert shared("k", LOAD, "x", lambda: 2) == 2


def test_beyond_max_hung_calls_every_submission_is_refused_at_once(releases: list[threading.Event]) -> None:
    code = UserCode(UserCodeLimits(key_timeout_s=0.1, max_hung=2))
    for index in range(2):
        work, _started, _release = blocked(releases, subject=f"workflow 'w{index}': its concurrency key")
        with pytest.raises(UserCodeTimeout):
            code.call(work)
    with pytest.raises(UserCodeUnavailable) as caught:
        code.call(lambda: "never runs")
    line = caught.value.one_line()
    assert line.startswith("2 calls of workflow code are still running past their limits (the oldest: "
                           "workflow 'w0': its concurrency key, for "), line
    assert line.endswith("the host runs no more workflow code until one returns or the host restarts "
                         "(max_hung_user_code)"), line
    releases[0].set()
    wait_for(lambda: code.status()["hung"] == 1, 10, "one abandoned thread to return")
    assert code.call(lambda: "runs") == "runs"


def test_concurrent_runs_of_one_key_share_one_execution(releases: list[threading.Event]) -> None:
    code = UserCode(UserCodeLimits(load_timeout_s=30))
    runs: list[int] = []
    release = threading.Event()
    releases.append(release)

    def load() -> str:
        runs.append(1)
        release.wait(60)
        return "module"

    answers: list[Any] = []
    for _ in range(3):
        code.submit(lambda: shared(("file", 1), LOAD, "cannot load f: its import", load),
                    lambda result, error: answers.append((result, error)))
    wait_for(lambda: runs and code.status()["waiting"] == 2, 10, "one load and two callers waiting for it")
    release.set()
    wait_for(lambda: len(answers) == 3, 10, "three answers")
    assert answers == [("module", None)] * 3
    assert runs == [1]


def test_a_shared_run_past_its_limit_fails_its_waiters_at_once_afterwards(releases: list[threading.Event]) -> None:
    code = UserCode(UserCodeLimits(load_timeout_s=0.2))
    release = threading.Event()
    releases.append(release)
    runs: list[int] = []

    def load() -> None:
        runs.append(1)
        release.wait(60)

    def work() -> None:
        shared("file", LOAD, "cannot load f.py: its import", load)

    for _ in range(2):  # the owner, then a later caller that finds it hung
        with pytest.raises(UserCodeTimeout, match=r"^cannot load f\.py: its import did not finish within 0\.2 s "
                                                  r"\(load_timeout_s\)$"):
            code.call(work)
    assert runs == [1]
    assert code.status()["hung"] == 1  # the owner; the one that waited for it returned


def test_work_queued_while_every_thread_works_leaves_no_phantom_idle_thread(
        monkeypatch: pytest.MonkeyPatch, releases: list[threading.Event]) -> None:
    """A submission that waits for a thread (all MAX_WORKING of them busy) is taken by the next thread that
    finishes: the pool must not count that thread idle afterwards, or, once its threads have gone idle and
    exited, a later submission is queued for a thread that no longer exists and is never answered."""
    monkeypatch.setattr(user_code, "MAX_WORKING", 1)
    monkeypatch.setattr(user_code, "IDLE_S", 0.05)
    code = UserCode()
    first, started, release = blocked(releases)
    answers: list[Any] = []
    code.submit(first, lambda result, error: answers.append(result))
    assert started.wait(10)
    code.submit(threading.current_thread, lambda result, error: answers.append(result))  # waits: no thread free
    release.set()
    wait_for(lambda: len(answers) == 2, 10, "both calls answered")
    answers[1].join(10)  # the pool's only thread, gone once idle
    assert not answers[1].is_alive()
    later = threading.Event()
    code.submit(lambda: "answered", lambda result, error: later.set())
    assert later.wait(10), "a submission after the pool went idle was never run"


def test_close_answers_what_runs_and_refuses_new_work(releases: list[threading.Event]) -> None:
    code = UserCode()
    work, started, _release = blocked(releases)
    answers: list[Any] = []
    code.submit(work, lambda result, error: answers.append(error))
    assert started.wait(10)
    code.close()
    assert len(answers) == 1 and isinstance(answers[0], UserCodeUnavailable)
    assert answers[0].one_line() == "the host is stopping"
    with pytest.raises(UserCodeUnavailable, match="the host is stopping"):
        code.call(lambda: 1)


# --- loading files on user-code threads ----------------------------------------------------------

FLOW = '''
import helpers
from piwf_actors.workflows import compute, define_workflow

flow = define_workflow(name="flow", start_at="a", nodes={{"a": compute(run=lambda ctx: helpers.VALUE)}}, edges=[])
VALUE = helpers.VALUE
'''

HEALTHY = '''
from piwf_actors.workflows import compute, define_workflow

healthy = define_workflow(name="healthy", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
'''


@pytest.fixture
def dirs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    yield first, second
    for directory in (first, second):
        for name in ("helpers.release", "stuck.release"):
            (directory / name).touch()


def test_a_file_whose_import_blocks_holds_up_no_load_of_another_file(dirs: tuple[Path, Path]) -> None:
    first, second = dirs
    (first / "stuck.py").write_text(gated_source("stuck"))
    (second / "healthy.py").write_text(HEALTHY)
    resolver = WorkflowResolver()
    answers: list[Any] = []
    resolver.user_code.submit(lambda: resolver.resolve(str(first / "stuck.py"), None),
                              lambda result, error: answers.append(error))
    wait_for((first / "stuck.started").exists, 10, "the stuck import to start")
    loaded = threading.Event()
    threading.Thread(target=lambda: (resolver.resolve(str(second / "healthy.py"), None), loaded.set()),
                     daemon=True).start()
    assert loaded.wait(10), "loading another file waited for the stuck one"
    assert not answers  # the stuck one is still importing
    (first / "stuck.release").touch()
    wait_for(lambda: answers, 10, "the stuck load to end")


def test_concurrent_loads_whose_siblings_share_a_name_each_get_their_own(dirs: tuple[Path, Path]) -> None:
    first, second = dirs
    for directory, value in ((first, "one"), (second, "two")):
        (directory / "helpers.py").write_text(gated_source("helpers") + f"VALUE = {value!r}\n")
        (directory / "flow.py").write_text(textwrap.dedent(FLOW.format()))
    (second / "helpers.release").touch()  # the second directory's helpers imports at once
    resolver = WorkflowResolver()
    results: dict[str, Any] = {}

    def load(directory: Path) -> None:
        results[directory.name] = resolver.resolve(f"{directory / 'flow.py'}:flow", None)

    threads = [threading.Thread(target=load, args=(first,), daemon=True)]
    threads[0].start()
    wait_for((first / "helpers.started").exists, 10, "the first helpers to start importing")
    threads.append(threading.Thread(target=load, args=(second,), daemon=True))
    threads[1].start()
    wait_for(lambda: resolver.user_code.status()["running"] == 2, 10, "both loads under way")
    time_allowed = time.monotonic() + 10
    (first / "helpers.release").touch()
    for thread in threads:
        thread.join(max(0.1, time_allowed - time.monotonic()))
    assert set(results) == {"one", "two"}, results
    assert results["one"].workflow.nodes["a"].run(None) == "one"
    assert results["two"].workflow.nodes["a"].run(None) == "two"
    assert "helpers" not in sys.modules  # dropped after the loads, so the next one sees its current source
