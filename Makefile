# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.bench-installed
LINT_STAMP := $(VENV)/.lint-installed

.PHONY: demo test test-pg test-slow bench soak lint typecheck clean

# The package and the `test` extra: the suite's tools, psycopg (the `postgresql` extra) and OpenTelemetry.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

# The store suite and a marked integration subset run on SQLite and PostgreSQL (a cluster the tests
# start); without PostgreSQL they fail, unless PIWF_TEST_SKIP_POSTGRES=1 (docs/development.md).
# Three pytest-xdist workers, each taking whole files (--dist loadfile): the tests wait on real hosts
# and processes they start, so on 2 cores two workers left the cores idle part of the time (10m24s
# quiet, 15.5 min of CPU); every test has its own state directory, socket and (per worker)
# PostgreSQL cluster. Budget: 10 minutes on a 2-core machine (bench/README.md has the figures).
PYTEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile --durations=30

# The whole suite with every host on PostgreSQL (a database per state directory).
test-pg: $(STAMP)
	PIWF_TEST_DATABASE=postgresql $(PY) -m pytest -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile

# Tests marked slow, run alone: the three-host lease contention on PostgreSQL (3 s leases that a loaded
# machine, with the rest of the suite beside them, could expire), the three-host limit stress and the
# fan-out of 1,500 children (about a minute each), and tests of 7-30 s each that make test's 10 minutes
# on 2 cores cannot hold (more SIGKILLs of a function, rate limits across kills and hosts, Telegram
# outages and retries, a paused runner, the paused-deadline checkpoint and agent cases, every command
# form of the README's table). CI runs them
# after test-pg.
test-slow: $(STAMP)
	$(PY) -m pytest -m slow || [ $$? -eq 5 ]

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# sleepers.py runs with --quick here: the full 100,000 sleepers take long to fill, so run bench/sleepers.py
# by hand (bench/README.md lists every script's run time).
bench: $(BENCH_STAMP)  # dbos and py-spy (the `bench` extra) come in on first use, not with `make test`
	$(PY) bench/writer.py
	$(PY) bench/spawn.py
	$(PY) bench/throughput.py
	$(PY) bench/replay.py
	$(PY) bench/protocol.py
	$(PY) bench/latency.py
	$(PY) bench/growth.py
	$(PY) bench/fanout.py
	$(PY) bench/sleepers.py --quick
	$(PY) bench/rate_held.py
	$(PY) bench/messages.py
	$(PY) bench/events.py

# Random SIGKILLs of hosts, workers and runner hosts on SQLite and PostgreSQL, checked against an
# oracle file (bench/README.md: what it checks and how long it takes); exit 1 on any loss or repeat.
# Pass options with SOAK_ARGS, e.g. `make soak SOAK_ARGS="--duration 1200 --seed 7"`.
soak: $(STAMP)
	$(PY) bench/soak.py $(SOAK_ARGS)

# The linter and the type checker at the versions the `lint` extra pins (pyproject.toml); CI runs both.
$(LINT_STAMP): $(STAMP) pyproject.toml
	$(PY) -m pip install --quiet -e '.[lint]'
	touch $(LINT_STAMP)

lint: $(LINT_STAMP)
	$(VENV)/bin/ruff check piwf_actors tests bench examples

# mypy reads its settings from pyproject.toml ([tool.mypy]).
typecheck: $(LINT_STAMP)
	$(VENV)/bin/mypy piwf_actors

clean:
	rm -rf $(VENV) build *.egg-info
