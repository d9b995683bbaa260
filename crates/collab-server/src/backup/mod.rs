//! Backups of a running server and their verified restore.
//!
//! - `take`: `git-collab-server backup --to DIR`, online, while pushes and
//!   lease operations continue;
//! - `verify`: `backup --verify DIR`, a check that restores nothing;
//! - `restore`: `git-collab-server restore --from DIR` into an empty state
//!   directory, proven afterwards (fsck, integrity check, census);
//! - `manifest`: the manifest format and the hashing copy they share;
//! - `postgres`: the database as a `pg_dump` archive when it is PostgreSQL;
//! - `repo_copy`: what makes one repository's copy consistent;
//! - `progress`: the progress line on a terminal.
//!
//! The database side (online copy, integrity check, census) is
//! `collab_store::snapshot`; the per-repository lock shared with maintenance is
//! `maintenance::lock`. docs/operations.md describes the procedure.

pub mod manifest;
pub mod postgres;
pub mod progress;
pub mod repo_copy;
pub mod restore;
pub mod take;
pub mod verify;

use serde_json::{json, Value};

use manifest::Manifest;

/// The summary `--json` prints and the text form is built from.
pub fn summary(manifest: &Manifest) -> Value {
    json!({
        "started_at": manifest.started_at,
        "server_version": manifest.server_version,
        "schema_version": manifest.database.as_ref().map(|d| d.schema_version),
        "database_dump": manifest.database_dump,
        "database_elsewhere": manifest.database_elsewhere,
        "counts": manifest.counts,
    })
}

/// `12.3 MB` style sizes for the text reports.
pub fn human_bytes(bytes: u64) -> String {
    let mut value = bytes as f64;
    for unit in ["B", "KiB", "MiB", "GiB"] {
        if value < 1024.0 {
            return if unit == "B" {
                format!("{bytes} B")
            } else {
                format!("{value:.1} {unit}")
            };
        }
        value /= 1024.0;
    }
    format!("{value:.1} TiB")
}
