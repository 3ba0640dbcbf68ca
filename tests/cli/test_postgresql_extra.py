"""PostgreSQL's driver is an extra (`pip install 'piwf_actors[postgresql]'`): without psycopg, naming a
PostgreSQL database gets one line that names the extra (no traceback), and SQLite needs no psycopg.

The commands run as real processes with psycopg made unimportable: a `sitecustomize` on PYTHONPATH puts
None under its name in `sys.modules`, so `import psycopg` fails the way it does where it is not installed.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import BIN, environ, piwf, short_dir, wait_until
from testsupport import kill_group_and_process

from piwf_actors.paths import DATABASE_URL_ENV

# Nothing listens there, and nothing may try: the driver is missing before any connection is made.
PG_URL = "postgresql://piwf@127.0.0.1:9/piwf"
EXTRA_HINT = "pip install 'piwf_actors[postgresql]'"
BLOCK_PSYCOPG = "import sys\n\nsys.modules['psycopg'] = None  # `import psycopg` raises ModuleNotFoundError\n"


@pytest.fixture
def no_psycopg_env() -> Iterator[dict[str, str]]:
    """The environment of a process in which psycopg cannot be imported."""
    shim = short_dir("pw-nopg-")
    (shim / "sitecustomize.py").write_text(BLOCK_PSYCOPG)
    env = environ()
    env.pop(DATABASE_URL_ENV, None)
    env["PYTHONPATH"] = ":".join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    probe = subprocess.run([sys.executable, "-c", "import psycopg"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "ModuleNotFoundError" in probe.stderr, "the shim did not hide psycopg"
    try:
        yield env
    finally:
        shutil.rmtree(shim, ignore_errors=True)


def _error_lines(stderr: str, prefix: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith(prefix)]


def test_host_on_postgresql_without_psycopg_names_the_extra_in_one_line(state_dir: Path,
                                                                        no_psycopg_env: dict[str, str]) -> None:
    proc = subprocess.run([str(BIN / "piwf-host"), "--state-dir", str(state_dir), "--database", PG_URL],
                          env=no_psycopg_env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = _error_lines(proc.stderr, "piwf-host: error:")
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("piwf-host: error: PostgreSQL needs psycopg, which cannot be imported here"), errors
    assert errors[0].endswith(EXTRA_HINT) and len(errors[0]) <= 1000, errors


def test_offline_read_of_a_postgresql_database_without_psycopg_names_the_extra(
        state_dir: Path, no_psycopg_env: dict[str, str]) -> None:
    # No host runs on state_dir: `piwf list` reads the named database itself.
    proc = subprocess.run([str(BIN / "piwf"), "list", "--state-dir", str(state_dir), "--database", PG_URL],
                          env=no_psycopg_env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = _error_lines(proc.stderr, "piwf: error:")
    assert len(errors) == 1 and errors[0].endswith(EXTRA_HINT), proc.stderr


def test_host_on_sqlite_runs_without_psycopg(state_dir: Path, no_psycopg_env: dict[str, str]) -> None:
    process = subprocess.Popen([str(BIN / "piwf-host"), "--state-dir", str(state_dir), "--max-workers", "1",
                                "--database", f"sqlite://{state_dir}/state.db", "--log-level", "WARNING"],
                               env=no_psycopg_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: (state_dir / "host.sock").exists() or process.poll() is not None, 60, "the host's socket")
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        status = piwf(state_dir, "host", "status", "--json")
        assert status.returncode == 0 and '"epoch"' in status.stdout, (status.stdout, status.stderr)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert "Traceback" not in (process.stderr.read() if process.stderr else "")
    finally:
        if process.poll() is None:
            import psutil

            kill_group_and_process(psutil.Process(process.pid))
        process.wait(10)
