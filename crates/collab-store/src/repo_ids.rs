//! The lasting identities of repositories (`repositories`): an id that
//! stays with a repository through renames and outlives its deletion, so
//! its events keep deciding their visibility by it. Below both the event
//! log, which records each event's repository id, and `repos`, whose
//! renames and deletes move the identity and are events themselves.

use crate::sql::Connection;

/// A new random repository id: 128 bits as 32 lowercase hex digits.
pub fn new_repo_id() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The lasting id of the live repository called `name`, assigned now if it
/// has none yet (repositories from before version 9 that wrote no event,
/// or created by hand on disk).
pub fn id_of(conn: &Connection, name: &str, now: i64) -> crate::sql::Result<String> {
    let found: Option<String> = conn
        .prepare_cached("SELECT id FROM repositories WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .map(Some)
        .or_else(|e| match e {
            crate::sql::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })?;
    if let Some(id) = found {
        return Ok(id);
    }
    // First use. On PostgreSQL another node may be assigning the same
    // name's id at this moment: the insert then waits for it (a lease group
    // only up to its `lock_timeout`, and is deferred) and yields, and the
    // id is the one that committed.
    conn.prepare_cached(
        "INSERT INTO repositories (id, name, created_at, deleted_at) VALUES (?1, ?2, ?3, NULL)
         ON CONFLICT (name) DO NOTHING",
    )?
    .execute(crate::sql::params![new_repo_id(), name, now])?;
    conn.prepare_cached("SELECT id FROM repositories WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
}

/// The lasting id of the live repository called `name`, if it has one
/// yet (a read; [`id_of`] assigns one).
pub fn live_id(conn: &Connection, name: &str) -> crate::sql::Result<Option<String>> {
    conn.prepare_cached("SELECT id FROM repositories WHERE name = ?1")?
        .query_row([name], |r| r.get(0))
        .map(Some)
        .or_else(|e| match e {
            crate::sql::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
}

/// A new id for a repository just created as `name`: whatever held the
/// name before is retired (deleted) with its events.
pub fn new_identity(conn: &Connection, name: &str, now: i64) -> crate::sql::Result<String> {
    retire(conn, name, now)?;
    insert_identity(conn, name, now)
}

fn insert_identity(conn: &Connection, name: &str, now: i64) -> crate::sql::Result<String> {
    let id = new_repo_id();
    conn.prepare_cached(
        "INSERT INTO repositories (id, name, created_at, deleted_at) VALUES (?1, ?2, ?3, NULL)",
    )?
    .execute(crate::sql::params![id, name, now])?;
    Ok(id)
}

/// Mark the repository now called `name` (if any) deleted: it loses the
/// name and keeps its id, so its events stay with it, admin-only.
pub(crate) fn retire(conn: &Connection, name: &str, now: i64) -> crate::sql::Result<()> {
    conn.prepare_cached("UPDATE repositories SET name = NULL, deleted_at = ?2 WHERE name = ?1")?
        .execute(crate::sql::params![name, now])?;
    Ok(())
}
