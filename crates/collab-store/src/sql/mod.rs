//! The storage interface: one connection type over the two databases the
//! collab state can live in, embedded SQLite (`collab.db`, the default) and
//! PostgreSQL (`collab_db = "postgres://…"`).
//!
//! The domain modules (`leases`, `issues`, `patches`, …) are plain functions
//! over a [`Connection`] and write their SQL once, in the dialect both
//! databases share: `?N` placeholders (rewritten to `$N` for PostgreSQL),
//! `ON CONFLICT … DO …` upserts, `COALESCE`, no SQLite-only functions, and
//! integer columns read as 64-bit integers on both sides (the PostgreSQL
//! schema declares them `BIGINT`). The API mirrors the subset of rusqlite's
//! that the domain code uses, so a function reads the same whichever
//! database it runs on.
//!
//! What differs lives here and in `pg`:
//! - **Transactions.** A write transaction is `BEGIN IMMEDIATE` on SQLite
//!   (the database's one write lock: writes are serial there). On
//!   PostgreSQL every writer on every node first takes the global advisory
//!   key [`pg::WRITE_LOCK`], shared by ordinary writers and exclusive for
//!   whole-database ones ([`Behavior::Exclusive`]); generic writes
//!   ([`Behavior::Immediate`]) also take [`pg::GENERIC_WRITES_LOCK`]
//!   exclusive, which keeps them serial among themselves; the writer's
//!   groups of lease operations and repository writes
//!   ([`Behavior::Concurrent`]) take per-issue and per-repository locks
//!   instead ([`Connection::lock_issue`], [`Connection::lock_repository`]:
//!   the latter with the generic writes' key shared), and events get their final `seq` at
//!   COMMIT (`event_log::append`). docs/postgres.md argues each guarantee.
//!   A read transaction ([`Connection::begin_read`]) is a
//!   WAL snapshot on SQLite and `REPEATABLE READ READ ONLY` on PostgreSQL:
//!   one consistent view, never waiting for a writer.
//! - **Errors inside a transaction.** PostgreSQL aborts the whole
//!   transaction on any error; code that carries on after a failed statement
//!   must do it under a `SAVEPOINT` (the writer runs every operation in one).

mod error;
mod pg;
pub mod tls;
mod types;
mod value;

use std::path::{Path, PathBuf};

pub use error::{Error, OptionalExtension, Result};
pub use pg::LEASE_STATEMENTS_ENV;
pub use types::{Behavior, LeaseCall, TransactionBehavior};
pub use value::{FromSql, ToSql, Value, ValueRef};

/// `rusqlite::params!` for this interface: a slice of parameters.
#[macro_export]
macro_rules! sql_params {
    () => {
        &[] as &[&dyn $crate::sql::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::sql::ToSql),+] as &[&dyn $crate::sql::ToSql]
    };
}
pub use crate::sql_params as params;

/// Whether a PostgreSQL SQLSTATE means "busy": another transaction holds
/// what the statement needed (`lock_timeout`, a deadlock, a serialization
/// failure), as [`Error::is_busy`] says of such an error.
pub fn is_busy_state(state: &str) -> bool {
    error::is_busy_code(state)
}

/// Where the collab database lives: the `collab_db` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A SQLite file (the embedded default).
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://…`). May hold a password:
    /// print it with [`Location::display`].
    Postgres(String),
}

impl Location {
    /// Read a `collab_db` value: a `postgres://` or `postgresql://` URL, a
    /// `sqlite:` path, or a plain path.
    pub fn parse(value: &str) -> Location {
        if value.starts_with("postgres://") || value.starts_with("postgresql://") {
            Location::Postgres(value.to_string())
        } else if let Some(path) = value.strip_prefix("sqlite:") {
            Location::Sqlite(PathBuf::from(path.strip_prefix("//").unwrap_or(path)))
        } else {
            Location::Sqlite(PathBuf::from(value))
        }
    }

    /// The SQLite file, if that is where the database is.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match self {
            Location::Sqlite(path) => Some(path),
            Location::Postgres(_) => None,
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Location::Postgres(_))
    }

    /// The location for messages and `config show`: a URL's password is
    /// replaced by `***`.
    pub fn display(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => pg::redact(url),
        }
    }

    /// The string form the hooks' environment carries (`parse` reads it back).
    pub fn to_setting(&self) -> String {
        match self {
            Location::Sqlite(path) => path.display().to_string(),
            Location::Postgres(url) => url.clone(),
        }
    }
}

impl From<&str> for Location {
    fn from(value: &str) -> Location {
        Location::parse(value)
    }
}

impl From<&Path> for Location {
    fn from(path: &Path) -> Location {
        Location::Sqlite(path.to_path_buf())
    }
}

impl From<&PathBuf> for Location {
    fn from(path: &PathBuf) -> Location {
        Location::Sqlite(path.clone())
    }
}

impl From<&Location> for Location {
    fn from(location: &Location) -> Location {
        location.clone()
    }
}

impl From<PathBuf> for Location {
    fn from(path: PathBuf) -> Location {
        Location::Sqlite(path)
    }
}

/// A plain client on the PostgreSQL database at `url`, connected as the
/// store connects (TLS as the URL's `sslmode` says, several hosts tried in
/// order, a connect timeout): for what the storage interface does not
/// offer, such as a `LISTEN` loop.
pub fn connect_client(url: &str) -> Result<postgres::Client> {
    pg::connect(url)
}

/// One connection to the collab database.
pub enum Connection {
    Sqlite(rusqlite::Connection),
    Postgres(Box<pg::PgConnection>),
}

/// Prepared statements a SQLite connection keeps (`prepare_cached`), as
/// many as a PostgreSQL connection's cache (`pg::MAX_CACHED`): rusqlite's
/// default of 16 is below the domain code's statement shapes, so the
/// writer and the read pool's connections parsed and planned a statement
/// again whenever 16 others had run since (docs/benchmarks.md, "server CPU
/// per issue").
const SQLITE_CACHED_STATEMENTS: usize = 512;

impl From<rusqlite::Connection> for Connection {
    fn from(conn: rusqlite::Connection) -> Connection {
        conn.set_prepared_statement_cache_capacity(SQLITE_CACHED_STATEMENTS);
        Connection::Sqlite(conn)
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Sqlite(_) => "Connection(sqlite)",
            Connection::Postgres(_) => "Connection(postgres)",
        })
    }
}

impl Connection {
    /// A SQLite file as it is, without the settings or the schema
    /// `db::open` gives it (tests that look at a file).
    pub fn open(path: impl AsRef<Path>) -> Result<Connection> {
        Ok(rusqlite::Connection::open(path)?.into())
    }

    /// A fresh in-memory SQLite database (unit tests).
    pub fn open_in_memory() -> Result<Connection> {
        Ok(rusqlite::Connection::open_in_memory()?.into())
    }

    /// A connection to the PostgreSQL database at `url`.
    pub fn open_postgres(url: &str) -> Result<Connection> {
        Ok(Connection::Postgres(Box::new(pg::PgConnection::connect(
            url,
        )?)))
    }

    /// The SQLite connection underneath, for what only SQLite has (pragmas,
    /// the online backup).
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Connection::Sqlite(c) => Some(c),
            Connection::Postgres(_) => None,
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Connection::Postgres(_))
    }

    /// Run `sql` (one or more statements, no parameters, no rows).
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match self {
            Connection::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Connection::Postgres(c) => c.batch(sql),
        }
    }

    /// Run one statement; the number of rows it changed.
    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    /// The first row of `sql`, mapped by `f`; `QueryReturnedNoRows` if none.
    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// A statement, kept in the connection's cache for the next call.
    pub fn prepare_cached(&self, sql: &str) -> Result<Statement<'_>> {
        match self {
            Connection::Sqlite(c) => Ok(Statement::Sqlite(c.prepare_cached(sql)?)),
            Connection::Postgres(c) => Ok(Statement::Postgres(c.prepare(sql)?)),
        }
    }

    /// A statement (PostgreSQL caches it too; SQLite does not).
    pub fn prepare(&self, sql: &str) -> Result<Statement<'_>> {
        self.prepare_cached(sql)
    }

    /// Begin a transaction on this connection; it rolls back on drop unless
    /// committed.
    pub fn transaction_with_behavior(&self, behavior: Behavior) -> Result<Transaction<'_>> {
        Transaction::new_unchecked(self, behavior)
    }

    /// rusqlite's name for a deferred transaction begun through `&self`.
    pub fn unchecked_transaction(&self) -> Result<Transaction<'_>> {
        Transaction::new_unchecked(self, Behavior::Deferred)
    }

    pub fn transaction(&self) -> Result<Transaction<'_>> {
        Transaction::new_unchecked(self, Behavior::Deferred)
    }

    /// Begin a read transaction: one consistent snapshot for several
    /// statements, never waiting for writers. End it with `end_read`.
    pub fn begin_read(&self) -> Result<()> {
        match self {
            Connection::Sqlite(c) => Ok(c.execute_batch("BEGIN")?),
            Connection::Postgres(c) => c.begin_read(),
        }
    }

    /// End a read transaction begun by `begin_read`.
    pub fn end_read(&self) -> Result<()> {
        match self {
            Connection::Sqlite(c) => Ok(c.execute_batch("ROLLBACK")?),
            Connection::Postgres(c) => c.end("ROLLBACK"),
        }
    }

    /// Tell PostgreSQL listeners on `channel` (an SQL identifier) when the
    /// open transaction commits, once however often asked; SQLite has no
    /// listeners, so there it does nothing.
    pub fn notify(&self, channel: &'static str) -> Result<()> {
        match self {
            Connection::Sqlite(_) => Ok(()),
            Connection::Postgres(c) => c.notify(channel),
        }
    }

    /// Take the issue's lock for the rest of the open write transaction.
    /// SQLite's one write lock already covers it: always `true`. On
    /// PostgreSQL a transaction-scoped advisory lock keyed by
    /// `hashtextextended(length(repo) || ':' || repo || issue_id, 0)`, tried in a
    /// [`Behavior::Concurrent`] transaction (`false`: another transaction
    /// is deciding this issue) and waited for in any other.
    pub fn lock_issue(&self, repo: &str, issue_id: &str) -> Result<bool> {
        match self {
            Connection::Sqlite(_) => Ok(true),
            Connection::Postgres(c) => c.lock_issue(repo, issue_id),
        }
    }

    /// [`Self::lock_issue`], only tried in every kind of transaction
    /// (`false`: another transaction is deciding the issue): the work
    /// queue's `next` passes over such a candidate, and never waits.
    pub fn try_lock_issue(&self, repo: &str, issue_id: &str) -> Result<bool> {
        match self {
            Connection::Sqlite(_) => Ok(true),
            Connection::Postgres(c) => c.try_lock_issue(repo, issue_id),
        }
    }

    /// Take the repository's lock for the rest of the open write
    /// transaction, before a repository write (`Writer::write_in`, a hook's
    /// record of a push) reads or writes anything of it. SQLite's one
    /// write lock already covers it: always `true`. On PostgreSQL the
    /// generic writes' key shared and the repository's own key
    /// (`hashtextextended('repository:' || repo, 0)`), both tried in a
    /// [`Behavior::Concurrent`] transaction (`false`: a write of this
    /// repository, or one of several repositories, is running elsewhere),
    /// the repository's key waited for in a [`Behavior::Repository`] one;
    /// nothing to take in an [`Behavior::Immediate`] or
    /// [`Behavior::Exclusive`] one, whose key excludes every holder.
    pub fn lock_repository(&self, repo: &str) -> Result<bool> {
        match self {
            Connection::Sqlite(_) => Ok(true),
            Connection::Postgres(c) => c.lock_repository(repo),
        }
    }

    /// PostgreSQL, in a lease group: the next operation's savepoint and its
    /// issue's lock in one round trip (`PgConnection::savepoint_locking`).
    /// `false` on SQLite, where the caller opens the savepoint itself.
    /// The open transaction holds `repo`'s lock already (an earlier
    /// repository write of the writer's group took it): the next
    /// `lock_repository` of it answers without a round trip.
    pub fn holds_repository(&self, repo: &str) {
        if let Connection::Postgres(c) = self {
            c.holds_repository(repo);
        }
    }

    /// PostgreSQL, in a group: the next repository write's savepoint and
    /// its repository's lock in one round trip, tried, or waited for when
    /// `wait` (`PgConnection::savepoint_locking_repository`). `false` on
    /// SQLite, where the caller opens the savepoint itself.
    pub fn savepoint_locking_repository(
        &self,
        release_first: bool,
        repo: &str,
        wait: bool,
    ) -> Result<bool> {
        match self {
            Connection::Sqlite(_) => Ok(false),
            Connection::Postgres(c) => c
                .savepoint_locking_repository(release_first, repo, wait)
                .map(|()| true),
        }
    }

    pub fn savepoint_locking(
        &self,
        release_first: bool,
        repo: &str,
        issue_id: &str,
    ) -> Result<bool> {
        match self {
            Connection::Sqlite(_) => Ok(false),
            Connection::Postgres(c) => c
                .savepoint_locking(release_first, repo, issue_id)
                .map(|()| true),
        }
    }

    /// Whether lease operations run as one call of their PostgreSQL
    /// function (version 16: `collab_lease_acquire`, …). Never on SQLite;
    /// on PostgreSQL unless `GIT_COLLAB_PG_LEASE_STATEMENTS=1` was set when
    /// the connection was made, or [`Connection::set_lease_statements`].
    pub fn lease_functions(&self) -> bool {
        match self {
            Connection::Sqlite(_) => false,
            Connection::Postgres(c) => !c.lease_statements(),
        }
    }

    /// PostgreSQL: run lease operations statement by statement (`true`) or
    /// as one function call each (`false`, the default), to compare the two.
    pub fn set_lease_statements(&self, on: bool) {
        if let Connection::Postgres(c) = self {
            c.set_lease_statements(on);
        }
    }

    /// PostgreSQL, in a transaction: open the savepoint `lease_op` of the
    /// next operation with that operation's first statement, not in a round
    /// trip of its own (`PgConnection::defer_savepoint`). `false` on
    /// SQLite, where the caller opens it itself.
    pub fn defer_savepoint(&self, release_first: bool) -> bool {
        match self {
            Connection::Sqlite(_) => false,
            Connection::Postgres(c) => {
                c.defer_savepoint(release_first);
                true
            }
        }
    }

    /// PostgreSQL: the first row of `SELECT * FROM function(params…, try)`
    /// in one round trip (with a deferred savepoint), its columns as text;
    /// the connection adds `try`, whether the function only tries the
    /// issue's lock. `Ok(None)`: a parameter cannot be sent so (a NUL in a
    /// text), nothing was sent. On SQLite an error: there are no functions.
    pub fn call_row(&self, function: &str, args: &[Value]) -> Result<Option<Vec<Option<String>>>> {
        match self {
            Connection::Sqlite(_) => Err(Error::failure(format!(
                "{function}: a PostgreSQL function called on SQLite"
            ))),
            Connection::Postgres(c) => {
                let args = args.iter().map(ToSql::to_sql).collect::<Result<Vec<_>>>()?;
                c.call_row(function, &args)
            }
        }
    }

    /// PostgreSQL: lease operations as one call of `collab_lease_group`
    /// (a prepared statement, cached per connection: one round trip, no
    /// parse or plan per call; `PgConnection::call_group`). Each
    /// operation's answer in order, as text columns: outcome, holder,
    /// token, acquired_at, expires_at, renewed_at, note, transitions,
    /// until, events, and the SQLSTATE of an operation that failed (its
    /// work undone by the function, the others' kept). On SQLite an error.
    pub fn call_group(
        &self,
        calls: &[LeaseCall<'_>],
        max_lifetime: Option<i64>,
        lock_delay: i64,
        now: i64,
    ) -> Result<Vec<Vec<Option<String>>>> {
        match self {
            Connection::Sqlite(_) => Err(Error::failure("lease functions called on SQLite")),
            Connection::Postgres(c) => c.call_group(calls, max_lifetime, lock_delay, now),
        }
    }

    /// A provisional event number for an event a PostgreSQL function may
    /// append (`PgConnection::reserve_seq`); say [`Connection::appended_late`]
    /// once one was. `None` on SQLite and outside a transaction.
    pub fn reserve_seq(&self) -> Option<i64> {
        match self {
            Connection::Sqlite(_) => None,
            Connection::Postgres(c) => c.reserve_seq(),
        }
    }

    /// A PostgreSQL function appended events with numbers of
    /// [`Connection::reserve_seq`]: COMMIT renumbers them.
    pub fn appended_late(&self) {
        if let Connection::Postgres(c) = self {
            c.appended_late();
        }
    }

    /// The provisional number of an event appended in the open PostgreSQL
    /// transaction, renumbered at COMMIT (`event_log::append`); `None` on
    /// SQLite and outside a transaction, where the number is final at once.
    pub fn provisional_seq(&self) -> Option<i64> {
        match self {
            Connection::Sqlite(_) => None,
            Connection::Postgres(c) => c.provisional_seq(),
        }
    }

    /// The final `seq` of an event whose append returned `seq` in the last
    /// transaction this connection committed (`seq` itself if it was
    /// final already).
    pub fn final_seq(&self, seq: i64) -> i64 {
        match self {
            Connection::Sqlite(_) => seq,
            Connection::Postgres(c) => c.final_seq(seq),
        }
    }

    /// Every provisional to final event number of the last committed
    /// transaction (empty on SQLite).
    pub fn final_seqs(&self) -> std::collections::HashMap<i64, i64> {
        match self {
            Connection::Sqlite(_) => Default::default(),
            Connection::Postgres(c) => c.final_seqs(),
        }
    }

    /// No transaction is open on this connection.
    pub fn is_autocommit(&self) -> bool {
        match self {
            Connection::Sqlite(c) => c.is_autocommit(),
            Connection::Postgres(c) => !c.in_transaction(),
        }
    }
}

/// An open transaction; derefs to its connection. Dropped without
/// `commit`, it rolls back.
pub struct Transaction<'c> {
    conn: &'c Connection,
    done: bool,
}

impl<'c> Transaction<'c> {
    /// Begin on `conn` (which must not be in a transaction).
    pub fn new_unchecked(conn: &'c Connection, behavior: Behavior) -> Result<Transaction<'c>> {
        match conn {
            Connection::Sqlite(c) => c.execute_batch(match behavior {
                Behavior::Deferred => "BEGIN DEFERRED",
                Behavior::Immediate
                | Behavior::Repository
                | Behavior::Concurrent
                | Behavior::Exclusive => "BEGIN IMMEDIATE",
            })?,
            Connection::Postgres(c) => c.begin(behavior)?,
        }
        Ok(Transaction { conn, done: false })
    }

    pub fn commit(mut self) -> Result<()> {
        self.done = true;
        match self.conn {
            Connection::Sqlite(c) => Ok(c.execute_batch("COMMIT")?),
            Connection::Postgres(c) => c.end("COMMIT"),
        }
    }

    fn rollback_now(&self) -> Result<()> {
        match self.conn {
            Connection::Sqlite(c) if c.is_autocommit() => Ok(()),
            Connection::Sqlite(c) => Ok(c.execute_batch("ROLLBACK")?),
            Connection::Postgres(c) => c.end("ROLLBACK"),
        }
    }
}

impl std::ops::Deref for Transaction<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.rollback_now() {
                tracing::warn!("rolling back a collab database transaction: {e}");
            }
        }
    }
}

/// Parameters of one statement.
pub trait Params {
    fn values(&self) -> Result<Vec<ValueRef<'_>>>;
}

impl Params for &[&dyn ToSql] {
    fn values(&self) -> Result<Vec<ValueRef<'_>>> {
        self.iter().map(|p| p.to_sql()).collect()
    }
}

impl Params for &Vec<&dyn ToSql> {
    fn values(&self) -> Result<Vec<ValueRef<'_>>> {
        self.iter().map(|p| p.to_sql()).collect()
    }
}

impl Params for [&dyn ToSql; 0] {
    fn values(&self) -> Result<Vec<ValueRef<'_>>> {
        Ok(Vec::new())
    }
}

macro_rules! array_params {
    ($($n:literal),*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn values(&self) -> Result<Vec<ValueRef<'_>>> {
                self.iter().map(|p| p.to_sql()).collect()
            }
        }
        impl<T: ToSql> Params for &[T; $n] {
            fn values(&self) -> Result<Vec<ValueRef<'_>>> {
                self.iter().map(|p| p.to_sql()).collect()
            }
        }
    )*};
}
array_params!(1, 2, 3, 4, 5, 6, 7, 8);

/// `rusqlite::params_from_iter`: parameters from an iterator of values.
pub struct ParamsFromIter<T>(Vec<T>);

pub fn params_from_iter<I>(iter: I) -> ParamsFromIter<I::Item>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(iter.into_iter().collect())
}

impl<T: ToSql> Params for ParamsFromIter<T> {
    fn values(&self) -> Result<Vec<ValueRef<'_>>> {
        self.0.iter().map(|p| p.to_sql()).collect()
    }
}

/// Bind our values as rusqlite parameters.
fn sqlite_params<'a>(values: &'a [ValueRef<'a>]) -> impl Iterator<Item = SqliteValue<'a>> + 'a {
    values.iter().map(|v| SqliteValue(*v))
}

struct SqliteValue<'a>(ValueRef<'a>);

impl rusqlite::ToSql for SqliteValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ValueRef as V;
        Ok(rusqlite::types::ToSqlOutput::Borrowed(match self.0 {
            ValueRef::Null => V::Null,
            ValueRef::Integer(v) => V::Integer(v),
            ValueRef::Real(v) => V::Real(v),
            ValueRef::Text(s) => V::Text(s.as_bytes()),
            ValueRef::Blob(b) => V::Blob(b),
        }))
    }
}

fn from_sqlite_ref(v: rusqlite::types::ValueRef<'_>) -> Result<ValueRef<'_>> {
    use rusqlite::types::ValueRef as V;
    Ok(match v {
        V::Null => ValueRef::Null,
        V::Integer(i) => ValueRef::Integer(i),
        V::Real(r) => ValueRef::Real(r),
        V::Text(t) => ValueRef::Text(
            std::str::from_utf8(t).map_err(|e| Error::conversion(format!("text column: {e}")))?,
        ),
        V::Blob(b) => ValueRef::Blob(b),
    })
}

/// A prepared statement.
pub enum Statement<'c> {
    Sqlite(rusqlite::CachedStatement<'c>),
    Postgres(pg::PgStatement<'c>),
}

impl Statement<'_> {
    /// Run it; the number of rows changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        let values = params.values()?;
        match self {
            Statement::Sqlite(s) => {
                Ok(s.execute(rusqlite::params_from_iter(sqlite_params(&values)))?)
            }
            Statement::Postgres(s) => s.execute(&values),
        }
    }

    /// Whether it returns at least one row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        let mut rows = self.query(params)?;
        Ok(rows.next()?.is_some())
    }

    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut rows = self.query(params)?;
        match rows.next()? {
            Some(row) => f(&row),
            None => Err(Error::QueryReturnedNoRows),
        }
    }

    pub fn query<P: Params>(&mut self, params: P) -> Result<Rows<'_>> {
        let values = params.values()?;
        match self {
            Statement::Sqlite(s) => Ok(Rows::Sqlite(
                s.query(rusqlite::params_from_iter(sqlite_params(&values)))?,
            )),
            Statement::Postgres(s) => Ok(Rows::Postgres(s.query(&values)?.into_iter(), None)),
        }
    }

    /// Every row mapped by `f`, lazily.
    pub fn query_map<T, P, F>(&mut self, params: P, f: F) -> Result<MappedRows<'_, F>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        Ok(MappedRows {
            rows: self.query(params)?,
            f,
        })
    }
}

/// Rows of a query.
pub enum Rows<'s> {
    Sqlite(rusqlite::Rows<'s>),
    Postgres(
        std::vec::IntoIter<postgres::Row>,
        Option<Box<postgres::Row>>,
    ),
}

impl Rows<'_> {
    /// The next row, if any.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Row<'_>>> {
        match self {
            Rows::Sqlite(rows) => Ok(rows.next()?.map(Row::Sqlite)),
            Rows::Postgres(rows, current) => {
                *current = rows.next().map(Box::new);
                Ok(current.as_deref().map(Row::Postgres))
            }
        }
    }
}

/// `query_map`'s iterator.
pub struct MappedRows<'s, F> {
    rows: Rows<'s>,
    f: F,
}

impl<T, F> Iterator for MappedRows<'_, F>
where
    F: FnMut(&Row<'_>) -> Result<T>,
{
    type Item = Result<T>;

    fn next(&mut self) -> Option<Result<T>> {
        let f = &mut self.f;
        match self.rows.next() {
            Ok(Some(row)) => Some(f(&row)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}

/// One row.
pub enum Row<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    Postgres(&'r postgres::Row),
}

/// A column, by position or by name.
pub trait RowIndex {
    fn position(&self, row: &Row<'_>) -> Result<usize>;
}

impl RowIndex for usize {
    fn position(&self, _row: &Row<'_>) -> Result<usize> {
        Ok(*self)
    }
}

impl RowIndex for &str {
    fn position(&self, row: &Row<'_>) -> Result<usize> {
        let found = match row {
            Row::Sqlite(r) => r.as_ref().column_index(self).ok(),
            Row::Postgres(r) => r.columns().iter().position(|c| c.name() == *self),
        };
        found.ok_or_else(|| Error::conversion(format!("no column named {self}")))
    }
}

impl Row<'_> {
    /// Column `idx` read as `T`.
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        let i = idx.position(self)?;
        match self {
            Row::Sqlite(r) => T::column_result(from_sqlite_ref(r.get_ref(i)?)?),
            Row::Postgres(r) => T::column_result(pg::column(r, i)?),
        }
    }
}

/// Throwaway databases for tests: this crate's unit tests, and (with the
/// `testing` feature) the server's tests through `collab-testkit`.
#[cfg(any(test, feature = "testing"))]
pub mod test_database;
