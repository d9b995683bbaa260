//! The lease machinery that lives in the server process, around the lease
//! store (`collab_store::leases` decides, `collab_store::writer` commits):
//!
//! - `expiry`: the timer that ends tenures when their time is up (within a
//!   second of `expires_at`), records `lease.expired` and lets lock delays
//!   run out, instead of waiting for someone to look;
//! - `waiters`: callers blocked in `collab-lease acquire|next --wait`, queued
//!   first come first served and retried whenever the writer reports that
//!   work may have become available;
//! - `settled`: what ends a `next --wait` besides an issue: the caller's
//!   queued merges that merged or were dropped since the call began
//!   (read from the event log).
//!
//! Both are in memory: a restart drops the waiters (their clients get a
//! clear error and retry) and the timer starts again from the database.

pub mod expiry;
pub mod settled;
pub mod waiters;
