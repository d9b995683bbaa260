//! The collab record kept in git: signed event DAGs under `refs/collab/*`
//! and everything derived from them by replay. Shared by the CLI and the
//! server; knows nothing of serving SSH or HTTP and holds no server state.

pub mod cache;
pub mod diff;
pub mod event;
pub mod export;
pub mod merge_scan;
pub mod patch;
pub mod refs;
pub mod replay;
pub mod sign;
pub mod state;
pub mod store;
pub mod timeline;
pub mod trust;
pub mod verify;
