//! Opening the collab database: [`open`] for the writer (created if
//! needed, schema migrated) and [`open_reader`] for the read-only
//! connections beside it. The crate root re-exports both.

use crate::leases;
use crate::migrations;
use crate::sql::{self, Location};

/// Open (creating if needed) the collab database at `location` for writing,
/// with its schema migrated: SQLite through `leases::open` (WAL,
/// `synchronous=FULL`), PostgreSQL over one connection.
pub fn open(location: impl Into<Location>) -> sql::Result<sql::Connection> {
    match &location.into() {
        Location::Sqlite(path) => leases::open(path),
        Location::Postgres(url) => {
            let conn = sql::Connection::open_postgres(url)?;
            migrations::migrate(&conn)?;
            Ok(conn)
        }
    }
}

/// A read-only connection to the collab database for readers beside the
/// writer (WAL lets them read committed data while it writes; on
/// PostgreSQL every connection reads beside the others): the event stream,
/// webhook delivery, the head poller, the read pool.
pub fn open_reader(location: impl Into<Location>) -> sql::Result<sql::Connection> {
    match &location.into() {
        Location::Sqlite(path) => {
            use rusqlite::OpenFlags;
            let conn = rusqlite::Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(std::time::Duration::from_secs(5))?;
            Ok(conn.into())
        }
        Location::Postgres(url) => sql::Connection::open_postgres(url),
    }
}
