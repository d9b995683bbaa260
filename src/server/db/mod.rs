//! The server's collab database (`collab.db`): the one place server state
//! lives. `migrations` owns the schema; `leases` and `events` hold the
//! decisions as plain functions over a connection (`now` passed in, no
//! clock, no threads); `writer` is the single writer thread that
//! group-commits every write and answers only after COMMIT.

pub mod events;
pub mod leases;
pub mod migrations;
pub mod repos;
pub mod writer;
