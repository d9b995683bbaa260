//! How far the signed git export of each issue (`issue_exports`) and each
//! patch (`patch_exports`) has got:
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

// ---------------------------------------------------------------- patches

/// Patches of `repo` (every repository when `None`) whose export is behind
/// their `version`, at most `limit`: `(repo, id, version)` as [`Pending`]
/// (`revision` is the patch's version).
pub fn pending_patches(
    conn: &Connection,
    repo: Option<&str>,
    limit: i64,
) -> rusqlite::Result<Vec<Pending>> {
    let mut stmt = conn.prepare_cached(
        "SELECT p.repo, p.id, p.version FROM patches p
         LEFT JOIN patch_exports e ON e.repo = p.repo AND e.patch_id = p.id
         WHERE (?1 IS NULL OR p.repo = ?1) AND (e.version IS NULL OR e.version < p.version)
         ORDER BY p.repo, p.id LIMIT ?2",
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

/// The recorded export of one patch (`revision` is the patch version).
pub fn get_patch(conn: &Connection, repo: &str, id: &str) -> rusqlite::Result<Option<Exported>> {
    conn.prepare_cached(
        "SELECT version, tip, state FROM patch_exports WHERE repo = ?1 AND patch_id = ?2",
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

/// Record that the export of patch `id` reflects its version
/// `exported.revision`; never moves back.
pub fn record_patch(
    conn: &Connection,
    repo: &str,
    id: &str,
    exported: &Exported,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO patch_exports (repo, patch_id, version, tip, state)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (repo, patch_id) DO UPDATE
         SET version = excluded.version, tip = excluded.tip, state = excluded.state
         WHERE excluded.version >= patch_exports.version",
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

/// The repositories with patch events in the log after `after`, up to and
/// including `upto`: whose patch exports may be behind.
pub fn repos_with_patch_events(
    conn: &Connection,
    after: i64,
    upto: i64,
) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT DISTINCT repo FROM events
         WHERE seq > ?1 AND seq <= ?2 AND type LIKE 'patch.%' AND repo IS NOT NULL",
    )?;
    let rows = stmt.query_map([after, upto], |r| r.get(0))?;
    rows.collect()
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
