//! What the collab database holds per repository, moved or dropped with it.
//!
//! Rows name their repository by its canonical name (`team/app.git`) in a
//! `repo` column. Rather than list every table here (and forget the next
//! one), the tables are found by looking for that column, so a table added
//! by a later migration follows a rename or a delete without a change here.
//! Two tables are deliberately special:
//! - `events` is history: old rows keep the name they were written under.
//! - `lease_tokens` is never deleted from (fencing tokens only grow): a
//!   rename carries the high-water marks to the new name; a delete keeps
//!   them, so a repository re-created under the same name never hands a
//!   token out twice.

use crate::repo_ids::{id_of, retire};
use crate::sql::Connection;

use super::event_log::{self, NewEvent};

/// Every table with a `repo` column, except the event log.
fn tables_with_repo(conn: &Connection) -> crate::sql::Result<Vec<String>> {
    if conn.is_postgres() {
        let mut stmt = conn.prepare(
            "SELECT table_name::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND column_name = 'repo'
               AND table_name <> 'events'
             ORDER BY table_name",
        )?;
        return stmt.query_map([], |r| r.get(0))?.collect();
    }
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
    )?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<crate::sql::Result<_>>()?;
    let mut found = Vec::new();
    for name in names {
        if name == "events" {
            continue;
        }
        let has_repo = conn
            .prepare(&format!(
                "SELECT 1 FROM pragma_table_info('{name}') WHERE name = 'repo'"
            ))?
            .exists([])?;
        if has_repo {
            found.push(name);
        }
    }
    Ok(found)
}

/// Check foreign keys at COMMIT instead of after each statement (SQLite's
/// pragma; on PostgreSQL the keys are declared DEFERRABLE for this).
fn defer_foreign_keys(conn: &Connection) -> crate::sql::Result<()> {
    conn.execute_batch(if conn.is_postgres() {
        "SET CONSTRAINTS ALL DEFERRED"
    } else {
        "PRAGMA defer_foreign_keys = ON"
    })
}

/// Move every row of `old` to `new` and record `repo.renamed`.
pub fn rename(
    conn: &Connection,
    old: &str,
    new: &str,
    actor: &str,
    now: i64,
) -> crate::sql::Result<()> {
    // Parent rows (`issues`) and child rows (comments, labels, links) move
    // one table at a time: check the foreign keys at COMMIT, when all have.
    defer_foreign_keys(conn)?;
    for table in tables_with_repo(conn)? {
        conn.execute(
            &format!("UPDATE {table} SET repo = ?1 WHERE repo = ?2"),
            [new, old],
        )?;
    }
    // Links from other repositories follow too (`repo#id` targets).
    conn.execute(
        "UPDATE issue_links SET target_repo = ?1 WHERE target_repo = ?2",
        [new, old],
    )?;
    // The identity follows the repository; a stale holder of the new name
    // (removed by hand, never deleted through the server) is retired.
    let id = id_of(conn, old, now)?;
    retire(conn, new, now)?;
    conn.execute(
        "UPDATE repositories SET name = ?1 WHERE id = ?2",
        [new, id.as_str()],
    )?;
    event_log::append(
        conn,
        &NewEvent {
            kind: "repo.renamed",
            repo: Some(new),
            object_id: None,
            actor: Some(actor),
            payload: serde_json::json!({ "from": old, "to": new }),
        },
        now,
    )?;
    Ok(())
}

/// Drop every row of `repo` (except its fencing high-water marks) and
/// record `repo.deleted`.
pub fn delete(conn: &Connection, repo: &str, actor: &str, now: i64) -> crate::sql::Result<()> {
    defer_foreign_keys(conn)?;
    for table in tables_with_repo(conn)? {
        if table == "lease_tokens" {
            continue;
        }
        conn.execute(&format!("DELETE FROM {table} WHERE repo = ?1"), [repo])?;
    }
    event_log::append(
        conn,
        &NewEvent {
            kind: "repo.deleted",
            repo: Some(repo),
            object_id: None,
            actor: Some(actor),
            payload: serde_json::json!({}),
        },
        now,
    )?;
    // Its git-lfs locks are by id, not by name: dropped while the id
    // still has the name.
    crate::lfs_locks::drop_repo(conn, repo)?;
    // After its last event: the id loses the name for ever.
    retire(conn, repo, now)?;
    Ok(())
}

/// Record a settings change (`describe`, `visibility`, `set-head`).
pub fn settings_changed(
    conn: &Connection,
    repo: &str,
    actor: &str,
    payload: serde_json::Value,
    now: i64,
) -> crate::sql::Result<()> {
    event_log::append(
        conn,
        &NewEvent {
            kind: "repo.settings_changed",
            repo: Some(repo),
            object_id: None,
            actor: Some(actor),
            payload,
        },
        now,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    fn count(conn: &Connection, sql: &str) -> i64 {
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn rename_moves_leases_and_tokens_and_keeps_history() {
        let conn = db();
        super::super::leases::acquire(&conn, "a.git", "i1", "alice", Some(60), 100).unwrap();
        rename(&conn, "a.git", "b.git", "admin", 101).unwrap();
        assert_eq!(
            count(&conn, "SELECT COUNT(*) FROM leases WHERE repo = 'b.git'"),
            1
        );
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM lease_tokens WHERE repo = 'b.git'"
            ),
            1
        );
        assert_eq!(
            count(&conn, "SELECT COUNT(*) FROM leases WHERE repo = 'a.git'"),
            0
        );
        // The next tenure under the new name continues the token sequence.
        super::super::leases::release(&conn, "b.git", "i1", "alice", 102).unwrap();
        let next = super::super::leases::acquire(&conn, "b.git", "i1", "bob", None, 103).unwrap();
        assert!(matches!(
            next,
            super::super::leases::Acquire::Acquired {
                lease: super::super::leases::Lease { token: 2, .. },
                ..
            }
        ));
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM events WHERE type = 'repo.renamed'"
            ),
            1
        );
    }

    /// Issues with comments, labels and links (foreign keys on) follow a
    /// rename, links into the repository included, and go with a delete.
    #[test]
    fn issues_with_children_follow_a_rename_and_go_with_a_delete() {
        let conn = db();
        if !conn.is_postgres() {
            conn.execute_batch("PRAGMA foreign_keys = ON").unwrap();
        }
        let (one, two) = ("1".repeat(40), "2".repeat(40));
        for (repo, id) in [("a.git", &one), ("a.git", &two), ("other.git", &one)] {
            conn.execute(
                "INSERT INTO issues (repo, id, title, body, author, author_name, created_ms,
                                     updated_ms, status)
                 VALUES (?1, ?2, 't', '', 'alice', 'alice', 1, 1, 'open')",
                [repo, id.as_str()],
            )
            .unwrap();
        }
        conn.execute_batch(&format!(
            "INSERT INTO issue_comments VALUES ('a.git', '{one}', 1, '{two}', 'alice', 'alice', NULL, 1, 'hi');
             INSERT INTO issue_labels VALUES ('a.git', '{one}', 'bug');
             INSERT INTO issue_links VALUES ('a.git', '{one}', 'blocks', 'a.git', '{two}', 'alice', 1);
             INSERT INTO issue_links VALUES ('other.git', '{one}', 'relates', 'a.git', '{one}', 'alice', 1);"
        ))
        .unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        rename(&tx, "a.git", "b.git", "admin", 2).unwrap();
        tx.commit().unwrap();
        for table in ["issues", "issue_comments", "issue_labels", "issue_links"] {
            assert_eq!(
                count(
                    &conn,
                    &format!("SELECT COUNT(*) FROM {table} WHERE repo = 'a.git'")
                ),
                0,
                "{table}"
            );
        }
        assert_eq!(
            count(
                &conn,
                "SELECT COUNT(*) FROM issue_links WHERE target_repo = 'b.git'"
            ),
            2
        );
        let tx = conn.unchecked_transaction().unwrap();
        delete(&tx, "b.git", "admin", 3).unwrap();
        tx.commit().unwrap();
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM issues"), 1);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM issue_comments"), 0);
    }

    #[test]
    fn delete_drops_rows_but_keeps_token_high_water_marks() {
        let conn = db();
        super::super::leases::acquire(&conn, "a.git", "i1", "alice", None, 100).unwrap();
        delete(&conn, "a.git", "admin", 101).unwrap();
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM leases"), 0);
        assert_eq!(count(&conn, "SELECT COUNT(*) FROM lease_tokens"), 1);
        let again = super::super::leases::acquire(&conn, "a.git", "i1", "bob", None, 102).unwrap();
        assert!(matches!(
            again,
            super::super::leases::Acquire::Acquired {
                lease: super::super::leases::Lease { token: 2, .. },
                ..
            }
        ));
    }

    fn ev(repo: &str) -> NewEvent<'_> {
        NewEvent {
            kind: "issue.opened",
            repo: Some(repo),
            object_id: None,
            actor: Some("alice"),
            payload: serde_json::json!({"title": "secret"}),
        }
    }

    fn created(repo: &str) -> NewEvent<'_> {
        NewEvent {
            kind: "repo.created",
            ..ev(repo)
        }
    }

    /// (seq, repo_id, the id's name now) of every event.
    fn ids(conn: &Connection) -> Vec<(i64, Option<String>, Option<String>)> {
        event_log::after(conn, 0, 100)
            .unwrap()
            .into_iter()
            .map(|e| (e.seq, e.repo_id, e.repo_now))
            .collect()
    }

    #[test]
    fn a_reused_name_gets_a_new_identity_and_the_old_events_keep_theirs() {
        let conn = db();
        event_log::append(&conn, &created("p.git"), 1).unwrap();
        event_log::append(&conn, &ev("p.git"), 2).unwrap();
        delete(&conn, "p.git", "admin", 3).unwrap();
        event_log::append(&conn, &created("p.git"), 4).unwrap();
        event_log::append(&conn, &ev("p.git"), 5).unwrap();
        let all = ids(&conn);
        let old = all[0].1.clone().unwrap();
        let new = all[3].1.clone().unwrap();
        assert_ne!(old, new);
        // Created, opened and deleted carry the old id, which has no name.
        for row in &all[..3] {
            assert_eq!(
                (row.1.as_deref(), row.2.as_deref()),
                (Some(old.as_str()), None)
            );
        }
        for row in &all[3..] {
            assert_eq!(
                (row.1.as_deref(), row.2.as_deref()),
                (Some(new.as_str()), Some("p.git"))
            );
        }
        // Re-created without a delete (removed by hand): still a new id.
        event_log::append(&conn, &created("p.git"), 6).unwrap();
        let last = ids(&conn).pop().unwrap();
        assert_ne!(last.1.as_deref(), Some(new.as_str()));
        assert_eq!(ids(&conn)[3].2, None);
    }

    #[test]
    fn a_rename_keeps_the_identity_and_frees_the_old_name() {
        let conn = db();
        event_log::append(&conn, &created("a.git"), 1).unwrap();
        event_log::append(&conn, &ev("a.git"), 2).unwrap();
        rename(&conn, "a.git", "b.git", "admin", 3).unwrap();
        event_log::append(&conn, &created("a.git"), 4).unwrap();
        let all = ids(&conn);
        let id = all[0].1.clone();
        for row in &all[..3] {
            assert_eq!((&row.1, row.2.as_deref()), (&id, Some("b.git")));
        }
        assert_ne!(all[3].1, id);
        assert_eq!(all[3].2.as_deref(), Some("a.git"));
    }
}
