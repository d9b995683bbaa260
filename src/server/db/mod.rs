//! The server's collab database (`collab.db`): the one place server state
//! lives. `migrations` owns the schema; `leases` and `events` hold the
//! decisions as plain functions over a connection (`now` passed in, no
//! clock, no threads); `writer` is the single writer thread that
//! group-commits every write and answers only after COMMIT; `open_reader`
//! gives the read-only connections that read beside it, and `reads` pools
//! them for request handlers. `issues` holds the issue decisions; `queue`
//! the work queue (ready issues, `next`); `patches` the patch decisions
//! (push-to-review).

pub mod events;
pub mod exports;
pub mod guard;
pub mod issues;
pub mod leases;
pub mod migrations;
pub mod patches;
pub mod queue;
pub mod reads;
pub mod repos;
pub mod snapshot;
pub mod webhooks;
pub mod writer;

/// A read-only connection to `collab.db` for readers beside the writer
/// (WAL lets them read committed data while it writes): the event stream,
/// webhook delivery, the head poller.
pub fn open_reader(path: &std::path::Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    Ok(conn)
}
