"""The examples and the front door name everything they need, and only what exists:

- every file an example, the README, docs/ or bench/README.md points to is in the repository
  (examples/embed_app.py sent its reader to a STYLE.md that is not), and every relative link of the
  README and of docs/ finds its file and, when it names one, the heading;
- docs/workflows.md's `nightly` workflow fetches from a web server on port 8000: the page says how to
  run one, and that server, started as the page writes it, is what the workflow downloads from here;
- the README's contents list links every top-level section, and every link finds its section;
- the docs index (docs/README.md) links every page of docs/.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from piwf_actors import HostHandle

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
WORKFLOWS_DOC = REPO / "docs" / "workflows.md"
DOCS_INDEX = REPO / "docs" / "README.md"

#: What points at a file: a Markdown link target, or a name ending in `.md` in running text or code.
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:\.\./)?(?:[\w-]+/)*[\w-]+\.md)\b")


def _documents() -> list[Path]:
    return [README, REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md")),
            *sorted((REPO / "examples").rglob("*.py"))]


def test_every_file_the_examples_and_docs_name_is_in_the_repository() -> None:
    missing = []
    for document in _documents():
        text = document.read_text()
        named = set(MD_NAME.findall(text))
        if document.suffix == ".md":
            named |= {target for target in LINK.findall(text)
                      if "://" not in target and not target.startswith("mailto:")}
        for name in sorted(named):
            if not any((base / name).exists() for base in (document.parent, REPO)):
                missing.append(f"{document.relative_to(REPO)}: {name}")
    assert not missing, "named but not in the repository:\n" + "\n".join(missing)


# --- the nightly example's data server ------------------------------------------------------------


def _python_block(containing: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", WORKFLOWS_DOC.read_text(), flags=re.S)
    [block] = [block for block in blocks if containing in block]
    return block


def _server_commands() -> list[str]:
    """The sh block after the nightly example that serves its data.csv."""
    text = WORKFLOWS_DOC.read_text()
    after = text[text.index('name="nightly"'):]
    after = after[:after.index("\n## Node kinds")]  # in the example's own paragraphs, not further on
    block = re.search(r"```sh\n(.*?)```", after, flags=re.S)
    assert block is not None and "8000" in block.group(1), "docs/workflows.md does not say how to serve data.csv"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def readme_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The README's own commands, with its port 8000 and its /tmp/ moved to a free port and a temp dir."""
    port, files = _free_port(), tmp_path / "files"
    files.mkdir()
    *setup, serve = [command.replace("8000", str(port)).replace("/tmp/", f"{files}/") for command in
                     _server_commands()]
    for command in setup:
        subprocess.run(["sh", "-c", command], check=True, timeout=30)
    server = subprocess.Popen(shlex.split(serve), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:  # until it accepts a connection (it prints nothing we could wait on)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, f"{serve!r} exited {server.returncode}"
                assert time.monotonic() < deadline, f"{serve!r} did not listen within 30 s"
                time.sleep(0.05)
        yield port, files
    finally:
        server.kill()
        server.wait(10)


def test_the_nightly_example_runs_against_the_server_the_readme_starts(
        hosts: Callable[..., HostHandle], state_dir: Path, tmp_path: Path, readme_server: tuple[int, Path]) -> None:
    port, files = readme_server
    source = _python_block('name="nightly"').replace("8000", str(port)).replace("/tmp/", f"{files}/")
    project = tmp_path / "project"
    (project / ".piwf" / "workflows").mkdir(parents=True)
    (project / ".piwf" / "workflows" / "nightly.py").write_text(source)
    host = hosts(state_dir)
    run_id = host.start_run("nightly", {}, project_path=str(project)).run_id
    parked = host.wait_for_run(run_id, statuses=("parked", "failed"), timeout=60)
    assert parked.status == "parked", [(node.node_id, node.error) for node in parked.nodes]
    outputs = {node.node_id: node.output for node in parked.nodes}
    served = next(files.rglob("data.csv"))  # what the README's commands wrote and served
    assert outputs["check"] == {"rows": len(served.read_text().splitlines())}


# --- the contents list ----------------------------------------------------------------------------


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces as `-`."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def test_the_contents_list_links_every_top_level_section() -> None:
    text = README.read_text()
    outside_code = re.sub(r"```.*?```", "", text, flags=re.S)
    sections = re.findall(r"^## (.+)$", outside_code, flags=re.M)
    first = outside_code.index("\n## ")
    contents = "\n".join(line for line in outside_code[:first].splitlines() if line.startswith("- ["))
    listed = re.findall(r"\]\(#([^)]+)\)", contents)
    missing = [title for title in sections if _anchor(title) not in listed]
    assert not missing, f"top-level sections missing from the README's contents list: {missing}"
    headings = {_anchor(title) for title in re.findall(r"^#{2,4} (.+)$", outside_code, flags=re.M)}
    assert set(listed) <= headings, f"contents links that find no heading: {sorted(set(listed) - headings)}"
    # In the order of the sections.
    order = [anchor for anchor in listed if anchor in {_anchor(title) for title in sections}]
    assert order == [_anchor(title) for title in sections], order


# --- the docs index and every relative link -------------------------------------------------------

#: A Markdown link: `[text](target)`, the target up to its closing parenthesis.
ANY_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code spans, where a `](` is a link."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def _heading_anchors(document: Path) -> set[str]:
    """The anchors GitHub gives a page's headings; a repeated heading's get `-1`, `-2` … as on GitHub."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for title in re.findall(r"^#{1,6} (.+?)\s*#*$", re.sub(r"^```.*?^```", "", document.read_text(),
                                                             flags=re.S | re.M), flags=re.M):
        anchor = _anchor(title)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        anchors.add(anchor if count == 0 else f"{anchor}-{count}")
    return anchors


def test_every_relative_link_of_the_readme_and_docs_finds_its_file_and_heading() -> None:
    broken = []
    for document in [README, REPO / "bench" / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for target in ANY_LINK.findall(_prose(document.read_text())):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            where = f"{document.relative_to(REPO)}: ({target})"
            if not linked.exists():
                broken.append(f"{where}: no such file")
            elif anchor and (linked.suffix != ".md" or anchor not in _heading_anchors(linked)):
                broken.append(f"{where}: no heading #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, "links that lead nowhere:\n" + "\n".join(broken)


def test_the_docs_index_links_every_page_of_docs() -> None:
    linked = {(DOCS_INDEX.parent / target.partition("#")[0]).resolve()
              for target in ANY_LINK.findall(_prose(DOCS_INDEX.read_text())) if "://" not in target}
    pages = {page.resolve() for page in (REPO / "docs").glob("*.md") if page != DOCS_INDEX}
    missing = sorted(page.name for page in pages - linked)
    assert not missing, f"pages of docs/ the index (docs/README.md) does not list: {missing}"
    assert README.resolve() in linked and (REPO / "bench" / "README.md").resolve() in linked
    # The front door leads to the index.
    assert "docs/README.md" in ANY_LINK.findall(_prose(README.read_text()))


def test_the_front_door_and_the_makefile_carry_no_dated_figures_or_issue_numbers() -> None:
    """Measured figures live in bench/README.md with the command that printed them, issue numbers in
    commit messages: the README's prose and the Makefile's comments carry neither."""
    dated = re.compile(r"\bissue \d+|\b20\d\d-\d\d\b|\bmeasured\b|\b\d+ min \d+ s\b", flags=re.I)
    comments = "\n".join(line for line in (REPO / "Makefile").read_text().splitlines() if line.lstrip().startswith("#"))
    found = [f"README.md: {match}" for match in dated.findall(_prose(README.read_text()))]
    found += [f"Makefile: {match}" for match in dated.findall(comments)]
    assert not found, found
