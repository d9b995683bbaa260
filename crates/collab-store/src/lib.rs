//! The server's collab database (`collab.db`): the one place server state
//! lives. `migrations` owns the schema; `leases` and `events` hold the
//! decisions as plain functions over a connection (`now` passed in, no
//! clock, no threads); `writer` is the single writer thread that
//! group-commits every write and answers only after COMMIT; `open_reader`
//! gives the read-only connections that read beside it, and `reads` pools
//! them for request handlers. `issues` holds the issue decisions; `queue`
//! the work queue (ready issues, `next`); `patches` the patch decisions
//! (push-to-review); `objects` what issues and patches share (people, ids
//! by prefix, the bookkeeping of every write, keyset paging); `search` the
//! full-text index over them and its ranked query.

pub mod checks;
pub mod connect;
pub mod event_log;
pub mod exports;
pub mod guard;
pub mod issues;
pub mod leases;
pub mod lfs_locks;
pub mod merge_intents;
pub mod merge_queue;
pub mod migrations;
pub mod mirrors;
pub mod objects;
pub mod patches;
pub mod queue;
pub mod queue_holds;
pub mod reads;
pub mod repo_ids;
pub mod repos;
pub mod search;
pub mod snapshot;
pub mod sql;
pub mod transfer;
pub mod webhooks;
pub mod writer;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use connect::{open, open_reader};
pub use sql::Location;
