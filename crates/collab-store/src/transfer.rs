//! `git-collab-server db migrate --to postgres://…`: copy the SQLite collab
//! database into an empty PostgreSQL one, for an operator moving a server
//! (or growing it into several nodes) onto PostgreSQL.
//!
//! The copy is all or nothing: every row goes in inside one PostgreSQL
//! transaction under the write lock, the target is counted inside that same
//! transaction (rows per table, the `counters`, and the fencing tokens'
//! high-water marks: pairs, max and sum of `lease_tokens.last_token`) and
//! compared with the source, and only an exact match commits. A target that
//! already holds collab rows is refused before anything is written, so a
//! second run never merges two histories. The source is read in one read
//! transaction (a consistent snapshot); the server should be stopped first,
//! since what it writes after that snapshot would not be copied.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context as _};

use super::snapshot::{census, table_names, Census};
use super::sql::{params_from_iter, Behavior, Connection, Transaction, Value};

/// Tables whose rows others refer to go first (foreign keys are checked at
/// COMMIT anyway); tables not named here follow in name order.
const PARENTS_FIRST: &[&str] = &["issues", "patches"];

/// What was copied.
#[derive(Debug, serde::Serialize)]
pub struct Transferred {
    pub tables: BTreeMap<String, i64>,
    pub counters: BTreeMap<String, i64>,
    pub token_pairs: i64,
    pub token_max: i64,
    pub token_sum: i64,
}

/// Copy the SQLite database at `source` into the PostgreSQL database at
/// `target_url` (created tables, or an empty collab schema).
pub fn sqlite_to_postgres(source: &Path, target_url: &str) -> anyhow::Result<Transferred> {
    if !source.exists() {
        bail!("{} does not exist: nothing to migrate", source.display());
    }
    // Bring the source to this binary's schema first, as a start would.
    let src =
        super::connect::open(source).with_context(|| format!("opening {}", source.display()))?;
    src.begin_read()?;
    let before = census(&src).context("counting the source")?;

    let dst = Connection::open_postgres(target_url).context("connecting to the target")?;
    super::migrations::migrate(&dst).context("creating the schema in the target")?;
    let tx = Transaction::new_unchecked(&dst, Behavior::Exclusive)?;
    refuse_non_empty(&tx)?;
    tx.execute_batch("SET CONSTRAINTS ALL DEFERRED")?;

    let mut tables = table_names(&src)?;
    tables.sort_by_key(|t| (!PARENTS_FIRST.contains(&t.as_str()), t.clone()));
    let raw = src.as_sqlite().expect("the source is SQLite");
    for table in &tables {
        copy_table(raw, &tx, table).with_context(|| format!("copying table {table}"))?;
    }
    // The attempt log's ids were copied as they were: the identity goes on
    // after the highest.
    tx.execute_batch(
        "SELECT setval(pg_get_serial_sequence('webhook_attempts', 'id'),
                       COALESCE((SELECT MAX(id) FROM webhook_attempts), 0) + 1, false)",
    )?;

    let after = census(&tx).context("counting the target")?;
    compare(&before, &after)?;
    tx.commit().context("committing the copy")?;
    src.end_read()?;
    let tokens = after.tokens.unwrap_or_default();
    Ok(Transferred {
        tables: after.tables,
        counters: after.counters,
        token_pairs: tokens.pairs,
        token_max: tokens.max,
        token_sum: tokens.sum,
    })
}

/// Refuse a target that holds any collab row (an empty `counters` table
/// holds its zero rows from the schema).
fn refuse_non_empty(tx: &Connection) -> anyhow::Result<()> {
    let found = census(tx)?;
    if let Some((table, rows)) = found
        .tables
        .iter()
        .find(|(table, rows)| table.as_str() != "counters" && **rows > 0)
    {
        bail!("the target is not empty ({table} has {rows} rows): migrate into a new database");
    }
    if let Some((name, value)) = found.counters.iter().find(|(_, v)| **v != 0) {
        bail!(
            "the target is not empty (counter {name} is at {value}): migrate into a new database"
        );
    }
    Ok(())
}

/// Copy every row of `table`, columns by name.
fn copy_table(src: &rusqlite::Connection, dst: &Connection, table: &str) -> anyhow::Result<()> {
    let quoted = quote(table);
    let mut select = src.prepare(&format!("SELECT * FROM {quoted}"))?;
    let columns: Vec<String> = select.column_names().map(str::to_string).collect();
    let list = columns
        .iter()
        .map(|c| quote(c))
        .collect::<Vec<_>>()
        .join(", ");
    let marks = (1..=columns.len())
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    // `counters` rows exist in a new schema (at zero): they take the
    // source's values.
    let insert = if table == "counters" {
        format!(
            "INSERT INTO {quoted} ({list}) VALUES ({marks}) \
             ON CONFLICT (name) DO UPDATE SET value = excluded.value"
        )
    } else {
        format!("INSERT INTO {quoted} ({list}) VALUES ({marks})")
    };
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let values = (0..columns.len())
            .map(|i| Ok(value(row.get_ref(i)?)))
            .collect::<rusqlite::Result<Vec<Value>>>()?;
        dst.prepare_cached(&insert)?
            .execute(params_from_iter(values))?;
    }
    Ok(())
}

fn value(v: rusqlite::types::ValueRef<'_>) -> Value {
    use rusqlite::types::ValueRef as V;
    match v {
        V::Null => Value::Null,
        V::Integer(i) => Value::Integer(i),
        V::Real(r) => Value::Real(r),
        V::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
        V::Blob(b) => Value::Blob(b.to_vec()),
    }
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The target must hold exactly what the source held.
fn compare(before: &Census, after: &Census) -> anyhow::Result<()> {
    for (table, rows) in &before.tables {
        let copied = after.tables.get(table).copied();
        if copied != Some(*rows) {
            bail!(
                "table {table}: {rows} rows in the source, {} in the target; nothing was committed",
                copied.map_or("no table".to_string(), |n| n.to_string())
            );
        }
    }
    if before.counters != after.counters {
        bail!(
            "counters differ (source {:?}, target {:?}); nothing was committed",
            before.counters,
            after.counters
        );
    }
    if before.tokens != after.tokens {
        bail!(
            "fencing token high-water marks differ (source {:?}, target {:?}); nothing was committed",
            before.tokens,
            after.tokens
        );
    }
    Ok(())
}
