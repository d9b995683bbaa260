//! What a database call fails with ([`Error`]), and how a PostgreSQL
//! error is read: one line for messages, busy (run it again later) or a
//! lost connection (nothing was written; run it again once the database is
//! back). A leaf: both backends and the value conversions return it.

/// What a database call fails with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `query_row` found no row (`OptionalExtension::optional` turns it into
    /// `None`).
    #[error("query returned no rows")]
    QueryReturnedNoRows,
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
    #[error("{}", describe(.0))]
    Postgres(#[from] postgres::Error),
    /// A value did not convert between Rust and SQL.
    #[error("{0}")]
    Conversion(String),
    /// Refused by our own code (a newer schema, a bad setting, …).
    #[error("{0}")]
    Failure(String),
    /// A lock another transaction holds could not be had at once (an
    /// issue's lock tried in a `Behavior::Concurrent` transaction): the
    /// operation runs again later (the writer defers it to its next group).
    #[error("busy: {0} is being decided by another transaction")]
    Busy(String),
    /// The database could not be reached, or the connection was lost
    /// before COMMIT was sent: nothing of the transaction was written, and
    /// it can run again (docs/postgres.md, "Faults of the database").
    #[error("the collab database is unavailable (nothing was written): {0}")]
    Unavailable(String),
    /// The connection was lost while COMMIT was on its way: the transaction
    /// may or may not have committed.
    #[error(
        "the connection to the collab database was lost during COMMIT \
         (the write may or may not have been recorded): {0}"
    )]
    CommitUnknown(String),
}

impl Error {
    pub fn failure(message: impl Into<String>) -> Error {
        Error::Failure(message.into())
    }

    pub fn conversion(message: impl Into<String>) -> Error {
        Error::Conversion(message.into())
    }

    /// Whether the operation that failed so can simply run again: a lock
    /// that was busy (`Error::Busy`, PostgreSQL's `lock_timeout`), or a
    /// deadlock or serialization failure PostgreSQL broke by aborting it.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Busy(_) => true,
            Error::Postgres(e) => is_busy(e),
            _ => false,
        }
    }

    /// Whether the database could not be reached or the connection was
    /// lost before anything was committed (a restarted or failed-over
    /// PostgreSQL, a terminated backend, a standby that refuses writes):
    /// the operation did not happen and can run again once the database is
    /// back. Never true on SQLite, nor for `Error::CommitUnknown`.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable(_) => true,
            Error::Postgres(e) => is_connection(e),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `rusqlite::OptionalExtension`: no row becomes `None`.
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::QueryReturnedNoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Whether `e` says the connection is lost or useless for writing, so
/// that nothing of an open transaction was kept and a new connection is
/// the remedy: the server could not be reached or the socket broke (I/O, a
/// closed connection, a connect timeout), SQLSTATE class 08 (connection
/// exception), 57P01/57P02/57P03 (terminated by an administrator or a
/// shutdown, a crash of another backend, not accepting connections yet),
/// 25006 (a read-only transaction: a standby, after a failover).
pub fn is_connection(e: &postgres::Error) -> bool {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006");
    }
    if e.is_closed() {
        return true;
    }
    // The client's error kinds are private; their messages are not.
    let message = e.to_string();
    [
        "error communicating with the server",
        "error connecting to server",
        "timeout waiting for server",
    ]
    .iter()
    .any(|kind| message.starts_with(kind))
}

/// Whether `e` is a lock that could not be had at once (SQLSTATE 55P03,
/// `lock_timeout` or `NOWAIT`), a deadlock PostgreSQL broke (40P01) or a
/// serialization failure (40001): an operation that fails so can run again.
pub fn is_busy(e: &postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| is_busy_code(db.code().code()))
}

/// A busy SQLSTATE: lock_not_available (a `lock_timeout`),
/// deadlock_detected, serialization_failure.
pub fn is_busy_code(code: &str) -> bool {
    matches!(code, "55P03" | "40P01" | "40001")
}

/// A PostgreSQL error as one line: the server's message and SQLSTATE where
/// there is one.
pub fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "postgres: {}: {} ({})",
            db.severity(),
            db.message(),
            db.code().code()
        ),
        None => format!("postgres: {e}"),
    }
}
