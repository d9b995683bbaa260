//! The schema of `collab.db` and its forward-only migrations.
//!
//! `PRAGMA user_version` is the version a database is at. At open, every
//! step above it runs in order, each in its own IMMEDIATE transaction that
//! also sets the new version, so a crash mid-upgrade leaves the database at
//! the last complete step and the next start carries on. A database at a
//! version newer than [`SCHEMA_VERSION`] was written by a newer server and
//! is refused rather than misread. Steps are never edited once released:
//! a change is a new step at the end.
//!
//! Version numbers are taken in order by the work that adds tables:
//! 1 leases (first release), 2 events, 3 issues, 4 lease policy and the
//! work queue, 5 webhooks, 6 patches. SQL here stays portable where it can
//! (no SQLite-only functions in the domain queries), because the same
//! tables are meant to live in PostgreSQL too.

use rusqlite::{Connection, Transaction, TransactionBehavior};

/// One migration: the version it brings the database to, and its SQL.
struct Step {
    version: i64,
    sql: &'static str,
}

/// Every step, in order. Append only.
const STEPS: &[Step] = &[
    // Version 1 (first release): `leases` holds tenures (live, or expired and
    // not yet reaped); `lease_tokens` holds each issue's last token handed
    // out and is never deleted from. The CHECKs make a malformed write fail
    // instead of storing it. WITHOUT ROWID: the composite key is the table's
    // only B-tree, so a write touches half the pages.
    Step {
        version: 1,
        sql: "
CREATE TABLE leases (
    repo        TEXT    NOT NULL,
    issue_id    TEXT    NOT NULL,
    holder      TEXT    NOT NULL CHECK (holder <> ''),
    token       INTEGER NOT NULL CHECK (token > 0),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER,
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
CREATE TABLE lease_tokens (
    repo       TEXT    NOT NULL,
    issue_id   TEXT    NOT NULL,
    last_token INTEGER NOT NULL CHECK (last_token > 0),
    PRIMARY KEY (repo, issue_id)
) WITHOUT ROWID;
",
    },
    // Version 2: the append-only event log. `seq` is global, gap-free and
    // increasing: it is taken from the `counters` row 'events' inside the
    // writing transaction (a rolled-back write gives its number back, and
    // retention deleting old rows never lets a number be reused). See
    // `events`.
    Step {
        version: 2,
        sql: "
CREATE TABLE counters (
    name  TEXT    NOT NULL PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('events', 0);
CREATE TABLE events (
    seq       INTEGER NOT NULL PRIMARY KEY,
    at        INTEGER NOT NULL,
    type      TEXT    NOT NULL CHECK (type <> ''),
    repo      TEXT,
    object_id TEXT,
    actor     TEXT,
    payload   TEXT    NOT NULL
);
CREATE INDEX events_repo_seq ON events (repo, seq);
CREATE INDEX events_at ON events (at);
",
    },
    // Version 4: lease policy and the work queue. A tenure keeps its
    // holder's note and its last renewal; per issue, `lease_tokens` counts
    // holder changes (`transitions`), remembers the last holder and the end
    // of a lock delay. The indexes let the expiry timer find the next
    // instant something is due without a scan.
    Step {
        version: 4,
        sql: "
ALTER TABLE leases ADD COLUMN renewed_at INTEGER;
ALTER TABLE leases ADD COLUMN note TEXT;
ALTER TABLE lease_tokens ADD COLUMN transitions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE lease_tokens ADD COLUMN last_holder TEXT;
ALTER TABLE lease_tokens ADD COLUMN locked_until INTEGER;
CREATE INDEX leases_expires_at ON leases (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX lease_tokens_locked_until ON lease_tokens (locked_until)
    WHERE locked_until IS NOT NULL;
",
    },
];

/// The schema version this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = STEPS[STEPS.len() - 1].version;

/// Bring the schema on `conn` up to [`SCHEMA_VERSION`], one step per
/// transaction. A database from a newer server is an error.
pub fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    loop {
        let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
        let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            return Err(failure(format!(
                "collab database schema version {version} is newer than this server understands \
                 ({SCHEMA_VERSION})"
            )));
        }
        let Some(step) = STEPS.iter().find(|s| s.version > version) else {
            return tx.commit();
        };
        tx.execute_batch(step.sql)?;
        tx.pragma_update(None, "user_version", step.version)?;
        tx.commit()?;
    }
}

/// The version `conn`'s database is at.
#[cfg_attr(not(test), allow(dead_code))]
pub fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
}

fn failure(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        Some(message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_in_order_and_dense() {
        for (i, step) in STEPS.iter().enumerate() {
            assert_eq!(
                step.version,
                i as i64 + 1,
                "step {i} has version {}",
                step.version
            );
        }
    }

    #[test]
    fn a_fresh_database_reaches_the_latest_version() {
        let conn = Connection::open_in_memory().unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        // Idempotent.
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
    }

    #[test]
    fn a_version_1_database_upgrades_in_place_keeping_its_rows() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(STEPS[0].sql).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute(
            "INSERT INTO lease_tokens (repo, issue_id, last_token) VALUES ('r', 'i', 7)",
            [],
        )
        .unwrap();
        migrate(&conn).unwrap();
        assert_eq!(version(&conn).unwrap(), SCHEMA_VERSION);
        let token: i64 = conn
            .query_row("SELECT last_token FROM lease_tokens", [], |r| r.get(0))
            .unwrap();
        assert_eq!(token, 7);
    }
}
