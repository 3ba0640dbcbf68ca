"""`WorkflowResolver`: a spec is loaded once per version of its file, and the cache is bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

from piwf_actors.workflows.resolver import WorkflowResolver

SOURCE = '''
from piwf_actors.workflows import compute, define_workflow
w = define_workflow(name="w{n}", start_at="a", nodes={{"a": compute(run=lambda ctx: {{"n": {n}}})}}, edges=[])
'''


def _files(directory: Path, count: int) -> list[str]:
    paths = []
    for n in range(count):
        path = directory / f"w{n}.py"
        path.write_text(SOURCE.format(n=n))
        paths.append(f"{path}:w")
    return paths


def test_an_unchanged_file_is_loaded_once_and_an_edited_one_again(tmp_path: Path) -> None:
    resolver = WorkflowResolver()
    (spec,) = _files(tmp_path, 1)
    first = resolver.resolve(spec, None)
    assert resolver.resolve(spec, None) is first
    path = Path(spec.rsplit(":", 1)[0])
    path.write_text(SOURCE.format(n=7) + "\n# edited\n")
    edited = resolver.resolve(spec, None)
    assert edited is not first and edited.workflow.name == "w7"


def test_the_cache_keeps_only_the_most_recently_used_specs(tmp_path: Path) -> None:
    resolver = WorkflowResolver(max_cached=3)
    specs = _files(tmp_path, 6)
    loaded = {spec: resolver.resolve(spec, None) for spec in specs}
    assert len(resolver) == 3
    # The three newest are served from the cache; w3 used again stays when w0 comes back.
    assert all(resolver.resolve(spec, None) is loaded[spec] for spec in specs[3:])
    assert resolver.resolve(specs[3], None) is loaded[specs[3]]
    again = resolver.resolve(specs[0], None)
    assert again is not loaded[specs[0]] and again.workflow.name == "w0"
    assert len(resolver) == 3
    assert resolver.resolve(specs[3], None) is loaded[specs[3]]  # recently used: kept
    assert resolver.resolve(specs[4], None) is not loaded[specs[4]]  # least recently used: was dropped


def test_a_cache_must_hold_something() -> None:
    with pytest.raises(ValueError):
        WorkflowResolver(max_cached=0)
