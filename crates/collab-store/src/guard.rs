//! Checks before the server trusts `collab.db`, at every start.
//!
//! The database holds the fencing tokens, which must only ever grow: a
//! database that silently starts over hands out token 1 again, and two
//! holders then both believe they hold the newest lease. So:
//!
//! - a database that is missing, or empty (0 bytes), where the state
//!   directory shows earlier use (the [`MARKER`] file the server writes
//!   once its database opened, or repositories in `repos_dir`) is a loud
//!   start error, unless the operator says it is wanted
//!   (`serve --allow-empty-db`, for one start, never a config key);
//! - an existing database must pass `PRAGMA quick_check` (a corrupt page
//!   makes the start fail with SQLite's own words);
//! - once the database is open, the marker is written, so that a later
//!   loss is noticed even while `repos_dir` is empty.
//!
//! `/readyz` runs a real query on the lease tables ([`ready_query`]) for
//! the corruption that happens while the server runs.

use std::path::Path;

use crate::sql::Connection;
use anyhow::{bail, Context as _};

/// The file in the state directory that says a server has used it (and
/// its database) before.
pub const MARKER: &str = ".git-collab-state";

/// Why the state directory counts as used before, if it does.
fn earlier_use(state_dir: &Path, repos_dir: &Path) -> Option<String> {
    let marker = state_dir.join(MARKER);
    if marker.exists() {
        return Some(format!("{} exists", marker.display()));
    }
    // Repositories (or namespace directories holding them) are the only
    // directories the server keeps in `repos_dir`.
    let dirs = std::fs::read_dir(repos_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .count();
    (dirs > 0).then(|| format!("{} holds repositories", repos_dir.display()))
}

/// Refuse to start on a missing or empty database where there was one
/// before, and on a database that fails `PRAGMA quick_check`. Run before
/// the database is opened (opening creates it).
pub fn check_before_open(
    location: &crate::sql::Location,
    state_dir: &Path,
    repos_dir: &Path,
    allow_empty: bool,
) -> anyhow::Result<()> {
    let db = match location {
        crate::sql::Location::Sqlite(path) => path.as_path(),
        crate::sql::Location::Postgres(url) => {
            return check_postgres(url, location, state_dir, repos_dir, allow_empty)
        }
    };
    let size = match std::fs::metadata(db) {
        Ok(meta) => Some(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("collab_db: {}", db.display())),
    };
    let lost = match size {
        None => "is missing",
        Some(0) => "is empty (0 bytes)",
        Some(_) => return quick_check_file(db),
    };
    let Some(used) = earlier_use(state_dir, repos_dir) else {
        return Ok(()); // A first start.
    };
    if allow_empty {
        tracing::warn!(
            "collab_db: {} {lost} although {used}; starting a new one (--allow-empty-db): fencing tokens start again at 1",
            db.display()
        );
        return Ok(());
    }
    bail!(
        "collab_db: {} {lost}, but this state directory was used before ({used}); \
         fencing tokens would start again at 1. Restore the database from a backup, \
         or start once with `serve --allow-empty-db` to begin a new one",
        db.display()
    )
}

/// The same rule for a PostgreSQL database: one that has no schema yet
/// (never migrated) where the state directory was used is a lost
/// database. Integrity is PostgreSQL's own business (checksums, WAL).
fn check_postgres(
    url: &str,
    location: &crate::sql::Location,
    state_dir: &Path,
    repos_dir: &Path,
    allow_empty: bool,
) -> anyhow::Result<()> {
    let conn = Connection::open_postgres(url)
        .with_context(|| format!("collab_db: cannot connect to {}", location.display()))?;
    let has_schema: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                            WHERE table_schema = current_schema() AND table_name = 'collab_schema')",
            [],
            |r| r.get(0),
        )
        .with_context(|| format!("collab_db: {}", location.display()))?;
    let version = if has_schema {
        crate::migrations::version(&conn)?
    } else {
        0
    };
    if version > 0 {
        return Ok(());
    }
    let Some(used) = earlier_use(state_dir, repos_dir) else {
        return Ok(());
    };
    if allow_empty {
        tracing::warn!(
            "collab_db: {} has no collab schema although {used}; starting a new one (--allow-empty-db): fencing tokens start again at 1",
            location.display()
        );
        return Ok(());
    }
    bail!(
        "collab_db: {} has no collab schema, but this state directory was used before ({used}); \
         fencing tokens would start again at 1. Restore the database from a backup (or run \
         `git-collab-server db migrate --to` from the old SQLite file), or start once with \
         `serve --allow-empty-db` to begin a new one",
        location.display()
    )
}

/// `PRAGMA quick_check` on the database at `path`.
fn quick_check_file(path: &Path) -> anyhow::Result<()> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE)
            .map(Connection::from)
            .with_context(|| format!("collab_db: cannot open {}", path.display()))?;
    quick_check(&conn).map_err(|problem| {
        anyhow::anyhow!(
            "collab_db: {} fails its integrity check ({problem}); restore it from a backup",
            path.display()
        )
    })
}

/// `Ok` when `PRAGMA quick_check` answers `ok`; else its first problem
/// (or the error that stopped it: a corrupt page can stop it outright).
pub fn quick_check(conn: &Connection) -> Result<(), String> {
    let rows: crate::sql::Result<Vec<String>> = conn
        .prepare("PRAGMA quick_check")
        .and_then(|mut stmt| stmt.query_map([], |row| row.get(0))?.collect());
    match rows {
        Ok(rows) if rows.len() == 1 && rows[0] == "ok" => Ok(()),
        Ok(rows) => Err(rows
            .into_iter()
            .next()
            .unwrap_or_else(|| "no answer".into())),
        Err(e) => Err(e.to_string()),
    }
}

/// Write the marker into `state_dir` (once the database opened).
pub fn mark_state_dir(state_dir: &Path) -> anyhow::Result<()> {
    let marker = state_dir.join(MARKER);
    if marker.exists() {
        return Ok(());
    }
    std::fs::write(
        &marker,
        "This state directory belongs to a git-collab server; its collab.db must not be lost.\n",
    )
    .with_context(|| format!("writing {}", marker.display()))
}

/// The query `/readyz` runs: it reads both lease tables, so a database
/// whose lease pages are corrupt (or whose tables are gone) is not ready.
pub fn ready_query(conn: &Connection) -> crate::sql::Result<()> {
    conn.query_row("SELECT count(*) FROM leases", [], |row| {
        row.get::<_, i64>(0)
    })?;
    conn.query_row(
        "SELECT coalesce(max(last_token), 0) FROM lease_tokens",
        [],
        |row| row.get::<_, i64>(0),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dirs {
        _tmp: tempfile::TempDir,
        state: std::path::PathBuf,
        repos: std::path::PathBuf,
        db: std::path::PathBuf,
    }

    fn dirs() -> Dirs {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("state");
        let repos = state.join("repos");
        std::fs::create_dir_all(&repos).unwrap();
        Dirs {
            db: repos.join("collab.db"),
            state,
            repos,
            _tmp: tmp,
        }
    }

    #[test]
    fn a_lost_database_is_refused_once_the_state_dir_was_used() {
        let d = dirs();
        // First start: nothing there, nothing used.
        check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap();
        crate::leases::open(&d.db).unwrap();
        mark_state_dir(&d.state).unwrap();
        check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap();

        std::fs::write(&d.db, b"").unwrap();
        let e = check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap_err();
        assert!(e.to_string().contains("is empty (0 bytes)"), "{e}");
        assert!(e.to_string().contains("--allow-empty-db"), "{e}");
        std::fs::remove_file(&d.db).unwrap();
        let e = check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap_err();
        assert!(e.to_string().contains("is missing"), "{e}");
        check_before_open(&d.db.clone().into(), &d.state, &d.repos, true).unwrap();

        // Without the marker, repositories show earlier use too.
        std::fs::remove_file(d.state.join(MARKER)).unwrap();
        check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap();
        git2::Repository::init_bare(d.repos.join("r.git")).unwrap();
        let e = check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap_err();
        assert!(e.to_string().contains("holds repositories"), "{e}");
    }

    #[test]
    fn a_corrupt_page_fails_the_check_and_the_ready_query() {
        let d = dirs();
        {
            let conn = crate::leases::open(&d.db).unwrap();
            for i in 0..200 {
                crate::leases::acquire(&conn, "r.git", &format!("{i:040x}"), "alice", None, 1)
                    .unwrap();
            }
            ready_query(&conn).unwrap();
            quick_check(&conn).unwrap();
        }
        // Everything after the header page becomes garbage.
        let mut bytes = std::fs::read(&d.db).unwrap();
        let page = u16::from_be_bytes([bytes[16], bytes[17]]) as usize;
        for b in &mut bytes[page..] {
            *b = 0xa5;
        }
        std::fs::write(&d.db, &bytes).unwrap();
        let e = check_before_open(&d.db.clone().into(), &d.state, &d.repos, false).unwrap_err();
        assert!(e.to_string().contains("fails its integrity check"), "{e}");
        let conn = Connection::open(&d.db).unwrap();
        assert!(ready_query(&conn).is_err());
    }
}
