//! What the server does with its two kinds of collaboration objects,
//! issues and patches, beyond the database: the signed git export
//! ([`export`]) and the one-time import of client-written DAGs
//! ([`import`]).
//!
//! The cut is by direction first, kind second: `export/mod.rs` and
//! `import/mod.rs` hold the machinery each direction runs the same way
//! for every kind (finding what is behind, opening repositories, reading
//! the export record, moving the ref by compare-and-swap, batching a
//! repository's DAGs into transactions, the sinks), generic over a trait
//! (`export::ExportKind`, `import::DagKind`) that each kind implements in
//! its own `issue.rs` and `patch.rs` with what really differs: the ref,
//! the rows it reads or writes, the events it appends, its report.
//! What triggers each kind's exporter stays with the kind: issues follow
//! the writes of this process (`export::ExportQueue`), patches the event
//! log's head (so pushes through the hooks are seen too).

pub mod export;
pub mod import;
