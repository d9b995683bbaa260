//! The signed git export of the issues and patches the server holds: for
//! each object, a DAG of event commits in the ordinary issue or patch
//! format (`refs/collab/export/issues/<id>`, `refs/collab/export/patches/<id>`),
//! every event signed by the server's Ed25519 key (`signing`, published as
//! `server_key` by `collab-whoami`), so any clone can fetch an offline copy
//! and verify it (`git fetch origin 'refs/collab/export/*:refs/collab/export/*'`;
//! `git collab issue list|show --offline`, `git collab verify`).
//!
//! The export follows the database, never the other way round. A
//! background task per kind ([`issue::spawn`], [`patch::spawn`]) learns
//! which repositories were written, waits [`DEBOUNCE`] for more writes,
//! then brings every object of those repositories whose counter (an
//! issue's `revision`, a patch's `version`) is ahead of its export up to
//! date ([`export_pending`]): it appends the events for what changed since
//! the last export, moves the ref by compare-and-swap and records the
//! counter, the new tip and a summary of what the export shows
//! (`collab_store::exports`), so the next run appends only the difference. At start,
//! everything behind is caught up.
//!
//! `exporter` is the machinery both kinds share; what differs (the ref,
//! the rows read, the events written, what a stale record means) is an
//! [`ExportKind`], in `issue.rs` and `patch.rs`.

mod exporter;
pub mod issue;
pub mod patch;

pub use exporter::{export_pending, ExportKind, Exporter, DEBOUNCE};
pub use issue::ExportQueue;
