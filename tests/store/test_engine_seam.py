"""The database engines as a seam: what differs between SQLite and PostgreSQL is asked of an engine
object (`piwf_actors/store/engines/`), never tested for elsewhere, and no driver is imported before an
engine connects (so a SQLite user needs no psycopg, and the `piwf` client no peewee)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import piwf_actors
from piwf_actors.errors import StoreRefused
from piwf_actors.store.engines.base import ServerDatabase
from piwf_actors.store.engines.postgresql import POSTGRESQL, PostgresDatabase
from piwf_actors.store.engines.registry import ENGINES, engine_for, engine_named
from piwf_actors.store.engines.sqlite import SQLITE

PACKAGE = Path(piwf_actors.__file__).parent
ENGINES_DIR = PACKAGE / "store" / "engines"

#: The modules of one engine (all but the seam's own): only the engines package imports them.
_ENGINE_MODULES = {path.stem for path in ENGINES_DIR.glob("*.py")} - {"__init__", "base", "registry", "transfer"}
#: Drivers and peewee's engine classes: an engine's own business.
_DRIVERS = ("sqlite3", "psycopg", "psycopg2")
_ENGINE_CLASSES = {"SqliteDatabase", "PostgresqlDatabase", "PostgresDatabase"} | {type(engine).__name__ for engine in ENGINES}
#: Words that name an engine or its URL scheme: compared with something, they are an engine test.
_ENGINE_WORDS = {engine.name for engine in ENGINES} | {scheme for engine in ENGINES for scheme in engine.schemes}


def engine_checks(source: str, name: str) -> list[str]:
    """Where `source` asks which engine it runs on: an import of a driver or of one engine's module,
    a peewee engine class, or a comparison with an engine's name or URL scheme."""
    found = []
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            modules = []
        for module in modules:
            if module.split(".")[0] in _DRIVERS or (
                    module.startswith("piwf_actors.store.engines.") and module.split(".")[3] in _ENGINE_MODULES):
                found.append(f"{name}:{node.lineno}: imports {module}")
        if isinstance(node, ast.Attribute | ast.Name) and (node.attr if isinstance(node, ast.Attribute)
                                                             else node.id) in _ENGINE_CLASSES:
            found.append(f"{name}:{node.lineno}: names an engine's class")
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                values = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
                if any(isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.lower() in _ENGINE_WORDS
                       for v in values):
                    found.append(f"{name}:{node.lineno}: compares with an engine's name")
    return found


def test_no_code_outside_the_engines_asks_which_engine_it_runs_on() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ENGINES_DIR in path.parents:
            continue
        found += engine_checks(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == [], "engine checks outside store/engines/:\n" + "\n".join(found)


def test_the_check_sees_each_kind_of_engine_test() -> None:
    """The rule itself can fail: each way the code asked before the seam is caught."""
    source = textwrap.dedent('''
        import sqlite3
        import peewee as pw
        from piwf_actors.store.engines.postgresql import PostgresDatabase
        from piwf_actors.store.engines import pg_schema
        from piwf_actors.store.engines.registry import engine_for
        if isinstance(db, pw.SqliteDatabase): pass
        if dialect_of(conn).name == "sqlite": pass
        if scheme in ("postgresql", "postgres"): pass
        if view.get("engine") != "PostgreSQL": pass
    ''')
    lines = sorted({int(found.split(":")[1]) for found in engine_checks(source, "x.py")})
    assert lines == [2, 4, 5, 7, 8, 9, 10]  # not peewee itself, not the registry


def test_each_location_finds_its_engine_and_nothing_else_is_one() -> None:
    assert engine_for(Path("/srv/state.db")) is SQLITE
    assert engine_for(PostgresDatabase("postgresql://piwf@/piwf")) is POSTGRESQL
    with pytest.raises(StoreRefused, match="not a database location"):
        engine_for(ServerDatabase("mysql://piwf@/piwf"))
    assert [engine_named(engine.name) for engine in ENGINES] == list(ENGINES) and engine_named("mysql") is None
    schemes = [scheme for engine in ENGINES for scheme in engine.schemes]
    assert len(schemes) == len(set(schemes)) and len({engine.name for engine in ENGINES}) == len(ENGINES)


def _imported_after(code: str) -> set[str]:
    """The drivers a fresh interpreter has imported after running `code`."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in ('peewee', 'psycopg') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(done.stdout.split())


def test_reading_database_urls_imports_no_driver() -> None:
    assert _imported_after(
        "from piwf_actors.paths import StatePaths\n"
        "StatePaths.resolve('/tmp/x', 'postgresql://piwf@/piwf', environ={})\n"
        "import piwf_actors.cli.main, piwf_actors.cli.host") == set()


def test_a_sqlite_state_needs_no_psycopg(state_dir: Path) -> None:
    """With psycopg missing (it is only for PostgreSQL users), a host runs on a SQLite state, and the
    state is opened, reported on, verified and backed up."""
    script = textwrap.dedent(f"""
        import sys
        sys.modules["psycopg"] = None  # what `import psycopg` meets where it is not installed
        from pathlib import Path
        from piwf_actors import HostConfig, start_host
        from piwf_actors.store import backup, state_report
        host = start_host(HostConfig(state_dir={str(state_dir)!r}, database=None, max_workers=1))
        host.stop()
        path = Path({str(state_dir / "state.db")!r})
        assert state_report.state_status(path)["engine"] == "sqlite"
        assert state_report.verify(path, 0.0)["ok"]
        backup.backup(path, {str(state_dir / "copy.db")!r})
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PIWF_DATABASE_URL": ""})
    assert done.returncode == 0 and done.stdout.split() == ["ok"], done.stderr[-2000:]
