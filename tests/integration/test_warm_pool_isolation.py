"""A warm worker serves successive runs, and they share nothing.

Each launch executes the workflow snapshot as a fresh module (module state
starts over), and the worker puts back the environment, working directory
and sys.path a run changed.
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
