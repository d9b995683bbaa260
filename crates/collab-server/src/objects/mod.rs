//! What the server does with its two kinds of collaboration objects,
//! issues and patches, beyond the database: the signed git export
//! ([`export`]) and the one-time import of client-written DAGs
//! ([`import`]).
//!
//! The cut is by direction first, kind second: `export/exporter.rs` and
//! `import/replay.rs` hold the machinery each direction runs the same way
//! for every kind (finding what is behind, opening repositories, reading
//! the export record, moving the ref by compare-and-swap, batching a
//! repository's DAGs into transactions), generic over a trait
//! (`export::ExportKind`, `import::replay::DagKind`) that each kind implements in
//! its own `issue.rs` and `patch.rs` with what really differs: the ref,
//! the rows it reads or writes, the events it appends, its report.
//! What triggers each kind's exporter stays with the kind: issues follow
//! the writes of this process (`export::ExportQueue`), patches the event
//! log's head (so pushes through the hooks are seen too).

pub mod export;
pub mod import;
