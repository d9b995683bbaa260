//! Commit checks in `collab.db` (CI results on a commit), as plain
//! functions over a connection (`now` passed in). A check is keyed by the
//! repository's lasting id, the commit and the check's name; a `set`
//! replaces its state and appends `check.updated` (with the previous
//! state) in the same transaction, so the events are its history. The
//! server validates names, URLs and descriptions and that the commit is in
//! the repository; this module stores what it is given.

use crate::event_log::{self, NewEvent};
use crate::sql::{params, Connection, OptionalExtension as _};

/// The states a check may be in.
pub const STATES: &[&str] = &["pending", "success", "failure", "error", "skipped"];

/// Longest check name, in bytes.
pub const MAX_NAME: usize = 100;

/// A check name: letters, digits and `/._:-`, starting with a letter or
/// digit, at most [`MAX_NAME`] bytes (in verbs and in merge rules alike).
pub fn valid_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b':' | b'-'))
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid check name '{}': 1 to {MAX_NAME} letters, digits and '/._:-', \
             starting with a letter or digit",
            name.escape_default()
        ))
    }
}

/// A stored check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub commit: String,
    pub name: String,
    pub state: String,
    pub url: Option<String>,
    pub description: Option<String>,
    pub updated_by: String,
    pub updated_at: i64,
}

/// What a `set` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Set {
    /// The state before, `None` for a new check.
    pub previous: Option<String>,
    pub seq: i64,
}

/// Set the check `check.name` on `check.commit` of `repo` (by name; its
/// lasting id is looked up) and append `check.updated`. Runs in the
/// caller's write transaction: two concurrent sets of one check serialize
/// on the writer, and each event names the state the other left.
pub fn set(conn: &Connection, repo: &str, check: &Check, now: i64) -> crate::sql::Result<Set> {
    let repo_id = crate::repo_ids::id_of(conn, repo, now)?;
    let previous: Option<String> = conn
        .query_row(
            "SELECT state FROM checks WHERE repo_id = ?1 AND commit_id = ?2 AND name = ?3",
            params![repo_id, check.commit, check.name],
            |r| r.get(0),
        )
        .optional()?;
    conn.execute(
        "DELETE FROM checks WHERE repo_id = ?1 AND commit_id = ?2 AND name = ?3",
        params![repo_id, check.commit, check.name],
    )?;
    conn.execute(
        "INSERT INTO checks (repo_id, repo, commit_id, name, state, url, description, \
         updated_by, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            repo_id,
            repo,
            check.commit,
            check.name,
            check.state,
            check.url,
            check.description,
            check.updated_by,
            now,
        ],
    )?;
    let seq = event_log::append(
        conn,
        &NewEvent {
            kind: "check.updated",
            repo: Some(repo),
            object_id: Some(&check.commit),
            actor: Some(&check.updated_by),
            payload: serde_json::json!({
                "commit": check.commit,
                "name": check.name,
                "state": check.state,
                "previous_state": previous,
                "url": check.url,
                "description": check.description,
            }),
        },
        now,
    )?;
    Ok(Set { previous, seq })
}

/// The checks on `commit` of `repo`, by name.
pub fn list(conn: &Connection, repo: &str, commit: &str) -> crate::sql::Result<Vec<Check>> {
    let mut stmt = conn.prepare(
        "SELECT commit_id, name, state, url, description, updated_by, updated_at \
         FROM checks WHERE repo = ?1 AND commit_id = ?2 ORDER BY name",
    )?;
    let rows = stmt.query_map(params![repo, commit], |r| {
        Ok(Check {
            commit: r.get(0)?,
            name: r.get(1)?,
            state: r.get(2)?,
            url: r.get(3)?,
            description: r.get(4)?,
            updated_by: r.get(5)?,
            updated_at: r.get(6)?,
        })
    })?;
    rows.collect()
}

/// How many checks `commit` of `repo` has (bounded by the server).
pub fn count(conn: &Connection, repo: &str, commit: &str) -> crate::sql::Result<i64> {
    conn.query_row(
        "SELECT COUNT(*) FROM checks WHERE repo = ?1 AND commit_id = ?2",
        params![repo, commit],
        |r| r.get(0),
    )
}

/// The issues linked to a patch one of whose revisions has `commit` as its
/// head: what a `--lease-token` on a check of that commit is fenced by.
pub fn linked_issues_of_head(
    conn: &Connection,
    repo: &str,
    commit: &str,
) -> crate::sql::Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT DISTINCT i.issue_id FROM patch_revisions r
           JOIN patch_issues i ON i.repo = r.repo AND i.patch_id = r.patch_id
          WHERE r.repo = ?1 AND r.head = ?2
          ORDER BY i.issue_id",
    )?;
    let rows = stmt.query_map(params![repo, commit], |r| r.get::<_, String>(0))?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(state: &str) -> Check {
        Check {
            commit: "a".repeat(40),
            name: "ci/test".into(),
            state: state.into(),
            url: Some("https://ci.example/1".into()),
            description: None,
            updated_by: "ci".into(),
            updated_at: 0,
        }
    }

    /// A second set replaces the state and names the first in its event.
    #[test]
    fn set_replaces_and_remembers_the_previous_state() {
        let conn = crate::testing::db();
        let first = set(&conn, "r.git", &check("pending"), 10).unwrap();
        assert_eq!(first.previous, None);
        let second = set(&conn, "r.git", &check("success"), 11).unwrap();
        assert_eq!(second.previous.as_deref(), Some("pending"));
        let rows = list(&conn, "r.git", &"a".repeat(40)).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].state, "success");
        assert_eq!(rows[0].updated_at, 11);
        assert!(list(&conn, "other.git", &"a".repeat(40))
            .unwrap()
            .is_empty());
    }
}
