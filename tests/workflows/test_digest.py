"""Workflow digests: stable across processes, sensitive to code and structure."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from piwf_actors.workflows import compute, define_workflow, fingerprint, resolve

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]

TEMPLATE = '''
from piwf_actors.workflows import compute, define_workflow, edge

FACTOR = 3


def helper(x):
    return x * {helper_factor}


flow = define_workflow(
    name="flow",
    start_at="a",
    nodes={{
        "a": compute(run=lambda ctx: ctx.input + {lambda_const}, timeout_s={timeout}),
        "b": compute(run=lambda ctx: helper(ctx.outputs["a"])),
    }},
    edges=[edge("a", "b")],
)
'''


def digest_of(tmp_path: Path, name: str, **changes: Any) -> str:
    values = {"helper_factor": 2, "lambda_const": 1, "timeout": 30} | changes
    path = tmp_path / f"{name}.py"
    path.write_text(TEMPLATE.format(**values))
    return resolve(f"{path}:flow", None).workflow.digest


def digest_in_subprocess(spec: str, hash_seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(REPO))
    script = "import sys; from piwf_actors.workflows import resolve; print(resolve(sys.argv[1], None).workflow.digest)"
    done = subprocess.run([sys.executable, "-c", script, spec], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_digest_is_equal_across_processes() -> None:
    spec = f"{FIXTURES / 'basic_flows.py'}:release"
    here = resolve(spec, None).workflow.digest
    # Different hash seeds reorder sets and frozensets; the digest must not notice.
    assert digest_in_subprocess(spec, "1") == here
    assert digest_in_subprocess(spec, "12345") == here


def test_digest_ignores_location_and_layout(tmp_path: Path) -> None:
    first = digest_of(tmp_path, "one")
    assert digest_of(tmp_path, "two") == first  # same source, other file
    path = tmp_path / "spaced.py"
    path.write_text("# a comment\n\n\n" + TEMPLATE.format(helper_factor=2, lambda_const=1, timeout=30))
    assert resolve(f"{path}:flow", None).workflow.digest == first


def test_digest_changes_with_code_and_structure(tmp_path: Path) -> None:
    base = digest_of(tmp_path, "base")
    assert digest_of(tmp_path, "lambda_body", lambda_const=2) != base
    assert digest_of(tmp_path, "helper_body", helper_factor=5) != base
    assert digest_of(tmp_path, "timeout", timeout=31) != base


def test_closure_values_and_names_matter() -> None:
    def make(n: int) -> Any:
        return define_workflow(name="c", start_at="a", nodes={"a": compute(run=lambda ctx: n)}, edges=[])

    assert make(1).digest == make(1).digest
    assert make(1).digest != make(2).digest
    renamed = define_workflow(name="d", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
    same = define_workflow(name="c", start_at="a", nodes={"a": compute(run=lambda ctx: 1)}, edges=[])
    assert renamed.digest != same.digest


class Adder:
    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, ctx: Any) -> int:
        return self.n


def test_fingerprint_of_other_callables() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    assert fingerprint(functools.partial(add, 1)) == fingerprint(functools.partial(add, 1))
    assert fingerprint(functools.partial(add, 1)) != fingerprint(functools.partial(add, 2))
    assert fingerprint(len) == fingerprint(len) != fingerprint(abs)
    # Instances are described by their class's code, never by their address.
    assert fingerprint(Adder(1)) == fingerprint(Adder(2))


def test_recursive_helpers_terminate() -> None:
    def even(n: int) -> bool:
        return n == 0 or odd(n - 1)

    def odd(n: int) -> bool:
        return n != 0 and even(n - 1)

    assert fingerprint(even) == fingerprint(even)


def test_mappings_with_plain_string_keys_sort_as_their_pairs_canonical_json_does() -> None:
    # The fingerprint of a mapping lists its pairs sorted by their canonical JSON; for plain string keys
    # it sorts by the key instead (cheaper). Keys that are prefixes of others, and characters on both
    # sides of the quote and of the backslash, must give the same order, hence the same digests.
    import random

    from piwf_actors.workflows.digest import _Fingerprinter, canonical_json

    alphabet = "#$ab_-[]~Z09."
    tricky = ["a", "a!", "a ", 'a"', "a\\", "é", "a\x7f", ""]
    rng = random.Random(33)
    for _ in range(300):
        keys = {"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(0, 8))}
        if rng.random() < 0.3:
            keys.add(rng.choice(tricky))
        mapping = {key: rng.choice([1, "x", [key], {"k": key}]) for key in keys}
        printer = _Fingerprinter()
        pairs = [[printer.value(k), printer.value(v)] for k, v in mapping.items()]
        assert _Fingerprinter().value(mapping) == ["map", sorted(pairs, key=canonical_json)], mapping


SHARED_CODE = '''
from piwf_actors.workflows import compute, define_workflow

flow = define_workflow(name="shared", start_at="a",
                       nodes={"a": compute(run=lambda ctx: helper(ctx.input) + (1, 2.5, frozenset({"x", "y"}))[0])},
                       edges=[])
'''


def test_code_executed_again_is_described_again_with_each_modules_helpers(monkeypatch) -> None:
    # A warm worker executes one compiled code object for every launch of a snapshot, and the digest keeps
    # what describes a code object by itself (workflows/digest.py): the helpers a module gives that code
    # must still count, module by module, and the kept parts must give the digest a fresh description gives.
    from piwf_actors.workflows import digest as digest_module

    code = compile(SHARED_CODE, "shared.py", "exec", dont_inherit=True)

    def digest_with(factor: int) -> str:
        module: dict[str, Any] = {"__name__": f"shared_{factor}"}
        exec(f"def helper(x):\n    return x * {factor}\n", module)  # a same-module helper
        exec(code, module)
        return str(module["flow"].digest)

    first, second, again = digest_with(2), digest_with(3), digest_with(2)
    assert first != second and first == again
    monkeypatch.setattr(digest_module, "_CODE_PARTS", {})  # nothing kept: every part described afresh
    assert digest_with(2) == first and digest_with(3) == second


def test_kept_code_descriptions_are_bounded(monkeypatch) -> None:
    from piwf_actors.workflows import digest as digest_module

    monkeypatch.setattr(digest_module, "_CODE_PARTS", {})
    monkeypatch.setattr(digest_module, "_CODE_PARTS_MAX", 8)
    seen = set()
    for n in range(40):  # 40 distinct code objects (the constant differs)
        function = eval(compile(f"lambda x: x + {n}", f"f{n}.py", "eval"))  # noqa: S307
        seen.add(fingerprint(function))
        assert len(digest_module._CODE_PARTS) <= 8
    assert len(seen) == 40
