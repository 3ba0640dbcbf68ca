"""docs/http.md's "Webhooks": its `[release]` table and its curl + openssl block, run as the page shows them
against a real host (its port put in place of 8080), with a secret made as the page says."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from http_support import start_door
from testsupport import wait_for

from piwf_actors.client import Client

ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "docs" / "http.md").read_text().split("## Webhooks", 1)[1].split("\n## ", 1)[0]


def _block(language: str) -> str:
    return SECTION.split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.mark.skipif(not all(shutil.which(tool) for tool in ("curl", "openssl")), reason="curl and openssl")
def test_the_webhook_example_runs_against_a_real_host(state_dir: Path) -> None:
    release = _block("toml").split("\n[approvals]", 1)[0]  # the other table needs a secret of its own
    state_dir.mkdir(mode=0o700, exist_ok=True)
    (state_dir / "hooks.toml").write_text(release)
    env = {**os.environ, "PIWF_STATE_DIR": str(state_dir)}
    subprocess.run(["bash", "-e", "-c", 'openssl rand -hex 32 > "$PIWF_STATE_DIR/release.secret"; '
                    'chmod 600 "$PIWF_STATE_DIR/release.secret"'], env=env, check=True, timeout=30)
    host, base = start_door(state_dir)
    try:
        script = _block("sh").replace("http://127.0.0.1:8080", base)
        assert base in script
        done = subprocess.run(["bash", "-e", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env=env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["201", "200", "401", "401"], done.stdout
        with Client(state_dir) as client:
            runs = client.request("run.list", {"workflow": "on_push"}).receipt["runs"]
            assert len(runs) == 1

            def finished() -> dict[str, Any] | None:
                view = client.request("run.get", {}, run_id=runs[0]["run_id"]).receipt
                return view if view["status"] in ("done", "failed") else None

            view = wait_for(finished, 30, "the hook's run finished")
        assert view["output"] == {"branch": "main", "head": "9fceb02", "commits": 1}
    finally:
        host.stop("test teardown")
