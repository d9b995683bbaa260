//! The append-only event log (`events`): one row per change, written in the
//! same transaction as the change, so a change and its event commit or roll
//! back together. Later readers (the event stream, webhooks, the work
//! queue) read this table; `docs/events.md` documents every type.
//!
//! `seq` is global, gap-free and increasing in commit order: it comes from
//! the `counters` row `'events'`. On SQLite the row is bumped at the
//! append, inside the writing transaction, which holds the database's one
//! write lock. On PostgreSQL, where writers on several nodes run at once,
//! an append inside a transaction writes a provisional number (negative,
//! unique among transactions in flight) and the COMMIT's round trip bumps
//! the counter once by the transaction's count and renumbers its events:
//! the counter's row lock is held from that statement to COMMIT only, so
//! transactions commit in number order and a reader whose snapshot holds
//! `n+1` holds `n` (docs/postgres.md). A rolled-back write returns its
//! numbers with it, on both. The number `append` returns is then
//! provisional until COMMIT: `Connection::final_seq` (or
//! `Writer::final_seq`) gives the final one.

use crate::sql::Connection;

/// Version of the event JSON shapes; bumped when a payload changes
/// incompatibly.
pub const EVENT_SCHEMA_VERSION: i64 = 1;

/// An event to append. `payload` is the type's JSON object.
#[derive(Debug, Clone)]
pub struct NewEvent<'a> {
    pub kind: &'a str,
    pub repo: Option<&'a str>,
    pub object_id: Option<&'a str>,
    pub actor: Option<&'a str>,
    pub payload: serde_json::Value,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Event {
    pub seq: i64,
    /// Unix seconds.
    pub at: i64,
    #[serde(rename = "type")]
    pub kind: String,
    /// The name the repository had when the event was written.
    pub repo: Option<String>,
    /// The repository's lasting id (`repositories`): what visibility is
    /// decided by, never the name.
    pub repo_id: Option<String>,
    /// The name the repository with `repo_id` has now; `None` once it was
    /// deleted (its events are then for administrators only).
    #[serde(skip)]
    pub repo_now: Option<String>,
    pub object_id: Option<String>,
    pub actor: Option<String>,
    pub payload: serde_json::Value,
}

impl Event {
    /// Whether the event belongs to a repository (live or deleted) rather
    /// than to the server.
    pub fn has_repo(&self) -> bool {
        self.repo.is_some() || self.repo_id.is_some()
    }
}

/// Append `event` at `now` inside the caller's transaction; returns its seq.
/// On PostgreSQL inside a transaction that seq is provisional (negative)
/// until COMMIT (see the module's note).
pub fn append(conn: &Connection, event: &NewEvent<'_>, now: i64) -> crate::sql::Result<i64> {
    let seq: i64 = match conn.provisional_seq() {
        Some(provisional) => provisional,
        None => conn
            .prepare_cached(
                "UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value",
            )?
            .query_row([], |r| r.get(0))?,
    };
    // The repository's lasting id, assigned at first use. `repo.created`
    // always starts a new one: whatever held the name before (a deleted
    // repository, or one removed by hand) keeps its id and its events.
    let repo_id = match event.repo {
        Some(name) if event.kind == "repo.created" => {
            Some(crate::repo_ids::new_identity(conn, name, now)?)
        }
        Some(name) => {
            // The common case in one statement (one round trip on
            // PostgreSQL): the id read by the insert itself. No row is
            // inserted when the repository has no id yet.
            let inserted = conn
                .prepare_cached(
                    "INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload)
                     SELECT CAST(?1 AS BIGINT), CAST(?2 AS BIGINT), ?3, ?4, id, ?5, ?6, ?7
                     FROM repositories WHERE name = ?4",
                )?
                .execute(crate::sql::params![
                    seq,
                    now,
                    event.kind,
                    name,
                    event.object_id,
                    event.actor,
                    event.payload.to_string(),
                ])?;
            if inserted == 1 {
                conn.notify(EVENTS_CHANNEL)?;
                return Ok(seq);
            }
            Some(crate::repo_ids::id_of(conn, name, now)?)
        }
        None => None,
    };
    conn.prepare_cached(
        "INSERT INTO events (seq, at, type, repo, repo_id, object_id, actor, payload)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(crate::sql::params![
        seq,
        now,
        event.kind,
        event.repo,
        repo_id,
        event.object_id,
        event.actor,
        event.payload.to_string(),
    ])?;
    // Other nodes LISTEN (`event_log::listen`): told once this commits.
    conn.notify(EVENTS_CHANNEL)?;
    Ok(seq)
}

/// The PostgreSQL channel every committed event append is announced on.
pub const EVENTS_CHANNEL: &str = "collab_events";

/// The highest `seq` ever handed out (0 on an empty log). Pruning never
/// lowers it: it is the counter, not the table's maximum.
pub fn head(conn: &Connection) -> crate::sql::Result<i64> {
    conn.prepare_cached("SELECT value FROM counters WHERE name = 'events'")?
        .query_row([], |r| r.get(0))
}

/// The oldest `seq` still stored and the head, read in one statement so
/// both come from one snapshot: read apart, an event appended between them
/// (the first one, say) made an empty log look pruned (`oldest = head + 1`
/// from before, `head` from after). `oldest` is `head + 1` when the log is
/// empty (every event so far was pruned, or there was none).
pub fn bounds(conn: &Connection) -> crate::sql::Result<(i64, i64)> {
    conn.prepare_cached(
        "SELECT (SELECT MIN(seq) FROM events), value FROM counters WHERE name = 'events'",
    )?
    .query_row([], |r| {
        let min: Option<i64> = r.get(0)?;
        let head: i64 = r.get(1)?;
        Ok((min.unwrap_or(head + 1), head))
    })
}

/// Delete events written before `cutoff` (unix seconds), at most `limit`
/// rows (retention works in small batches so the writer is never held
/// long); returns how many went. Only rows older than `cutoff` go, oldest
/// `seq` first (on PostgreSQL `at` is the writing node's clock, so near the
/// cutoff it may not follow `seq` exactly).
pub fn prune_before(conn: &Connection, cutoff: i64, limit: i64) -> crate::sql::Result<usize> {
    conn.prepare_cached(
        "DELETE FROM events WHERE seq IN
           (SELECT seq FROM events WHERE at < ?1 ORDER BY seq LIMIT ?2)",
    )?
    .execute(crate::sql::params![cutoff, limit])
}

/// Events with `seq > after`, oldest first, at most `limit`.
pub fn after(conn: &Connection, after: i64, limit: i64) -> crate::sql::Result<Vec<Event>> {
    let mut stmt = conn.prepare_cached(
        "SELECT e.seq, e.at, e.type, e.repo, e.object_id, e.actor, e.payload, e.repo_id, r.name
         FROM events e LEFT JOIN repositories r ON r.id = e.repo_id
         WHERE e.seq > ?1 ORDER BY e.seq LIMIT ?2",
    )?;
    let rows = stmt.query_map(crate::sql::params![after, limit], |r| {
        let payload: String = r.get(6)?;
        Ok(Event {
            seq: r.get(0)?,
            at: r.get(1)?,
            kind: r.get(2)?,
            repo: r.get(3)?,
            repo_id: r.get(7)?,
            repo_now: r.get(8)?,
            object_id: r.get(4)?,
            actor: r.get(5)?,
            payload: serde_json::from_str(&payload).unwrap_or(serde_json::Value::Null),
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    fn ev(kind: &str) -> NewEvent<'_> {
        NewEvent {
            kind,
            repo: Some("team/app"),
            object_id: Some("abcd"),
            actor: Some("alice"),
            payload: serde_json::json!({"n": 1}),
        }
    }

    #[test]
    fn seq_is_dense_and_a_rolled_back_append_gives_its_number_back() {
        let db = db();
        let conn = db.transaction().unwrap();
        let a = append(&conn, &ev("a"), 10).unwrap();
        conn.execute_batch("SAVEPOINT s").unwrap();
        append(&conn, &ev("b"), 11).unwrap();
        conn.execute_batch("ROLLBACK TO s; RELEASE s").unwrap();
        let c = append(&conn, &ev("c"), 12).unwrap();
        conn.commit().unwrap();
        // On PostgreSQL the numbers were provisional until COMMIT.
        assert_eq!((db.final_seq(a), db.final_seq(c)), (1, 2));
        let all = after(&db, 0, 10).unwrap();
        assert_eq!(
            all.iter()
                .map(|e| (e.seq, e.kind.as_str()))
                .collect::<Vec<_>>(),
            vec![(1, "a"), (2, "c")]
        );
        assert_eq!(all[0].payload, serde_json::json!({"n": 1}));
        assert_eq!(head(&db).unwrap(), 2);
    }

    fn swap((oldest, head): (i64, i64)) -> (i64, i64) {
        (head, oldest)
    }

    #[test]
    fn head_oldest_and_pruning() {
        let conn = db();
        assert_eq!(swap(bounds(&conn).unwrap()), (0, 1));
        for (i, at) in [10, 11, 20, 21].iter().enumerate() {
            assert_eq!(append(&conn, &ev("a"), *at).unwrap(), i as i64 + 1);
        }
        assert_eq!(prune_before(&conn, 20, 1).unwrap(), 1);
        assert_eq!(bounds(&conn).unwrap().0, 2);
        assert_eq!(prune_before(&conn, 20, 100).unwrap(), 1);
        assert_eq!(swap(bounds(&conn).unwrap()), (4, 3));
        assert_eq!(prune_before(&conn, 100, 100).unwrap(), 2);
        assert_eq!(swap(bounds(&conn).unwrap()), (4, 5));
    }

    #[test]
    fn deleting_old_rows_never_reuses_a_seq() {
        let conn = db();
        append(&conn, &ev("a"), 10).unwrap();
        append(&conn, &ev("b"), 11).unwrap();
        conn.execute("DELETE FROM events", []).unwrap();
        assert_eq!(append(&conn, &ev("c"), 12).unwrap(), 3);
    }
}
