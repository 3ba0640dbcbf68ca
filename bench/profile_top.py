"""Summarise a py-spy profile in collapsed-stack form (`py-spy record --format raw`).

Prints the functions that hold the most samples, two ways: "self" (the sample's innermost
frame: where the CPU actually was) and "inclusive" (the function is anywhere on the stack:
what it costs with everything it calls). With `--threads` recordings, the first frame of
each stack names the thread (`thread (TID): NAME` in py-spy 0.4, `thread (0x…)` before);
`--by-thread` prints the share of each kind of thread (names grouped as in
common.thread_group: "RunnerSupervisor-7" counts as "RunnerSupervisor"). Thread and
process frames never count as functions.

bench/throughput.py imports `read_stacks` and `summarise` for its `--profile` output.

Run: .venv/bin/python bench/profile_top.py PROFILE.txt [--top 25] [--by-thread]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import thread_group  # noqa: E402  (bench/ is the script's directory)

# "Thread.run (threading.py:982)" → "Thread.run (threading.py)": a function, not a line.
_LINE = re.compile(r":\d+\)$")
# py-spy's marker frames: `process 123:"cmd"` (--subprocesses), `thread (0x7F…)` or `thread (4416): NAME` (--threads).
_PROCESS = re.compile(r'^process \d+:"')
_THREAD = re.compile(r"^thread \((?:0x)?[0-9A-Fa-f]+\)(?::\s*(?P<name>.*))?$")


def read_stacks(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def function(frame: str) -> str:
    return _LINE.sub(")", frame)


def split_markers(frames: list[str]) -> tuple[str | None, list[str]]:
    """(thread group or None, the frames without py-spy's process/thread marker frames)."""
    thread = None
    rest = []
    for index, frame in enumerate(frames):
        if index < 2 and _PROCESS.match(frame):
            continue
        match = _THREAD.match(frame) if index < 2 else None
        if match:
            thread = thread_group(match.group("name")) if match.group("name") else frame
            continue
        rest.append(frame)
    return thread, rest


def summarise(stacks: list[tuple[list[str], int]], top: int, by_thread: bool) -> str:
    total = sum(count for _, count in stacks)
    if not total:
        return "0 samples"
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    for frames, count in stacks:
        thread, frames = split_markers(frames)
        if by_thread:
            threads[thread or "(no thread frame: record with --threads)"] += count
        names = [function(frame) for frame in frames]
        if not names:
            continue
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    lines = [f"{total} samples"]
    if by_thread:
        lines.append("by thread:")
        lines += [f"  {count * 100 / total:5.1f}%  {name}" for name, count in threads.most_common(top)]
    lines.append("self (where the CPU was):")
    lines += [f"  {count * 100 / total:5.1f}%  {name}" for name, count in own.most_common(top)]
    lines.append("inclusive (with everything called):")
    lines += [f"  {count * 100 / total:5.1f}%  {name}" for name, count in inclusive.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--by-thread", action="store_true")
    args = parser.parse_args()
    print(summarise(read_stacks(args.profile), args.top, args.by_thread))


if __name__ == "__main__":
    main()
