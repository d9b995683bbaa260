//! How far the signed git export of each issue (`issue_exports`) and each
//! patch (`patch_exports`) has got:
//! the issue revision it reflects, the export ref's tip, and a summary of
//! the state it shows, so the exporter appends only what changed without
//! replaying the export. Plain functions over a connection, like the rest
//! of `db`.

use crate::sql::{Connection, OptionalExtension};

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
    /// JSON summary (see the server's `objects::export`).
    pub state: String,
}

/// What is exported: issues (their `revision`) or patches (their
/// `version`), each with its own table of export records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Issue,
    Patch,
}

impl Kind {
    /// `(source table, its counter, export table, id column, counter column)`.
    fn names(
        self,
    ) -> (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ) {
        match self {
            Kind::Issue => (
                "issues",
                "revision",
                "issue_exports",
                "issue_id",
                "revision",
            ),
            Kind::Patch => ("patches", "version", "patch_exports", "patch_id", "version"),
        }
    }
}

/// Issues or patches of `repo` (every repository when `None`) whose export
/// is behind their counter (an issue's revision, a patch's version), at
/// most `limit`; `Pending::revision` is that counter.
pub fn pending(
    conn: &Connection,
    kind: Kind,
    repo: Option<&str>,
    limit: i64,
) -> crate::sql::Result<Vec<Pending>> {
    let (source, counter, exports, id_col, exported) = kind.names();
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT s.repo, s.id, s.{counter} FROM {source} s
         LEFT JOIN {exports} e ON e.repo = s.repo AND e.{id_col} = s.id
         WHERE (CAST(?1 AS TEXT) IS NULL OR s.repo = ?1) AND (e.{exported} IS NULL OR e.{exported} < s.{counter})
         ORDER BY s.repo, s.id LIMIT ?2"
    ))?;
    let rows = stmt.query_map(crate::sql::params![repo, limit], |r| {
        Ok(Pending {
            repo: r.get(0)?,
            id: r.get(1)?,
            revision: r.get(2)?,
        })
    })?;
    rows.collect()
}

/// How many issues or patches of `repo` have an export behind their
/// counter: 0 once the export shows every write (a client that just wrote
/// waits for it before fetching the export).
pub fn pending_count(conn: &Connection, kind: Kind, repo: &str) -> crate::sql::Result<i64> {
    let (source, counter, exports, id_col, exported) = kind.names();
    conn.prepare_cached(&format!(
        "SELECT COUNT(*) FROM {source} s
         LEFT JOIN {exports} e ON e.repo = s.repo AND e.{id_col} = s.id
         WHERE s.repo = ?1 AND (e.{exported} IS NULL OR e.{exported} < s.{counter})"
    ))?
    .query_row([repo], |r| r.get(0))
}

/// The recorded export of one issue or patch.
pub fn get(
    conn: &Connection,
    kind: Kind,
    repo: &str,
    id: &str,
) -> crate::sql::Result<Option<Exported>> {
    let (_, _, exports, id_col, exported) = kind.names();
    conn.prepare_cached(&format!(
        "SELECT {exported}, tip, state FROM {exports} WHERE repo = ?1 AND {id_col} = ?2"
    ))?
    .query_row([repo, id], |r| {
        Ok(Exported {
            revision: r.get(0)?,
            tip: r.get(1)?,
            state: r.get(2)?,
        })
    })
    .optional()
}

/// Record that the export of `id` reflects its counter `exported.revision`;
/// never moves back.
pub fn record(
    conn: &Connection,
    kind: Kind,
    repo: &str,
    id: &str,
    exported: &Exported,
) -> crate::sql::Result<()> {
    let (_, _, exports, id_col, counter) = kind.names();
    conn.prepare_cached(&format!(
        "INSERT INTO {exports} (repo, {id_col}, {counter}, tip, state)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (repo, {id_col}) DO UPDATE
         SET {counter} = excluded.{counter}, tip = excluded.tip, state = excluded.state
         WHERE excluded.{counter} >= {exports}.{counter}"
    ))?
    .execute(crate::sql::params![
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
) -> crate::sql::Result<Vec<String>> {
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
    use crate::issues::{self, NewIssue, Person, WriteCtx};

    #[test]
    fn pending_follows_revisions_and_records_never_move_back() {
        let conn = crate::testing::db();
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
        let p = pending(&conn, Kind::Issue, None, 10).unwrap();
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
        record(&conn, Kind::Issue, "r.git", &id, &at(1)).unwrap();
        assert!(pending(&conn, Kind::Issue, Some("r.git"), 10)
            .unwrap()
            .is_empty());
        issues::comment(&conn, &w, &id, "c").unwrap();
        assert_eq!(
            pending(&conn, Kind::Issue, Some("r.git"), 10).unwrap()[0].revision,
            2
        );
        assert!(pending(&conn, Kind::Issue, Some("other.git"), 10)
            .unwrap()
            .is_empty());
        record(&conn, Kind::Issue, "r.git", &id, &at(2)).unwrap();
        record(&conn, Kind::Issue, "r.git", &id, &at(1)).unwrap();
        assert_eq!(
            get(&conn, Kind::Issue, "r.git", &id).unwrap().unwrap().tip,
            "tip2"
        );
    }
}
