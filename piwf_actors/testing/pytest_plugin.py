"""The pytest plugin of piwf_actors (entry point `pytest11: piwf`): the `piwf` fixture.

Installed with the package, it loads in every pytest session, so this
module imports nothing but pytest: the host (`piwf_actors.testing.kit`) is
imported when a test first asks for the fixture. Without pytest installed
it defines nothing (only pytest loads it; importing it must still work, as
every module of the package does).

    def test_release(piwf):
        run = piwf.start(release, {"version": "1.4.0"})
        ...

Options of the fixture's host come from a marker:
`@pytest.mark.piwf(project="myproject", max_workers=4, timeout=60)` (the
`Piwf` keywords: `project`, `timeout` and `HostConfig` fields).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    import pytest
except ModuleNotFoundError:  # the package installed without pytest: nothing to plug into
    pytest = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from piwf_actors.testing.kit import Piwf


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "piwf(**options): options of the piwf fixture's host (project, timeout, HostConfig fields)")


def piwf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
         monkeypatch: pytest.MonkeyPatch) -> Iterator[Piwf]:
    """A real piwf host for this test, on a clock the test moves (`piwf.skip(3600)`); stopped after it.

    The host loads no schedule or workflow of your user config directory (`$XDG_CONFIG_HOME` points
    at an empty directory during the test) and no chat channel of the machine.
    """
    from piwf_actors.testing.kit import Piwf  # here, not at the top: see the module docstring

    marker = request.node.get_closest_marker("piwf")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("piwf-config")))
    kit = Piwf(**options)
    try:
        yield kit
    finally:
        kit.close()


if pytest is not None:
    piwf = pytest.fixture(piwf)
