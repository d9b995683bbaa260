//! Backup-side access to `collab.db`: a consistent copy taken with SQLite's
//! online backup API while the server keeps writing, an integrity check,
//! and a census of what a copy holds (rows per table, the `counters`
//! high-water marks, the fencing-token high-water marks) so a backup can be
//! checked against its manifest after it is moved or restored.
//!
//! The copy runs in one backup step over all pages, which holds one read
//! transaction from start to end: in WAL mode that never blocks the writer,
//! and the copy is exactly the database as of that transaction's start. The
//! copy is switched to `journal_mode=DELETE` so it is one self-contained file.
//!
//! This module is SQLite-specific by nature; a PostgreSQL deployment uses
//! `pg_dump` instead (docs/operations.md).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

/// How long a step waits when the source is busy before retrying.
const BUSY_PAUSE: Duration = Duration::from_millis(20);

/// Copy the live database at `src` into the new file `dest` (which must not
/// exist). The source is never created or written.
pub fn copy_online(src: &Path, dest: &Path) -> rusqlite::Result<()> {
    let source = Connection::open_with_flags(
        src,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    source.busy_timeout(Duration::from_secs(30))?;
    let mut target = Connection::open_with_flags(
        dest,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    {
        let backup = Backup::new(&source, &mut target)?;
        loop {
            // -1: every page in one step, under one read transaction.
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => {}
                StepResult::Busy | StepResult::Locked => std::thread::sleep(BUSY_PAUSE),
                _ => std::thread::sleep(BUSY_PAUSE),
            }
        }
    }
    // The pages carry the source's WAL flag; one file is what a backup wants.
    let _: String = target.pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))?;
    target.close().map_err(|(_, e)| e)
}

/// Open a copy for reading only; nothing (not even a journal) is written.
fn open_copy(path: &Path) -> rusqlite::Result<Connection> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// `PRAGMA integrity_check` on the file at `path`: the problems it reports,
/// empty when the database is sound.
pub fn integrity_problems(path: &Path) -> rusqlite::Result<Vec<String>> {
    let conn = open_copy(path)?;
    let mut stmt = conn.prepare("PRAGMA integrity_check")?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
    let mut problems = Vec::new();
    for row in rows {
        let line = row?;
        if line != "ok" {
            problems.push(line);
        }
    }
    Ok(problems)
}

/// The fencing-token high-water marks: how many `(repo, issue)` pairs ever
/// got a token, the highest token, and the sum of every pair's last token
/// (any lost or rolled-back row changes it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenMarks {
    pub pairs: i64,
    pub max: i64,
    pub sum: i64,
}

/// What a database holds, for the manifest and for checking a copy.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Census {
    /// `PRAGMA user_version`.
    pub schema_version: i64,
    /// Rows per table, every table (tables added later are counted too).
    pub tables: BTreeMap<String, i64>,
    /// The `counters` rows (the event log's `seq` high-water mark, ...).
    pub counters: BTreeMap<String, i64>,
    /// `None` when the database has no `lease_tokens` table.
    pub tokens: Option<TokenMarks>,
}

impl Census {
    /// Rows in `table`, if the table exists.
    pub fn rows(&self, table: &str) -> Option<i64> {
        self.tables.get(table).copied()
    }
}

/// Count what the database at `path` holds.
pub fn census_of(path: &Path) -> crate::sql::Result<Census> {
    census(&crate::sql::Connection::from(open_copy(path)?))
}

/// The collab tables of the database on `conn`, by name (on PostgreSQL
/// those of the current schema, without the version table `collab_schema`,
/// which SQLite keeps as a pragma), without SQLite's search index, which
/// its triggers derive from the other tables (`search::is_index_table`).
pub fn table_names(conn: &crate::sql::Connection) -> crate::sql::Result<Vec<String>> {
    let sql = if conn.is_postgres() {
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
           AND table_name <> 'collab_schema' ORDER BY table_name"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         ORDER BY name"
    };
    let mut stmt = conn.prepare(sql)?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<crate::sql::Result<_>>()?;
    Ok(names
        .into_iter()
        .filter(|n| !crate::search::is_index_table(n))
        .collect())
}

/// Count what the database on `conn` holds (either backend).
pub fn census(conn: &crate::sql::Connection) -> crate::sql::Result<Census> {
    let schema_version = crate::migrations::version(conn)?;
    let names = table_names(conn)?;
    let mut tables = BTreeMap::new();
    for name in &names {
        // Table names come from the schema itself; quote them as identifiers.
        let quoted = format!("\"{}\"", name.replace('"', "\"\""));
        let rows: i64 =
            conn.query_row(&format!("SELECT COUNT(*) FROM {quoted}"), [], |r| r.get(0))?;
        tables.insert(name.clone(), rows);
    }
    let mut counters = BTreeMap::new();
    if tables.contains_key("counters") {
        let mut stmt = conn.prepare("SELECT name, value FROM counters ORDER BY name")?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (name, value) = row?;
            counters.insert(name, value);
        }
    }
    let tokens = if tables.contains_key("lease_tokens") {
        Some(conn.query_row(
            "SELECT COUNT(*), COALESCE(MAX(last_token), 0), \
                    CAST(COALESCE(SUM(last_token), 0) AS BIGINT) FROM lease_tokens",
            [],
            |r| {
                Ok(TokenMarks {
                    pairs: r.get(0)?,
                    max: r.get(1)?,
                    sum: r.get(2)?,
                })
            },
        )?)
    } else {
        None
    };
    Ok(Census {
        schema_version,
        tables,
        counters,
        tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leases;

    #[test]
    fn online_copy_matches_and_checks_clean() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("collab.db");
        let conn = leases::open(&live).unwrap();
        leases::acquire(&conn, "r", "i1", "alice", Some(60), 100).unwrap();
        leases::acquire(&conn, "r", "i2", "bob", None, 100).unwrap();
        leases::release(&conn, "r", "i2", "bob", 101).unwrap();
        leases::acquire(&conn, "r", "i2", "carol", None, 102).unwrap();

        let copy = dir.path().join("copy.db");
        copy_online(&live, &copy).unwrap();
        assert!(!dir.path().join("copy.db-wal").exists());
        assert_eq!(integrity_problems(&copy).unwrap(), Vec::<String>::new());
        let census = census_of(&copy).unwrap();
        assert_eq!(census, super::census(&conn).unwrap());
        assert_eq!(census.rows("leases"), Some(2));
        assert_eq!(
            census.tokens,
            Some(TokenMarks {
                pairs: 2,
                max: 2,
                sum: 3
            })
        );
        // The event log's high-water mark is its row count (gap-free seq).
        assert_eq!(
            census.counters.get("events").copied(),
            census.rows("events")
        );
    }

    #[test]
    fn a_damaged_copy_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("collab.db");
        let conn = leases::open(&live).unwrap();
        for i in 0..200 {
            leases::acquire(&conn, "r", &format!("issue-{i:04}"), "alice", None, 1).unwrap();
        }
        let copy = dir.path().join("copy.db");
        copy_online(&live, &copy).unwrap();
        // Scribble over the header of every page after the first (each one
        // a table or index B-tree page).
        let mut bytes = std::fs::read(&copy).unwrap();
        let page = 4096;
        assert!(bytes.len() >= 3 * page);
        for start in (page..bytes.len()).step_by(page) {
            for b in &mut bytes[start + 1..start + 8] {
                *b = 0xff;
            }
        }
        std::fs::write(&copy, bytes).unwrap();
        let problems = integrity_problems(&copy);
        assert!(
            problems.map(|p| !p.is_empty()).unwrap_or(true),
            "damage went unnoticed"
        );
    }
}
