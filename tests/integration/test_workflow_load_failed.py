"""The worker executes the stored snapshot and refuses one whose definition differs.

A workflow whose shape depends on the environment resolves to one digest in
the host (where the variable is set) and to another in the worker (spawned
before it was set): the run fails with `workflow_load_failed` instead of
running code other than what was started.
"""

from __future__ import annotations

import textwrap

import pytest

from piwf_actors import HostConfig, start_host

FLOW = textwrap.dedent('''
    import os
    from piwf_actors.workflows import compute, define_workflow

    VARIANT = os.environ.get("PIWF_TEST_VARIANT", "a")
    if VARIANT == "boom":
        raise RuntimeError("cannot load here")

    shifty = define_workflow(name="shifty", start_at=f"step_{VARIANT}",
                             nodes={f"step_{VARIANT}": compute(run=lambda ctx: {"variant": VARIANT})}, edges=[])
''')


@pytest.mark.parametrize(("worker_variant", "host_variant", "why"), [
    (None, "b", "the worker's definition has another digest"),
    ("boom", None, "the snapshot raises when the worker executes it"),
])
def test_snapshot_that_does_not_load_the_same_fails_the_run(state_dir, tmp_path, monkeypatch, worker_variant,
                                                            host_variant, why):
    (tmp_path / "shifty.py").write_text(FLOW)
    if worker_variant:
        monkeypatch.setenv("PIWF_TEST_VARIANT", worker_variant)
    # Warm workers are spawned now, with the environment as it is at this point.
    with start_host(HostConfig(state_dir=state_dir, max_workers=1, warm_workers=1)) as host:
        if host_variant:
            monkeypatch.setenv("PIWF_TEST_VARIANT", host_variant)
        else:
            monkeypatch.delenv("PIWF_TEST_VARIANT", raising=False)
        run_id = host.start_run(f"{tmp_path / 'shifty.py'}:shifty")["receipt"]["run_id"]
        view = host.wait_for_run(run_id, timeout=30)
    assert view["status"] == "failed", why
    assert view["error"]["code"] == "workflow_load_failed", why
    assert view["nodes"] == []  # nothing of the mismatched definition ran
