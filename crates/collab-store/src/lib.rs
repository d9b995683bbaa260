//! The server's collab database (`collab.db`): the one place server state
//! lives. `migrations` owns the schema; `leases` and `events` hold the
//! decisions as plain functions over a connection (`now` passed in, no
//! clock, no threads); `writer` is the single writer thread that
//! group-commits every write and answers only after COMMIT; `open_reader`
//! gives the read-only connections that read beside it, and `reads` pools
//! them for request handlers. `issues` holds the issue decisions; `queue`
//! the work queue (ready issues, `next`); `patches` the patch decisions
//! (push-to-review); `objects` what issues and patches share (people, ids
//! by prefix, the bookkeeping of every write, keyset paging).

pub mod event_log;
pub mod exports;
pub mod guard;
pub mod issues;
pub mod leases;
pub mod migrations;
pub mod objects;
pub mod patches;
pub mod queue;
pub mod reads;
pub mod repos;
pub mod snapshot;
pub mod sql;
pub mod transfer;
pub mod webhooks;
pub mod writer;

pub use sql::Location;

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
