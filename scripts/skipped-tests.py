#!/usr/bin/env python3
"""Says which passing tests of a nextest run only skipped, and why.

A test that cannot run here (no nixpkgs lib, no container engine, no
PostgreSQL, no Chromium) prints a line saying it is skipping and passes, so
nextest counts it as passed. The test command (scripts/test.sh) runs this
on the run's JUnit report (.config/nextest.toml keeps passing tests' output
in it) to close with how many were skipped and why.

Usage: skipped-tests.py JUNIT.xml [LABEL]
"""

import collections
import re
import sys
import xml.etree.ElementTree as ET

# "skipping …", "skipped: …", "… skipped" / "…: skipped", as the tests say it.
SKIP = re.compile(r"^skipping\b|^skipped\b|\bskipped\b", re.IGNORECASE)


def skip_line(case):
    """The first line a passing test printed saying it skipped, or None."""
    for part in ("system-out", "system-err"):
        node = case.find(part)
        if node is None or not node.text:
            continue
        for line in node.text.splitlines():
            line = line.strip()
            if SKIP.search(line):
                return line
    return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    path, label = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "")
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        print(f"== cannot tell which tests skipped: {path}: {e}")
        return
    passed, why = 0, collections.Counter()
    for case in root.iter("testcase"):
        if any(case.find(k) is not None for k in ("failure", "error", "skipped")):
            continue
        passed += 1
        line = skip_line(case)
        if line is not None:
            why[line] += 1
    skipped = sum(why.values())
    where = f" {label}" if label else ""
    if not skipped:
        print(f"== {passed} tests passed{where}; none skipped")
        return
    print(
        f"== {passed} tests passed{where}, of which {skipped} skipped"
        " (they passed without running what they test):"
    )
    for line, n in why.most_common():
        print(f"  {n:4}  {line}")


if __name__ == "__main__":
    main()
