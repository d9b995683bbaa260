#!/usr/bin/env python3
"""Profile how the writer sends a group of lease calls (issue 28, item 2).

Replays groups of new-tenure acquires through the lease functions of schema
version 16 with pgbench (BEGIN, the group, COMMIT; no Rust in the loop), in
variants that differ only in how the calls travel, interleaved in rounds
because the machine's load drifts:

  calls/simple     one `SELECT * FROM collab_lease_acquire(...)` per round
                   trip, the arguments as literals (parsed and planned each time)
  calls/prepared   the same, prepared once per connection
  msg/simple       `SAVEPOINT lease_group` and the group's calls in one
                   simple-query message (the writer before the group call)
  group/simple     one `collab_lease_group(...)` call, literals
  group/prepared   one `collab_lease_group(...)` call, prepared (the writer now)

Each variant runs with one writer (32 acquires per commit) and with three
(11 each), as one and three nodes see them in `cargo bench --bench postgres`.

Usage (the database must be at schema version 16 and hold the repository
`bench/pg`, e.g. `git-collab-server --state-dir D --collab-db URL repo
create bench/pg`):

  scripts/pg-lease-call-profile.py URL [--rounds 3] [--secs 5]

For where one call's time goes inside the server, compare the planning and
execution times of `EXPLAIN ANALYZE SELECT * FROM collab_lease_acquire(...)`
in a session that called it before (docs/postgres.md).
"""

import argparse
import re
import subprocess
import tempfile
from pathlib import Path


def acquire(k):
    return (
        f"SELECT * FROM collab_lease_acquire('bench/pg', 'i' || :b || '_{k}', 'caller', 60, "
        f"NULL, NULL, 0, 1000, -((:b)::bigint * 64 + {2 * k}), "
        f"-((:b)::bigint * 64 + {2 * k + 1}), true)"
    )


def array(items, cast):
    return "ARRAY[" + ", ".join(items) + "]" + cast


def script(variant, n):
    # A random base per transaction: fresh issues, unique provisional numbers.
    head = "\\set b random(1, 100000000000)\nBEGIN;\n"
    if variant == "calls":
        body = "".join(acquire(k) + ";\n" for k in range(n))
    elif variant == "msg":
        body = "SAVEPOINT lease_group \\;\n" + " \\;\n".join(acquire(k) for k in range(n)) + ";\n"
    else:
        body = (
            "SELECT * FROM collab_lease_group("
            + ", ".join(
                [
                    array(["'acquire'"] * n, "::text[]"),
                    array(["'bench/pg'"] * n, "::text[]"),
                    array([f"'i' || :b || '_{k}'" for k in range(n)], "::text[]"),
                    array(["'caller'"] * n, "::text[]"),
                    array(["60"] * n, "::bigint[]"),
                    array(["NULL"] * n, "::text[]"),
                    array(["NULL"] * n, "::text[]"),
                    array([f"-((:b)::bigint * 64 + {2 * k})" for k in range(n)], "::bigint[]"),
                    array([f"-((:b)::bigint * 64 + {2 * k + 1})" for k in range(n)], "::bigint[]"),
                    "NULL, 0, 1000, true",
                ]
            )
            + ");\n"
        )
    return head + body + "COMMIT;\n"


VARIANTS = [
    ("calls", "simple"),
    ("calls", "prepared"),
    ("msg", "simple"),
    ("group", "simple"),
    ("group", "prepared"),
]
WRITERS = [(32, 1), (11, 3)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    a = ap.parse_args()
    load = open("/proc/loadavg").read().split()[0]
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.rounds):
            for n, clients in WRITERS:
                for variant, mode in VARIANTS:
                    f = Path(tmp) / "s.sql"
                    f.write_text(script(variant, n))
                    out = subprocess.run(
                        ["pgbench", "-n", "-M", mode, "-c", str(clients), "-j", str(clients),
                         "-T", str(a.secs), "-f", str(f), a.url],
                        capture_output=True, text=True,
                    ).stdout
                    m = re.search(r"^tps = ([\d.]+)", out, re.M)
                    rate = float(m.group(1)) * n if m else float("nan")
                    rates.setdefault((variant, mode, n, clients), []).append(rate)
    print(f"| variant | acquires per commit | writers | acquires/s per round ({a.rounds}) |")
    print("|---|---:|---:|---|")
    for (variant, mode, n, clients), got in rates.items():
        print(f"| {variant}/{mode} | {n} | {clients} | {' '.join(f'{r:.0f}' for r in got)} |")
    print(f"(load average at the start: {load}, at the end: {open('/proc/loadavg').read().split()[0]})")


if __name__ == "__main__":
    main()
