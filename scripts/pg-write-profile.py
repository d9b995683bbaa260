#!/usr/bin/env python3
"""Profile a PostgreSQL lease acquire at the SQL level (issue 28, item 1).

Replays the statements the writer sends for one `collab-lease acquire` of a
new issue (as PostgreSQL's log shows them with log_min_duration_statement=0)
through `pgbench -M prepared` (cached prepared statements, one round trip
per statement, as the `postgres` crate sends them), in variants that take
one cost away at a time, and prints acquires per second per variant.
Variants run in interleaved rounds because the machine's load drifts.

  today    BEGIN + the global advisory lock, then per op: SAVEPOINT, read the
           lease, bump the token, insert the lease, bump `counters`, look up
           the repository id, insert the event, RELEASE; COMMIT
  nolock   the same without the advisory lock and the savepoints
  pipe     `nolock` pipelined: the whole group in one round trip, then COMMIT
  late     no global lock, three statements per op, and the group's event
           numbers taken at the end in one statement (counters + events)
  late+gl  `late` with the global advisory lock again
  nextval  no lock at all: event numbers from a sequence (not gap-free;
           the upper bound for a commit-order watermark)

Usage (the database must hold the collab schema and the repository
`bench/pg`, e.g. `git-collab-server --state-dir D --collab-db URL repo
create bench/pg`):

  scripts/pg-write-profile.py URL [--rounds 3] [--secs 5]
"""

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

LOCK = "SELECT pg_advisory_xact_lock(109330211561826);"  # the writer's WRITE_LOCK
REPO = "'bench/pg.git'"


def op_today(i, savepoint):
    s = []
    if savepoint:
        s.append("SAVEPOINT lease_op;")
    s += [
        "SELECT l.repo, l.issue_id, l.holder, l.token, l.acquired_at, l.expires_at, "
        "l.renewed_at, l.note, t.transitions FROM leases l JOIN lease_tokens t "
        "ON t.repo = l.repo AND t.issue_id = l.issue_id "
        f"WHERE l.repo = {REPO} AND l.issue_id = ({i})::text;",
        "INSERT INTO lease_tokens (repo, issue_id, last_token, transitions, last_holder) "
        f"VALUES ({REPO}, ({i})::text, 1, 0, 'caller') ON CONFLICT (repo, issue_id) DO UPDATE SET "
        "last_token = lease_tokens.last_token + 1, transitions = lease_tokens.transitions + CASE "
        "WHEN lease_tokens.last_holder IS NULL OR lease_tokens.last_holder = excluded.last_holder "
        "THEN 0 ELSE 1 END, last_holder = excluded.last_holder, locked_until = NULL "
        "WHERE lease_tokens.locked_until IS NULL OR lease_tokens.locked_until <= 5 "
        "OR lease_tokens.last_holder = excluded.last_holder RETURNING last_token, transitions;",
        "INSERT INTO leases (repo, issue_id, holder, token, acquired_at, expires_at, note) "
        f"VALUES ({REPO}, ({i})::text, 'caller', 1, 1796487312, NULL, NULL) ON CONFLICT DO NOTHING;",
        "UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value;",
        f"SELECT id FROM repositories WHERE name = {REPO};",
        "INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload) "
        "VALUES ((SELECT value FROM counters WHERE name = 'events'), 1796487312, "
        f"'lease.acquired', {REPO}, NULL, ({i})::text, 'caller', "
        "json_build_object('holder', 'caller', 'token', 1)::text);",
    ]
    if savepoint:
        s.append("RELEASE lease_op;")
    return s


def op_short(i):
    return [
        "SELECT l.holder, l.token FROM leases l JOIN lease_tokens t ON t.repo = l.repo "
        f"AND t.issue_id = l.issue_id WHERE l.repo = {REPO} AND l.issue_id = ({i})::text;",
        "INSERT INTO lease_tokens (repo, issue_id, last_token, transitions, last_holder) "
        f"VALUES ({REPO}, ({i})::text, 1, 0, 'caller') ON CONFLICT (repo, issue_id) DO UPDATE "
        "SET last_token = lease_tokens.last_token + 1 RETURNING last_token, transitions;",
        "INSERT INTO leases (repo, issue_id, holder, token, acquired_at, expires_at, note) "
        f"VALUES ({REPO}, ({i})::text, 'caller', 1, 1796487312, NULL, NULL) ON CONFLICT DO NOTHING;",
    ]


def script(variant, group):
    ids = [f":i{k}" for k in range(group)]
    out = [rf"\set i{k} random(1, 1000000000000)" for k in range(group)]
    if variant == "pipe":
        out.append(r"\startpipeline")
    out.append("BEGIN;")
    if variant in ("today", "late+gl"):
        out.append(LOCK)
    for i in ids:
        if variant in ("today", "nolock", "pipe"):
            out += op_today(i, savepoint=variant == "today")
        else:
            out += op_short(i)
            if variant == "nextval":
                out.append(
                    "INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload) "
                    f"VALUES (nextval('profile_seq'), 1796487312, 'lease.acquired', {REPO}, NULL, "
                    f"({i})::text, 'caller', 'x');"
                )
    if variant.startswith("late"):
        rows = ",".join(f"({k}, ({i})::text)" for k, i in enumerate(ids))
        out.append(
            f"WITH c AS (UPDATE counters SET value = value + {group} WHERE name = 'events' "
            "RETURNING value) INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, "
            f"payload) SELECT c.value - {group} + 1 + v.k, 1796487312, 'lease.acquired', {REPO}, "
            f"NULL, v.id, 'caller', 'x' FROM c, (VALUES {rows}) AS v(k, id);"
        )
    if variant == "pipe":
        out.append(r"\endpipeline")
    out.append("COMMIT;")
    return "\n".join(out) + "\n"


# (variant, group size per transaction, clients = writer nodes)
CASES = [
    ("today", 1, 1),
    ("today", 32, 1),
    ("nolock", 32, 1),
    ("pipe", 32, 1),
    ("today", 11, 3),
    ("nolock", 11, 3),
    ("late+gl", 11, 3),
    ("late", 11, 3),
    ("nextval", 11, 3),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=int, default=5)
    a = ap.parse_args()
    subprocess.run(
        ["psql", a.url, "-qc", "CREATE SEQUENCE IF NOT EXISTS profile_seq START 1000000000"],
        check=True,
    )
    rates = {c: [] for c in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for case in CASES:
                variant, group, clients = case
                f = Path(tmp) / "s.sql"
                f.write_text(script(variant, group))
                out = subprocess.run(
                    ["pgbench", "-n", "-M", "prepared", "-c", str(clients), "-T", str(a.secs),
                     "-f", str(f), a.url],
                    capture_output=True, text=True,
                ).stdout
                m = re.search(r"^tps = ([\d.]+)", out, re.M)
                rates[case].append(float(m.group(1)) * group if m else float("nan"))
    load = open("/proc/loadavg").read().split()[0]
    print(f"| variant | ops per commit | writers | acquires/s (median of {a.rounds}) | µs per acquire per writer |")
    print("|---|---:|---:|---:|---:|")
    for case in CASES:
        variant, group, clients = case
        med = sorted(rates[case])[len(rates[case]) // 2]
        print(f"| {variant} | {group} | {clients} | {med:.0f} | {1e6 * clients / med:.0f} |")
    print(f"(load average at the end: {load})")


if __name__ == "__main__":
    main()
