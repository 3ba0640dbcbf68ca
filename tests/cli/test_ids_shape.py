"""Ids round-trip (issue 22, edge 5): every run id has one shape, whatever made the run (a start, a
restart, a schedule, a fan-out), piwf-top's short form names its run back, and an id is accepted with or
without its kind, with a hint when nothing matches. Real host, real `bin/piwf` processes."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from piwf_actors import HostConfig, start_host
from piwf_actors.cli import ids as cli_ids
from piwf_actors.ids import derived_id, id_time, new_id
from piwf_actors.store.commands.child_runs import child_run_id
from piwf_actors.store.commands.runs import restart_id
from piwf_actors.top.cells import SHORT_ID, run_id_cell
from piwf_actors.workflows.schedule_time import fire_key, fire_run_id
from tests.cli.cli_support import ok_json, piwf, short_dir

RUN_ID = re.compile(r"run_[0-9a-hjkmnp-tv-z]{26}")  # new_id's: `run_` + 26 Crockford base32 characters

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import compute, define_workflow

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": 1})}, edges=[])
''')


def test_every_way_of_making_a_run_gives_the_same_shape() -> None:
    at = 1_800_000_000.25
    made = new_id("run", at)
    derived = derived_id("run", "some key", at)
    restarted = restart_id(made, 7, at=at)
    fired = fire_run_id("nightly", fire_key(at), at)
    attempt = new_id("att", at)
    child = child_run_id(made, "m", attempt, 3)
    for run_id in (made, derived, restarted, fired, child):
        assert RUN_ID.fullmatch(run_id), run_id
        assert cli_ids.is_full("run", run_id)
        assert abs(id_time(run_id) - at) < 0.001, run_id  # time-ordered: the time part leads
    # Deterministic where adoption needs it: the same inputs name the same run, others another.
    assert restart_id(made, 7, at=at) == restarted != restart_id(made, 8, at=at)
    assert restart_id(made, 7, "b", "digest", at=at) not in (restarted, restart_id(made, 7, "c", "digest", at=at))
    assert fire_run_id("nightly", fire_key(at), at) == fired != fire_run_id("hourly", fire_key(at), at)
    assert child_run_id(made, "m", attempt, 3) == child != child_run_id(made, "m", attempt, 4)
    assert derived_id("run", "some key", at) == derived != derived_id("run", "other key", at)


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pis-")
    (state / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        runs = [host.start_run(f"{state / 'flows.py'}:quick", {"n": n})["receipt"]["run_id"] for n in range(6)]
        for run_id in runs:
            host.wait_for_run(run_id, timeout=30)
        yield {"host": host, "state": state, "runs": runs}
    finally:
        host.stop()
        shutil.rmtree(state, ignore_errors=True)


def shown_id(env: dict[str, Any], *words: str) -> str:
    return str(ok_json(piwf(env["state"], "--json", "show", *words))["run_id"])


def test_what_piwf_top_shows_names_the_run_back(env: dict[str, Any]) -> None:
    run_id = env["runs"][0]
    short = run_id_cell(run_id, narrow=True).plain
    assert len(short) == SHORT_ID and short.startswith("…") and run_id.endswith(short[1:])  # the distinctive end
    assert shown_id(env, short) == run_id
    assert shown_id(env, short[1:]) == run_id  # copied without the …
    assert shown_id(env, "..." + short[-12:]) == run_id


def test_a_prefix_without_its_kind_names_the_run(env: dict[str, Any]) -> None:
    run_id = env["runs"][1]
    assert shown_id(env, run_id[4:]) == run_id  # the whole id without `run_`
    others = [r for r in env["runs"] if r != run_id]
    unique = next(run_id[:n] for n in range(6, len(run_id)) if not any(o.startswith(run_id[:n]) for o in others))
    assert shown_id(env, unique[4:]) == run_id


def test_no_match_says_what_ids_look_like(env: dict[str, Any]) -> None:
    result = piwf(env["state"], "show", "abc")
    assert result.returncode == 1
    assert re.fullmatch(r"piwf: no run matches 'abc' \(run ids look like run_[0-9a-z]{10}…; give the start of "
                        r"one, with or without run_, or its end\)", result.stderr.strip()), result.stderr


def test_a_restart_gets_an_id_of_the_same_shape_and_a_second_one_is_adopted(env: dict[str, Any]) -> None:
    parent = env["runs"][2]
    first = piwf(env["state"], "--json", "restart", parent, "--same-code")
    restarted = ok_json(first)["run_id"]
    assert RUN_ID.fullmatch(restarted) and restarted != parent
    again = json.loads(piwf(env["state"], "--json", "restart", parent, "--same-code").stdout)
    assert again["run_id"] == restarted  # the same revision's restart: adopted, not a second run
    env["host"].wait_for_run(restarted, timeout=30)
    assert shown_id(env, restarted[4:]) == restarted
