"""The test suite's slowest tests and its time by file, from pytest's ``--durations=0`` output.

    .venv/bin/python -m pytest --durations=0 -p no:cacheprovider > /tmp/unit.log
    .venv/bin/python tests/durations_report.py /tmp/unit.log > docs/results/tests/durations_<date>.md

Reads the ``slowest durations`` block (setup, call and teardown lines) and prints the 30 slowest tests
(their phases summed) and the total per file, largest first, as markdown.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

LINE = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+(\S+)")


def main(argv: list[str]) -> None:
    per_test: dict[str, float] = defaultdict(float)
    for line in open(argv[0], encoding="utf-8", errors="replace"):
        m = LINE.match(line)
        if m:
            per_test[m.group(3)] += float(m.group(1))
    per_file: dict[str, float] = defaultdict(float)
    for test, s in per_test.items():
        per_file[test.split("::", 1)[0]] += s
    total = sum(per_test.values())
    print(f"{len(per_test)} tests with a recorded duration, {total / 60:.1f} min in all.\n")
    print("| the 30 slowest tests | s |\n|---|---:|")
    for test, s in sorted(per_test.items(), key=lambda kv: -kv[1])[:30]:
        print(f"| `{test}` | {s:.1f} |")
    print("\n| file | s | share |\n|---|---:|---:|")
    for f, s in sorted(per_file.items(), key=lambda kv: -kv[1]):
        print(f"| `{f}` | {s:.1f} | {s / total:.1%} |")


if __name__ == "__main__":
    main(sys.argv[1:])
