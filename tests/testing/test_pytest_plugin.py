"""The `piwf` fixture as a user gets it: the plugin is registered by the package's entry point
(`pytest11`), and a test file that asks for the fixture runs on a real host in a pytest of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = '''
import pytest

from piwf_actors.workflows import compute, define_workflow, edge, sleep

overnight = define_workflow(name="overnight", start_at="nap", nodes={
    "nap": sleep(seconds=86400),
    "done": compute(run=lambda ctx: {"woke": True}),
}, edges=[edge("nap", "done")])


def test_a_day_passes_at_once(piwf):
    run = piwf.start(overnight)
    piwf.wait_parked(run, "waiting")
    piwf.skip(86400)
    assert piwf.wait(run).output == {"woke": True}


@pytest.mark.piwf(max_workers=1, timeout=7)
def test_the_marker_configures_the_host(piwf):
    assert piwf.host.config.max_workers == 1 and piwf.timeout == 7


def test_a_wait_that_runs_out_says_why(piwf):
    run = piwf.start(overnight)
    piwf.wait_parked(run)
    piwf.wait(run, timeout=0.5)
'''


def test_the_package_registers_the_plugin(pytestconfig: pytest.Config) -> None:
    plugin = pytestconfig.pluginmanager.get_plugin("piwf")
    assert plugin is not None and plugin.__name__ == "piwf_actors.testing.pytest_plugin"


def test_the_fixture_runs_a_users_test_file_on_a_skipped_clock(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_overnight=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:xdist", timeout=300)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*WaitTimeout: run run_* did not get to finish within 0.5 s:*",
                                 "*is parked (waiting) at node 'nap'*"])
    result.stdout.re_match_lines([r".*sleep 'nap', (23h59m|1d00h) of timer time left.*"])


def test_loading_the_plugin_imports_none_of_the_host() -> None:
    code = ("import sys, piwf_actors.testing.pytest_plugin; "
            "print(sorted(m for m in sys.modules if m.startswith('piwf_actors')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['piwf_actors', 'piwf_actors.testing', 'piwf_actors.testing.pytest_plugin']"
