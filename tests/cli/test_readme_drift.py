"""The docs say what the code does (issue 22, edge 8): the `piwf-host` option table (docs/host.md) lists every
option the program takes (and no other), and the `piwf events` example lists the events a host
really writes for that run, in its order."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cli_support import REPO, short_dir

from piwf_actors import HostHandle
from piwf_actors.cli.host import build_parser


def readme_section(title: str, document: str) -> str:
    text = (REPO / "docs" / document).read_text()
    start = text.index(f"\n## {title}\n")
    return text[start:text.index("\n## ", start + 1)]


def test_the_host_option_table_lists_every_piwf_host_option() -> None:
    table = [line for line in readme_section("Starting a host", "host.md").splitlines() if line.startswith("| `--")]
    documented = {re.match(r"\| `(--[a-z-]+)", line).group(1) for line in table}  # type: ignore[union-attr]
    options = {option for action in build_parser()._actions for option in action.option_strings
               if option.startswith("--") and option not in ("--help", "--version")}
    assert documented == options, (f"missing from docs/host.md: {sorted(options - documented)}; "
                                   f"not options of piwf-host: {sorted(documented - options)}")


def events_example() -> list[tuple[str, str]]:
    """(kind, node) of each row of the `piwf events` table in "The `piwf` command"."""
    section = readme_section("The `piwf` command", "cli.md")
    block = section[section.index("$ piwf events "):]
    block = block[:block.index("\n$ ")]
    rows = []
    for line in block.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 5 and cells[0].isdigit():
            rows.append((cells[2], cells[3]))
    return rows


def test_the_events_example_lists_what_the_host_writes_for_that_run(hosts, state_dir) -> None:
    example = events_example()
    assert len(example) >= 8, example
    project = short_dir("prd-")  # the transcript's `piwf start examples/workflows/pipeline.py text=…`
    try:
        shutil.copy(REPO / "examples" / "workflows" / "pipeline.py", project / "pipeline.py")
        host: HostHandle = hosts(state_dir)
        run_id = host.start_run(str(Path(project) / "pipeline.py"), {"text": "hello durable world"}).run_id
        assert host.wait_for_run(run_id, timeout=60).status == "done"
        written = [(event.kind, event.node_id or "") for event in host.run_events(run_id)]
    finally:
        shutil.rmtree(project, ignore_errors=True)
    assert example == written
