//! What issues (`issues`) and patches (`patches`) share in the database:
//! people, ids and their resolution by prefix, the bookkeeping every write
//! does (the counter the export follows, the comment position, the event
//! appended in the same transaction) and keyset paging. Each kind's module
//! keeps its own rows, rules, errors and events; this one only knows a
//! kind by its [`Table`].
//!
//! Not here, because the two kinds do not share them: labels and
//! issue-to-issue links (`issue_labels`, `issue_links`) are issues' alone,
//! and a patch's links (`patch_issues`) point at issues, not at patches;
//! leases, and so the fence of a write, are issues' alone; comments share
//! their position counter and their columns up to `body`, but a patch
//! comment's revision and inline place make its row and its event
//! different.

use serde::Serialize;
use serde_json::json;

use crate::event_log::{self, NewEvent};
use crate::sql::{Connection, Row, Value};

/// Most candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 20;

/// Who wrote something: the principal (a governed name, else the key's
/// `SHA256:` fingerprint), a display name, and the OpenSSH key line where
/// it is known.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Person {
    pub principal: String,
    pub name: String,
    pub key: Option<String>,
}

/// The person in columns `i` (principal), `i + 1` (name) and `i + 2` (key)
/// of a row.
pub(crate) fn person_at(r: &Row<'_>, i: usize) -> crate::sql::Result<Person> {
    Ok(Person {
        principal: r.get(i)?,
        name: r.get(i + 1)?,
        key: r.get(i + 2)?,
    })
}

/// A person as events carry it.
pub(crate) fn person_json(p: &Person) -> serde_json::Value {
    json!({ "principal": p.principal, "name": p.name, "key": p.key })
}

/// A new random 160-bit id, as 40 lowercase hex digits.
pub fn new_id() -> String {
    hex::encode(rand::random::<[u8; 20]>())
}

/// Unix seconds to the milliseconds rows keep.
pub(crate) fn ms(now: i64) -> i64 {
    now.saturating_mul(1000)
}

/// An id as messages show it: its first 8 digits.
pub(crate) fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// A kind of object, as the shared SQL names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Table {
    /// The table of the objects (`issues`, `patches`).
    pub name: &'static str,
    /// The column every write bumps and the export follows (an issue's
    /// `revision`, a patch's `version`).
    pub counter: &'static str,
}

pub(crate) const ISSUES: Table = Table {
    name: "issues",
    counter: "revision",
};

pub(crate) const PATCHES: Table = Table {
    name: "patches",
    counter: "version",
};

// ---------------------------------------------------------------- resolving

/// Why an id or prefix does not name exactly one object; each kind turns
/// it into its own error (and message).
#[derive(Debug)]
pub(crate) enum Unresolved {
    InvalidId(String),
    NotFound(String),
    Ambiguous {
        prefix: String,
        candidates: Vec<String>,
    },
    Sql(crate::sql::Error),
}

impl From<crate::sql::Error> for Unresolved {
    fn from(e: crate::sql::Error) -> Self {
        Unresolved::Sql(e)
    }
}

/// `From<Unresolved>` for a kind's error, whose variants `InvalidId`,
/// `NotFound`, `Ambiguous` and `Sql` say it in that kind's words.
macro_rules! from_unresolved {
    ($error:ident) => {
        impl From<$crate::objects::Unresolved> for $error {
            fn from(e: $crate::objects::Unresolved) -> Self {
                use $crate::objects::Unresolved;
                match e {
                    Unresolved::InvalidId(id) => $error::InvalidId(id),
                    Unresolved::NotFound(id) => $error::NotFound(id),
                    Unresolved::Ambiguous { prefix, candidates } => {
                        $error::Ambiguous { prefix, candidates }
                    }
                    Unresolved::Sql(e) => $error::Sql(e),
                }
            }
        }
    };
}
pub(crate) use from_unresolved;

/// A full 40-hex id or a unique prefix of 4+ hex digits (any case) to the
/// full id of an object of `table` in `repo`.
pub(crate) fn resolve(
    conn: &Connection,
    table: Table,
    repo: &str,
    id_or_prefix: &str,
) -> Result<String, Unresolved> {
    let prefix = id_or_prefix.trim().to_ascii_lowercase();
    if prefix.len() < 4 || prefix.len() > 40 || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Unresolved::InvalidId(id_or_prefix.to_string()));
    }
    // Every id starting with `prefix` sorts in [prefix, prefix + "g"): hex
    // digits are all below 'g'. A range scan on the primary key, portable.
    let upper = format!("{prefix}g");
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM {} WHERE repo = ?1 AND id >= ?2 AND id < ?3 ORDER BY id LIMIT ?4",
        table.name
    ))?;
    let ids: Vec<String> = stmt
        .query_map(
            crate::sql::params![repo, prefix, upper, MAX_CANDIDATES as i64 + 1],
            |r| r.get(0),
        )?
        .collect::<crate::sql::Result<_>>()?;
    match ids.len() {
        0 => Err(Unresolved::NotFound(id_or_prefix.to_string())),
        1 => Ok(ids.into_iter().next().expect("one id")),
        _ => Err(Unresolved::Ambiguous {
            prefix: id_or_prefix.to_string(),
            candidates: ids,
        }),
    }
}

// ---------------------------------------------------------------- writes

/// Append the event of a write on object `id` of `repo`, by `actor` (none:
/// the server, as when it imports), in the caller's transaction; returns
/// its `seq`.
pub(crate) fn append_event(
    conn: &Connection,
    kind: &str,
    repo: &str,
    id: &str,
    actor: Option<&Person>,
    payload: serde_json::Value,
    now: i64,
) -> crate::sql::Result<i64> {
    let event = NewEvent {
        kind,
        repo: Some(repo),
        object_id: Some(id),
        actor: actor.map(|a| a.principal.as_str()),
        payload,
    };
    event_log::append(conn, &event, now)
}

/// Record a write on object `id`: its update time (never earlier than
/// `updated_ms`, what it was) and a new counter value (the export follows
/// it).
pub(crate) fn touch(
    conn: &Connection,
    table: Table,
    repo: &str,
    id: &str,
    updated_ms: i64,
    now: i64,
) -> crate::sql::Result<()> {
    let Table { name, counter } = table;
    conn.prepare_cached(&format!(
        "UPDATE {name} SET updated_ms = ?3, {counter} = {counter} + 1 WHERE repo = ?1 AND id = ?2"
    ))?
    .execute(crate::sql::params![repo, id, updated_ms.max(ms(now))])?;
    Ok(())
}

/// `touch` for a new comment: also counts it, and returns its position
/// (1 for the first).
pub(crate) fn touch_for_comment(
    conn: &Connection,
    table: Table,
    repo: &str,
    id: &str,
    updated_ms: i64,
    now: i64,
) -> crate::sql::Result<i64> {
    let Table { name, counter } = table;
    conn.prepare_cached(&format!(
        "UPDATE {name} SET comment_count = comment_count + 1, updated_ms = ?3,
                           {counter} = {counter} + 1
         WHERE repo = ?1 AND id = ?2 RETURNING comment_count"
    ))?
    .query_row(
        crate::sql::params![repo, id, updated_ms.max(ms(now))],
        |r| r.get(0),
    )
}

// ---------------------------------------------------------------- paging

/// A list's `WHERE` clause as it is built: `alias.` before every column
/// (`""` for none), and the parameters of its `?`s.
pub(crate) struct Filter<'a> {
    pub sql: String,
    pub params: Vec<Value>,
    alias: &'a str,
}

impl<'a> Filter<'a> {
    /// `SELECT {what} FROM {table} {alias} WHERE {alias}.repo = ?`.
    pub fn new(what: &str, table: Table, alias: &'a str, repo: &str) -> Filter<'a> {
        let (space, dot) = if alias.is_empty() {
            ("", "")
        } else {
            (" ", ".")
        };
        Filter {
            sql: format!(
                "SELECT {what} FROM {}{space}{alias} WHERE {alias}{dot}repo = ?",
                table.name
            ),
            params: vec![repo.to_string().into()],
            alias,
        }
    }

    fn col(&self, name: &str) -> String {
        if self.alias.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.alias)
        }
    }

    /// Only objects with this status (`None`: any).
    pub fn status(&mut self, status: Option<&str>) {
        if let Some(status) = status {
            let col = self.col("status");
            self.sql.push_str(&format!(" AND {col} = '{status}'"));
        }
    }

    /// Only objects after `(created_ms, id)` in list order: newest first,
    /// ties by id (a keyset page on the `(repo, created_ms, id)` order).
    pub fn after(&mut self, created_ms: i64, id: &str) {
        let (at, key) = (self.col("created_ms"), self.col("id"));
        self.sql
            .push_str(&format!(" AND ({at} < ? OR ({at} = ? AND {key} > ?))"));
        self.params.push(created_ms.into());
        self.params.push(created_ms.into());
        self.params.push(id.to_string().into());
    }

    /// Order newest first, ties by id, and fetch `limit` objects and one
    /// more (whether there is a next page), skipping `offset` (when not 0).
    pub fn page(&mut self, limit: usize, offset: Option<usize>) {
        let (at, key) = (self.col("created_ms"), self.col("id"));
        self.sql
            .push_str(&format!(" ORDER BY {at} DESC, {key} LIMIT ?"));
        self.params.push((limit as i64 + 1).into());
        if let Some(offset) = offset {
            self.sql.push_str(" OFFSET ?");
            self.params.push((offset as i64).into());
        }
    }
}

/// Cut a page fetched by [`Filter::page`] to `limit`: whether there is a
/// next page.
pub(crate) fn cut_page<T>(rows: &mut Vec<T>, limit: usize) -> bool {
    let more = rows.len() > limit;
    rows.truncate(limit);
    more
}
