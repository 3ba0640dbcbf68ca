"""Id prefixes (`piwf show run_01m8m1b5`), the `ids.match` operation behind them, short ids in tables,
`--json` before or after the command, and `--version` of the three commands."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from cli_support import BIN, ok_json, piwf, short_dir, wait_status, wait_until

from piwf_actors import HostConfig, __version__, start_host
from piwf_actors.cli import ids
from piwf_actors.cli.render import short_ids
from piwf_actors.client import Client

FLOWS = textwrap.dedent('''
    from piwf_actors.workflows import action, checkpoint, compute, define_workflow, edge

    quick = define_workflow(name="quick", start_at="a", nodes={"a": compute(run=lambda ctx: {"ok": 1})}, edges=[])
    gate = define_workflow(name="gate", start_at="wait", nodes={"wait": checkpoint(prompt="a number?")}, edges=[])
    effectful = define_workflow(name="effectful", start_at="do", nodes={"do": action(run=lambda ctx: {"did": 1})},
                                edges=[])
''')


@pytest.fixture(scope="module")
def env() -> Iterator[dict[str, Any]]:
    state = short_dir("pci-")
    (state / "flows.py").write_text(FLOWS)
    host = start_host(HostConfig(state_dir=state, max_workers=2))
    try:
        flows = state / "flows.py"
        # Runs started within one second share their first 8 characters after "run_" (time-ordered ids).
        runs = [host.start_run(f"{flows}:quick", {"n": n})["receipt"]["run_id"] for n in range(12)]
        for run_id in runs:
            host.wait_for_run(run_id, timeout=30)
        yield {"state": state, "host": host, "flows": flows, "runs": runs}
    finally:
        host.stop("test module done")
        shutil.rmtree(state, ignore_errors=True)


def test_a_unique_prefix_names_a_run(env: dict[str, Any]) -> None:
    run_id = env["runs"][0]
    others = [r for r in env["runs"] if r != run_id]
    unique = next(run_id[:n] for n in range(5, len(run_id)) if not any(o.startswith(run_id[:n]) for o in others))
    shown = ok_json(piwf(env["state"], "show", unique, "--json"))
    assert shown["run_id"] == run_id
    assert ok_json(piwf(env["state"], "events", unique, "--json"))["events"][0]["kind"] == "run_created"
    assert ok_json(piwf(env["state"], "logs", unique, "--json"))["run_id"] == run_id
    # A table shows ids by their ends (`…` and 12 characters), and they name their run.
    table = piwf(env["state"], "list", "--limit", "12")
    assert table.returncode == 0, table.stderr
    short = [line.split("│")[1].strip() for line in table.stdout.splitlines() if line.startswith("│")]
    assert len(short) == 12 and all(s.startswith("…") and len(s) == 13 for s in short) and len(set(short)) == 12
    for end in short[:3]:
        assert ok_json(piwf(env["state"], "show", end, "--json"))["run_id"].endswith(end[1:])


def test_an_ambiguous_prefix_exits_2_listing_the_candidates(env: dict[str, Any]) -> None:
    common = env["runs"][0][:6]  # "run_01": all twelve (and more of this host's runs)
    result = piwf(env["state"], "show", common)
    assert result.returncode == 2, result
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"piwf: '{common}' is ambiguous") and lines[0].endswith(":")
    candidates = [line for line in lines[1:] if line != "…"]
    assert len(candidates) == 10 and lines[-1] == "…"  # at most 10, then a mark that there are more
    assert all(c.startswith(common) and len(c) == 30 for c in candidates)
    as_json = json.loads(piwf(env["state"], "--json", "show", common).stdout)
    assert as_json["outcome"] == "ambiguous" and len(as_json["matches"]) == 10 and as_json["more"] is True


def test_an_unknown_prefix_exits_1(env: dict[str, Any]) -> None:
    for args, message in ((("show", "run_01x"), "no run matches 'run_01x'"),
                          (("cancel", "run_01x"), "no run matches 'run_01x'"),
                          (("answer", "req_ffff", "go"), "no request matches 'req_ffff'"),
                          (("ack", "msg_zz"), "no message matches 'msg_zz'"),
                          (("effect", "resolve", "eff_zz", "confirm"), "no effect matches 'eff_zz'")):
        result = piwf(env["state"], *args)
        assert result.returncode == 1, args
        assert result.stderr.startswith(f"piwf: {message} (") and "ids look like " in result.stderr, result.stderr


def test_request_message_and_effect_prefixes(env: dict[str, Any]) -> None:
    host, flows = env["host"], env["flows"]
    run_id = host.start_run(f"{flows}:gate", {}, session_id="s-ids")["receipt"]["run_id"]
    host.wait_for_run(run_id, ("parked",), timeout=30)
    with Client(env["state"]) as client:
        request = next(r for r in client.request("interaction.list").receipt["requests"] if r["run_id"] == run_id)
    answered = piwf(env["state"], "answer", request["request_id"][:12], "--value", "7")
    assert answered.returncode == 0, answered.stderr
    assert request["request_id"] in answered.stdout  # the full id it stood for
    assert wait_status(env["state"], run_id, ("done",))["output"] == 7

    def summary() -> Any:
        with Client(env["state"]) as client:
            messages = client.request("interaction.list", {"session_id": "s-ids"}).receipt["messages"]
        return next((m for m in messages if m["run_id"] == run_id), None)

    message = wait_until(summary, 15, "the run's summary message")
    acked = piwf(env["state"], "ack", message["message_id"][:20])
    assert acked.returncode == 0 and message["message_id"] in acked.stdout, acked.stderr

    effect_run = host.start_run(f"{flows}:effectful", {})["receipt"]["run_id"]
    host.wait_for_run(effect_run, timeout=30)
    with Client(env["state"]) as client:
        effect_id = client.get(effect_run)["effects"][0]["effect_id"]
    # It resolves to the full id; the host then refuses: the effect is not ambiguous.
    refused = piwf(env["state"], "effect", "resolve", effect_id[:20], "confirm")
    assert refused.returncode == 1 and refused.stderr.startswith("piwf: rejected: ") and effect_id in refused.stderr


def test_ids_match_operation(env: dict[str, Any]) -> None:
    """The protocol side: {kind, prefix, limit?} → {matches, more}, read-only, refused for a bad kind."""
    runs = sorted(env["runs"])
    with Client(env["state"]) as client:
        full = client.request("ids.match", {"kind": "run", "prefix": runs[0]})
        assert full.outcome == "accepted" and full.receipt == {"matches": [runs[0]], "more": False}
        some = client.request("ids.match", {"kind": "run", "prefix": runs[0][:6], "limit": 3}).receipt
        assert len(some["matches"]) == 3 and some["more"] is True and some["matches"] == sorted(some["matches"])
        default = client.request("ids.match", {"kind": "run", "prefix": "run_"}).receipt
        assert len(default["matches"]) == 10 and default["more"] is True
        none = client.request("ids.match", {"kind": "effect", "prefix": "eff_zzzz"})
        assert none.outcome == "accepted" and none.receipt == {"matches": [], "more": False}
        assert client.match_ids("request", "req_") is not None
        for payload, error in (({"kind": "node", "prefix": "a"}, "unknown kind 'node'"),
                               ({"kind": "run", "prefix": ""}, "prefix must not be empty"),
                               ({"kind": "run"}, "payload.prefix is required"),
                               ({"kind": "run", "prefix": "r", "limit": -1}, "out of range"),
                               ({"kind": "run", "prefix": "r", "extra": 1}, "unknown payload field(s): extra")):
            answer = client.request("ids.match", payload)
            assert answer.outcome == "rejected" and error in (answer.error or ""), (payload, answer)
        # Many matches are capped at 100.
        capped = client.request("ids.match", {"kind": "run", "prefix": "run_", "limit": 5000}).receipt
        assert len(capped["matches"]) <= 100


def test_json_before_or_after_the_command(env: dict[str, Any]) -> None:
    run_id = env["runs"][1]
    for args in (("--json", "show", run_id), ("show", run_id, "--json"), ("show", "--json", run_id)):
        assert ok_json(piwf(env["state"], *args))["run_id"] == run_id, args
    for args in (("--json", "effect", "resolve", "eff_zz", "confirm"), ("effect", "resolve", "eff_zz", "retry",
                                                                         "--json")):
        result = piwf(env["state"], *args)
        assert result.returncode == 1 and json.loads(result.stdout)["outcome"] == "notFound", args
    listed = ok_json(piwf(env["state"], "list", "--json", "--limit", "3"))
    assert len(listed["runs"]) == 3 and all(len(run["run_id"]) == 30 for run in listed["runs"])  # full ids


@pytest.mark.parametrize("command", ["piwf", "piwf-host", "piwf-top"])
def test_version(command: str) -> None:
    result = subprocess.run([str(BIN / command), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{command} {__version__}"


def test_short_ids_are_ends_unique_among_the_rows() -> None:
    twin_a, twin_b = "run_01m8p" + "q" * 20 + "2", "run_01m9p" + "q" * 20 + "2"  # 22 last characters alike
    rows = ["run_01m8m1b53snnn7j59r08xq9pc7", "run_01m8m1b53snnn7j59r08xq9zzz", twin_a, twin_b,
            "req_0123456789abcdef0123456789abcdef", "chf_01m8zzzzzzzzzzzzzzzzzzzzzz-1", "nightly-2026-11-29",
            "run_nightly_2026_11_29", None]
    short = short_ids(rows)
    assert short["run_01m8m1b53snnn7j59r08xq9pc7"] == "…j59r08xq9pc7"  # `…` and 12 characters: its random end
    assert short["run_01m8m1b53snnn7j59r08xq9zzz"] == "…j59r08xq9zzz"
    # Two ids that share their last 12 characters show as many more as tell them apart.
    assert (short[twin_a], short[twin_b]) == ("…" + twin_a[-23:], "…" + twin_b[-23:])
    assert short["req_0123456789abcdef0123456789abcdef"] == "…456789abcdef"
    assert short["chf_01m8zzzzzzzzzzzzzzzzzzzzzz-1"] == "…zzzzzzzzzz-1"
    # An id a client chose is shown as it is: its end need not tell it apart from anything.
    assert short["nightly-2026-11-29"] == "nightly-2026-11-29"
    assert short["run_nightly_2026_11_29"] == "run_nightly_2026_11_29"
    assert len(short) == 8


def test_picking_among_candidates() -> None:
    assert ids.pick("run", "run_a", ["run_a", "run_ab"], False) == "run_a"  # an exact id wins
    assert ids.pick("run", "run_a", ["run_ab"], False) == "run_ab"
    with pytest.raises(ids.NoMatch, match="no run matches 'run_a'"):
        ids.pick("run", "run_a", [], False)
    with pytest.raises(ids.Ambiguous) as ambiguous:
        ids.pick("run", "run_a", [f"run_a{n:02d}" for n in range(12)], False)
    assert len(ambiguous.value.matches) == 10 and ambiguous.value.lines()[-1] == "…"
    deliveries = ["chf_01m8m1b53snnn7j59r08xq9pc7-1", "chf_01m8m1b53snnn7j59r08xq9pc7-2", "chf_01m8zz-1"]
    assert ids.resolve_among("delivery", "chf_01m8z", deliveries) == "chf_01m8zz-1"
    assert ids.resolve_among("delivery", "chf_9", deliveries) is None  # passed on as given
    with pytest.raises(ids.Ambiguous):
        ids.resolve_among("delivery", "chf_01m8m", deliveries)
    assert ids.resolve_among("delivery", deliveries[0], []) == deliveries[0]  # a full id: no lookup


def test_only_an_end_written_as_one_or_a_long_bare_argument_is_looked_up_as_an_end() -> None:
    # An id's end means a scan of every id: `…end`/`...end` always, a bare argument only when it is long
    # enough to be one copied from piwf-top (a short typo that starts nothing is not worth the scan).
    assert ids.tries("run", "…2mvr") == [("suffix", "2mvr")]
    assert ids.tries("run", "...2mvr") == [("suffix", "2mvr")]
    assert ids.tries("run", "01m8x") == [("prefix", "01m8x"), ("prefix", "run_01m8x")]
    assert ids.tries("run", "run_01m8x") == [("prefix", "run_01m8x")]
    assert ids.tries("run", "vqyrxvjp") == [("prefix", "vqyrxvjp"), ("prefix", "run_vqyrxvjp"),
                                            ("suffix", "vqyrxvjp")]
    runs = ["run_01m8m1b53snnn7j59r08xq9pc7", "run_01m8zzzzzzzzzzzzzzzzzzzzzz"]
    assert ids.resolve_among("run", "9pc7", runs) is None  # a short bare end: not an end
    assert ids.resolve_among("run", "…9pc7", runs) == runs[0]
    assert ids.resolve_among("run", "08xq9pc7", runs) == runs[0]
