"""docs/testing.md's example runs as written: its test file, beside docs/workflows.md's
`release` workflow in a project's `.piwf/workflows/release.py`, passes under pytest with the `piwf`
fixture the package installs (a pytest of its own, in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_readme_python import python_block, write_workflow


def test_the_readme_release_tests_pass_with_the_piwf_fixture(tmp_path: Path) -> None:
    project = tmp_path / "project"
    write_workflow(project, "release", python_block('name="release"'))
    tests = project / "tests"
    tests.mkdir()
    (tests / "test_release.py").write_text(python_block("def test_an_unanswered_release_stops_after_an_hour"))
    # The workflow's `pytest -q` node runs `pytest` from PATH: this interpreter's.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "tests"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout
