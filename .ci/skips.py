"""Print every test a suite skipped, and fail on a skip that `.ci/expected-skips` does not list.

Usage: python .ci/skips.py SUITE JUNIT_XML   (SUITE: `test`, `test-pg` or `test-slow`, as in the Makefile)

The JUnit XML is pytest's `--junitxml`. Each line of `.ci/expected-skips` is
`SUITES | TEST ID | REASON | WHY`: the suites it applies to (space-separated), a glob of the test's id
(`tests/x/test_y.py::test_z[param]`), a glob of the skip's reason, and why that skip is expected.
A skip no line matches means something the suite should test was not tested (a tool or a
permission missing on the CI machine, a test that skips where it should fail): exit status 1.
"""

from __future__ import annotations

import fnmatch
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

EXPECTED = Path(__file__).resolve().parent / "expected-skips"
REPO = EXPECTED.parents[1]


@dataclass(frozen=True, slots=True)
class Expected:
    suites: frozenset[str]
    test_id: str
    reason: str
    why: str

    def matches(self, suite: str, test_id: str, reason: str) -> bool:
        return (suite in self.suites and fnmatch.fnmatchcase(test_id, self.test_id)
                and fnmatch.fnmatchcase(reason, self.reason))


def expected_skips(path: Path = EXPECTED) -> list[Expected]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = [field.strip() for field in line.split(" | ")]
        if len(fields) != 4 or not all(fields):
            raise SystemExit(f"{path}:{number}: expected 'SUITES | TEST ID | REASON | WHY', got {line!r}")
        found.append(Expected(frozenset(fields[0].split()), fields[1], fields[2], fields[3]))
    return found


def _test_id(classname: str, name: str) -> str:
    """pytest's id from JUnit's classname (`tests.x.test_y` or `tests.x.test_y.TestClass`) and name."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        if (REPO / Path(*parts[:cut])).with_suffix(".py").is_file():
            return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])
    return f"{classname}::{name}"


def skipped(junit: Path) -> list[tuple[str, str]]:
    """(test id, reason) of every skipped test in a JUnit XML report."""
    found = []
    for case in ElementTree.parse(junit).iter("testcase"):
        skip = case.find("skipped")
        if skip is not None:
            reason = skip.get("message") or ""
            reason = reason.removeprefix("Skipped: ")
            found.append((_test_id(case.get("classname", ""), case.get("name", "")), reason))
    return sorted(found)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    suite, junit = argv[1], Path(argv[2])
    expected = expected_skips()
    unexpected = 0
    skips = skipped(junit)
    print(f"{suite}: {len(skips)} skipped")
    for test_id, reason in skips:
        entry = next((e for e in expected if e.matches(suite, test_id, reason)), None)
        if entry is None:
            unexpected += 1
            print(f"  UNEXPECTED  {test_id}: {reason}")
        else:
            print(f"  expected    {test_id}: {reason}  ({entry.why})")
    if unexpected:
        print(f"{suite}: {unexpected} skip(s) not listed in {EXPECTED.relative_to(REPO)}: install what they need or "
              "fix the test (or, if the skip is right, list it there with why)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
