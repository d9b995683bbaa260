//! How far the signed git export of each issue has got (`issue_exports`):
//! the issue revision it reflects, the export ref's tip, and a summary of
//! the state it shows, so the exporter appends only what changed without
//! replaying the export. Plain functions over a connection, like the rest
//! of `db`.

use rusqlite::{Connection, OptionalExtension};

/// An issue whose export is behind: `(repo, id, revision)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub repo: String,
    pub id: String,
    pub revision: i64,
}

/// What the export of one issue shows, as last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exported {
    pub revision: i64,
    pub tip: String,
    /// JSON summary (see `export::Summary`).
    pub state: String,
}

/// Issues of `repo` (every repository when `None`) whose export is behind
/// their revision, at most `limit`.
pub fn pending(
    conn: &Connection,
    repo: Option<&str>,
    limit: i64,
) -> rusqlite::Result<Vec<Pending>> {
    let mut stmt = conn.prepare_cached(
        "SELECT i.repo, i.id, i.revision FROM issues i
         LEFT JOIN issue_exports e ON e.repo = i.repo AND e.issue_id = i.id
         WHERE (?1 IS NULL OR i.repo = ?1) AND (e.revision IS NULL OR e.revision < i.revision)
         ORDER BY i.repo, i.id LIMIT ?2",
    )?;
    let rows = stmt.query_map(rusqlite::params![repo, limit], |r| {
        Ok(Pending {
            repo: r.get(0)?,
            id: r.get(1)?,
            revision: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// The recorded export of one issue.
pub fn get(conn: &Connection, repo: &str, id: &str) -> rusqlite::Result<Option<Exported>> {
    conn.prepare_cached(
        "SELECT revision, tip, state FROM issue_exports WHERE repo = ?1 AND issue_id = ?2",
    )?
    .query_row([repo, id], |r| {
        Ok(Exported {
            revision: r.get(0)?,
            tip: r.get(1)?,
            state: r.get(2)?,
        })
    })
    .optional()
}

/// Record that the export of `id` reflects `revision`; never moves back.
pub fn record(
    conn: &Connection,
    repo: &str,
    id: &str,
    exported: &Exported,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO issue_exports (repo, issue_id, revision, tip, state)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (repo, issue_id) DO UPDATE
         SET revision = excluded.revision, tip = excluded.tip, state = excluded.state
         WHERE excluded.revision >= issue_exports.revision",
    )?
    .execute(rusqlite::params![
        repo,
        id,
        exported.revision,
        exported.tip,
        exported.state
    ])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::issues::{self, NewIssue, Person, WriteCtx};

    #[test]
    fn pending_follows_revisions_and_records_never_move_back() {
        let conn = Connection::open_in_memory().unwrap();
        crate::db::migrations::migrate(&conn).unwrap();
        let me = Person {
            principal: "p".into(),
            name: "p".into(),
            key: None,
        };
        let w = WriteCtx {
            repo: "r.git",
            actor: &me,
            fence: None,
            max_body: 1000,
            now: 1,
        };
        let id = issues::open(
            &conn,
            &w,
            &NewIssue {
                title: "t".into(),
                ..Default::default()
            },
        )
        .unwrap()
        .issue;
        let p = pending(&conn, None, 10).unwrap();
        assert_eq!(
            p,
            [Pending {
                repo: "r.git".into(),
                id: id.clone(),
                revision: 1
            }]
        );
        let at = |revision| Exported {
            revision,
            tip: format!("tip{revision}"),
            state: "{}".into(),
        };
        record(&conn, "r.git", &id, &at(1)).unwrap();
        assert!(pending(&conn, Some("r.git"), 10).unwrap().is_empty());
        issues::comment(&conn, &w, &id, "c").unwrap();
        assert_eq!(pending(&conn, Some("r.git"), 10).unwrap()[0].revision, 2);
        assert!(pending(&conn, Some("other.git"), 10).unwrap().is_empty());
        record(&conn, "r.git", &id, &at(2)).unwrap();
        record(&conn, "r.git", &id, &at(1)).unwrap();
        assert_eq!(get(&conn, "r.git", &id).unwrap().unwrap().tip, "tip2");
    }
}
