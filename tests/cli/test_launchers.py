"""The bin/ launchers (`piwf`, `piwf-host`, `piwf-top`) outside a set-up checkout.

With no `.venv` beside them they fall back to `python3`; when that python
cannot import the dependencies they must say so in one line on stderr and
exit 1 instead of dying with a Python traceback. The scripts are copied into
a temp dir laid out like a checkout without `.venv` (the check happens before
the exec, so no package is needed there), and `python3` on PATH is a bare
venv without the dependencies. The real launchers in the checkout, with the
real `.venv`, must still work.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ["piwf", "piwf-host", "piwf-top"]
TIMEOUT_S = 60


@pytest.fixture
def bare_checkout(tmp_path: Path) -> Path:
    """tmp/checkout/bin/<the three launchers>, with no .venv."""
    root = tmp_path / "checkout"
    (root / "bin").mkdir(parents=True)
    for name in SCRIPTS:
        shutil.copy2(REPO / "bin" / name, root / "bin" / name)
    return root


def env_with_python3(bin_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture
def python3_without_deps(tmp_path: Path) -> dict[str, str]:
    """An environment whose `python3` is a bare venv that cannot import the dependencies."""
    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    env = env_with_python3(venv / "bin")
    probe = subprocess.run(["python3", "-c", "import pykka"], env=env, capture_output=True, timeout=TIMEOUT_S)
    assert probe.returncode != 0, "the bare venv's python3 can import pykka; the test would prove nothing"
    return env


@pytest.mark.parametrize("script", SCRIPTS)
def test_missing_venv_and_deps_gives_one_line(bare_checkout: Path, python3_without_deps: dict[str, str],
                                              tmp_path: Path, script: str) -> None:
    proc = subprocess.run([str(bare_checkout / "bin" / script), "--help"], env=python3_without_deps, cwd=tmp_path,
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith(f"{script}: the project's virtualenv is missing; run 'make test'"), line
    assert f"in {bare_checkout}," in line, line
    assert f"'pip install {bare_checkout}'" in line, line


def test_missing_venv_with_deps_still_runs(bare_checkout: Path, tmp_path: Path) -> None:
    """Without .venv but with a python3 that has the dependencies, the launcher runs it as before."""
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    wrapper = fake_bin / "python3"
    # A wrapper, not a symlink: a symlinked venv python does not find its pyvenv.cfg (nor its site-packages).
    wrapper.write_text(f'#!/bin/sh\nexec "{REPO / ".venv" / "bin" / "python"}" "$@"\n')
    wrapper.chmod(0o755)
    proc = subprocess.run([str(bare_checkout / "bin" / "piwf-host"), "--help"], env=env_with_python3(fake_bin),
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc
    assert "usage: piwf-host" in proc.stdout


def test_real_launcher_with_venv_still_works(tmp_path: Path) -> None:
    assert (REPO / ".venv" / "bin" / "python").exists(), "run `make test` first: the checkout has no .venv"
    proc = subprocess.run([str(REPO / "bin" / "piwf-host"), "--help"], env=env_with_python3(Path("/nonexistent")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc
    assert "usage: piwf-host" in proc.stdout
