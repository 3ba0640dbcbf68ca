"""docs/testing.md's function workflow example runs as written: its test file (the workflow and its
tests in one module) passes under pytest with the `piwf` fixture the package installs (a pytest of
its own, in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from test_readme_python import python_block


def test_the_function_workflow_tests_of_docs_testing_pass_with_the_piwf_fixture(tmp_path: Path) -> None:
    tests = tmp_path / "project" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_reminder.py").write_text(python_block("# tests/test_reminder.py"))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "tests"], cwd=tests.parent, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout, result.stdout
