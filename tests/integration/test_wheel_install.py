"""The package as `pip install .` ships it: build a wheel, install it into a fresh venv, run and import it.

Why this test exists: pyproject.toml finds the packages (`[tool.setuptools.packages.find]`), which
silently skips any folder without an `__init__.py`, and lists the files that are not modules
(`[tool.setuptools.package-data]`). `piwf_actors/store/` once had none, so a
non-editable install shipped without the store and every console script
(`piwf-host`, `piwf`, `piwf-top`) died with ModuleNotFoundError. The editable
install that `make test` uses (and the bin/ launchers, which put the checkout
on PYTHONPATH) import straight from the checkout and hide such a gap, so this
test installs a real wheel into a venv of its own and runs it from a directory
outside the checkout with PYTHONPATH removed.

The checkout's files are copied to a temp dir before the build (without
.venv, .git, build/, *.egg-info, caches) so that a stale `build/lib` left in
the checkout cannot mask a missing package, and the build writes nothing into
the checkout. Dependencies of the installed wheel come from PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "piwf_actors"
SCRIPTS = ["piwf-host", "piwf", "piwf-top"]

# Building the wheel and installing its dependencies can take a minute or more.
PIP_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120

pytestmark = pytest.mark.timeout(1200)

# Modules of an optional extra (`pip install piwf_actors[otel]`): the plain install carries them, and
# importing one without its extra fails only for want of that extra's package, nothing of ours (the
# PostgreSQL connection says which extra to install).
OPTIONAL = {"piwf_actors.tracing.otel": "No module named 'opentelemetry",
            "piwf_actors.store.engines.pg_connection": "PostgreSQL needs psycopg, which cannot be imported here (No module named "
                                    "'psycopg'): pip install 'piwf_actors[postgresql]'",
            # The HTTP door and its console (the `http` extra: Starlette, Jinja2).
            **{f"piwf_actors.http.{name}": "No module named 'starlette'"
               for name in ("answers", "app", "hooks", "streams", "console.actions", "console.pages", "console.views")},
            "piwf_actors.http.console.core": "No module named 'jinja2'",
            "piwf_actors.http.server_protocol": "No module named 'uvicorn'"}

IMPORT_ALL = textwrap.dedent("""
    import importlib, json, sys, sysconfig, traceback
    failures = {}
    for name in json.loads(sys.argv[1]):
        try:
            importlib.import_module(name)
        except BaseException as exc:
            failures[name] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    import piwf_actors
    print(json.dumps({
        "failures": failures,
        "package_file": piwf_actors.__file__,
        "purelib": sysconfig.get_paths()["purelib"],
        "prefix": sys.prefix,
    }))
""")


METADATA = textwrap.dedent("""
    import importlib.metadata, importlib.util, json
    import piwf_actors
    dist = importlib.metadata.distribution("piwf-actors")
    print(json.dumps({
        "version": dist.version,
        "package_version": piwf_actors.__version__,
        "requires": dist.requires or [],
        "psycopg_installed": importlib.util.find_spec("psycopg") is not None,
        "summary": dist.metadata["Summary"],
    }))
""")


def source_assets() -> list[Path]:
    """Every file of the package in the checkout that is not a module (and not a cache), relative to it."""
    root = REPO / PACKAGE
    return sorted(path.relative_to(root) for path in root.rglob("*")
                  if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts)


def source_modules() -> list[str]:
    """Every module of the package in the checkout, as dotted names (`pkg/__init__.py` -> `pkg`)."""
    names = []
    for path in sorted((REPO / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)


def check(proc: subprocess.CompletedProcess[str], what: str) -> None:
    assert proc.returncode == 0, f"{what} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


class Installed:
    def __init__(self, venv: Path, workdir: Path) -> None:
        self.venv = venv
        self.bin = venv / "bin"
        self.python = self.bin / "python"
        self.workdir = workdir


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh venv (outside the checkout) with the wheel built from the checkout installed in it."""
    base = tmp_path_factory.mktemp("wheel-install")
    assert not base.resolve().is_relative_to(REPO), f"temp dir {base} is inside the checkout"
    src, dist, venv, workdir = base / "src", base / "dist", base / "venv", base / "cwd"
    workdir.mkdir()
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache",
        ".ruff_cache",
    ))

    check(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(src)],
              cwd=workdir, timeout=PIP_TIMEOUT_S), "pip wheel")
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {dist}, found {wheels}"

    check(run([sys.executable, "-m", "venv", str(venv)], cwd=workdir, timeout=RUN_TIMEOUT_S), "python -m venv")
    check(run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheels[0])],
              cwd=workdir, timeout=PIP_TIMEOUT_S), "pip install <wheel>")
    return Installed(venv, workdir)


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_help(installed: Installed, script: str) -> None:
    exe = installed.bin / script
    assert exe.is_file(), f"console script {script} was not installed into {installed.bin}"
    proc = run([str(exe), "--help"], cwd=installed.workdir, timeout=RUN_TIMEOUT_S)
    check(proc, f"{script} --help")
    assert "usage:" in proc.stdout.lower(), f"{script} --help printed no usage:\n{proc.stdout}"


def test_every_module_is_installed_and_imports(installed: Installed) -> None:
    modules = source_modules()
    assert PACKAGE in modules and len(modules) > 1
    proc = run([str(installed.python), "-c", IMPORT_ALL, json.dumps(modules)],
               cwd=installed.workdir, timeout=RUN_TIMEOUT_S)
    check(proc, "import-all script")
    report = json.loads(proc.stdout.strip().splitlines()[-1])

    failures = {name: err for name, err in report["failures"].items()
                if not (name in OPTIONAL and OPTIONAL[name] in err)}
    assert not failures, (
        f"{len(failures)} of {len(modules)} modules are missing from the installed copy or fail to import:\n"
        + "\n".join(f"  {name}: {err}" for name, err in sorted(failures.items()))
    )

    package_file = Path(report["package_file"]).resolve()
    purelib = Path(report["purelib"]).resolve()
    assert package_file.is_relative_to(purelib), f"{PACKAGE} imported from {package_file}, not from {purelib}"
    assert package_file.is_relative_to(installed.venv.resolve())
    assert not package_file.is_relative_to(REPO), f"{PACKAGE} imported from the checkout: {package_file}"


def test_every_asset_is_installed(installed: Installed) -> None:
    assets = source_assets()
    assert Path("py.typed") in assets  # the marker that tells type checkers the package is typed
    proc = run([str(installed.python), "-c", "import piwf_actors; print(piwf_actors.__file__)"],
               cwd=installed.workdir, timeout=RUN_TIMEOUT_S)
    check(proc, "import piwf_actors")
    root = Path(proc.stdout.strip().splitlines()[-1]).parent
    assert root.resolve().is_relative_to(installed.venv.resolve()), root
    missing = [str(asset) for asset in assets if not (root / asset).is_file()]
    assert not missing, f"files of the package missing from the wheel (list them in pyproject.toml): {missing}"


def test_metadata_has_one_version_and_postgresql_as_an_extra(installed: Installed) -> None:
    proc = run([str(installed.python), "-c", METADATA], cwd=installed.workdir, timeout=RUN_TIMEOUT_S)
    check(proc, "metadata script")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert found["version"] == found["package_version"], found
    psycopg = [req for req in found["requires"] if req.startswith("psycopg")]
    assert psycopg and all('extra == "postgresql"' in req for req in psycopg), found["requires"]
    assert not found["psycopg_installed"], "the plain install pulled in psycopg"
    assert "PostgreSQL" in found["summary"] and "SQLite" in found["summary"], found["summary"]
