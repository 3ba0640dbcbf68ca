"""A warm worker serves successive runs, and they share nothing.

Each launch executes the workflow snapshot as a fresh module (module state
starts over), and the worker puts back the environment, working directory
and sys.path a run changed. A warm worker keeps a snapshot's compiled code
(and the fingerprints of its code objects, for the digest) from one launch
to the next: what it keeps is immutable, so runs of the same snapshot still
start from fresh module state, and an edited file is a new snapshot.
"""

from __future__ import annotations

import textwrap

from piwf_actors import HostConfig, start_host

FLOW = textwrap.dedent('''
    import os, sys
    from piwf_actors.workflows import compute, define_workflow

    CALLS = []   # module state: a fresh module per launch means it is empty for every run

    def touch(ctx):
        CALLS.append(ctx.run_id)
        seen = {"calls": len(CALLS), "pid": os.getpid(), "leak": os.environ.get("PIWF_TEST_LEAK"),
                "cwd": os.getcwd(), "path_has_marker": "/piwf-marker" in sys.path}
        os.environ["PIWF_TEST_LEAK"] = ctx.run_id
        os.chdir("/")
        sys.path.append("/piwf-marker")
        return seen

    leaky = define_workflow(name="leaky", start_at="touch", nodes={"touch": compute(run=touch)}, edges=[])
''')


def test_runs_on_one_warm_worker_share_no_state(state_dir, tmp_path):
    (tmp_path / "leaky.py").write_text(FLOW)
    with start_host(HostConfig(state_dir=state_dir, max_workers=1, warm_workers=1)) as host:
        outputs = []
        for _ in range(3):
            run_id = host.start_run(f"{tmp_path / 'leaky.py'}:leaky")["receipt"]["run_id"]
            view = host.wait_for_run(run_id, timeout=30)
            assert view["status"] == "done", view["error"]
            outputs.append(view["output"])
    assert len({out["pid"] for out in outputs}) == 1, "the runs were not served by one warm worker"
    for out in outputs:
        assert out["calls"] == 1
        assert out["leak"] is None
        assert out["path_has_marker"] is False
    assert len({out["cwd"] for out in outputs}) == 1 and outputs[0]["cwd"] != "/"


def edited(version: int, padding: str) -> str:
    """A workflow file whose node reports its `version` and whether the module's state was fresh."""
    return textwrap.dedent(f'''
        import os
        from piwf_actors.workflows import compute, define_workflow

        SEEN = {{"count": 0}}  # module state, bumped by every call{padding}

        def report(ctx):
            SEEN["count"] += 1
            return {{"version": {version}, "count": SEEN["count"], "pid": os.getpid()}}

        flow = define_workflow(name="edited", start_at="report", nodes={{"report": compute(run=report)}}, edges=[])
    ''')


def test_an_edited_file_is_a_new_snapshot_for_a_warm_worker(state_dir, tmp_path):
    path = tmp_path / "edited.py"
    seen = []
    with start_host(HostConfig(state_dir=state_dir, max_workers=1, warm_workers=1)) as host:
        # Twice the first version (the second run reuses what the worker kept of the first), then an
        # edit (a longer file, so the host's resolver sees a new stamp too), then the edit twice.
        for version, padding in ((1, ""), (1, ""), (2, " (edited)"), (2, " (edited)")):
            path.write_text(edited(version, padding))
            run_id = host.start_run(f"{path}:flow")["receipt"]["run_id"]
            view = host.wait_for_run(run_id, timeout=30)
            assert view["status"] == "done", view["error"]
            seen.append((view["definition_digest"], view["output"]))
    assert len({out["pid"] for _, out in seen}) == 1, "the runs were not served by one warm worker"
    assert [out["version"] for _, out in seen] == [1, 1, 2, 2]
    assert [out["count"] for _, out in seen] == [1, 1, 1, 1]  # fresh module state in every run
    digests = [digest for digest, _ in seen]
    assert digests[0] == digests[1] and digests[2] == digests[3] and digests[0] != digests[2]
