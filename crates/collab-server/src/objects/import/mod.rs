//! The one-time importer: a repository's client-written DAGs, issues
//! (`refs/collab/issues/*`, [`issue`]) then patches
//! (`refs/collab/patches/*`, [`patch`]), replayed into `collab.db`, after
//! which the server is authoritative for that repository's issues and
//! patches.
//!
//! Replay is the library's (`record::state::replay_ref`,
//! `record::patch::replay_ref`): signatures are verified and the
//! repository's trust allowlist is honoured, so what is imported is exactly
//! what `git-collab issue|patch list|show` showed; dropped events are
//! reported, never imported. Reading a DAG is bounded by `record::store`
//! (a DAG past its limits fails to replay): such an object is reported as
//! skipped, never read whole.
//!
//! Idempotent: objects are inserted with `ON CONFLICT DO NOTHING`, in
//! batches of [`BATCH`] (`replay::replay_in_batches`, the loop both kinds share),
//! and each kind's record (`imports`, `patch_imports`) is written with its
//! last batch, so a crash mid-import is finished by the next start and a
//! finished repository is never imported again. A repository whose issues
//! were imported by an older server gets its patches imported at the next
//! start; it counts as imported once both are. The server imports every
//! repository not imported yet at start (before it listens), and any
//! repository that appears later on first use ([`ensure`]);
//! `git-collab-server import` does the same by hand.

pub mod issue;
pub mod patch;
mod replay;

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context as _;
use git2::Repository;
use serde_json::json;

use crate::objects::export::ExportQueue;
use crate::repos::RepoEntry;
use collab_store::reads::ReadPool;
use collab_store::sql::{Connection, OptionalExtension};
use collab_store::writer::Writer;

pub use issue::{Batch, DroppedJson, RepoReport, Skipped};
pub use patch::{PatchBatch, PatchReport};
pub use replay::BATCH;

/// What of a repository has been imported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Done {
    pub issues: bool,
    pub patches: bool,
}

impl Done {
    pub fn all(self) -> bool {
        self.issues && self.patches
    }
}

/// Whether `table` (an import record) has a row for `repo`.
fn recorded(conn: &Connection, table: &str, repo: &str) -> collab_store::sql::Result<bool> {
    Ok(conn
        .prepare_cached(&format!("SELECT 1 FROM {table} WHERE repo = ?1"))?
        .query_row([repo], |_| Ok(()))
        .optional()?
        .is_some())
}

/// What of `repo` (canonical name) has been imported.
pub fn import_state(conn: &Connection, repo: &str) -> collab_store::sql::Result<Done> {
    Ok(Done {
        issues: recorded(conn, "imports", repo)?,
        patches: recorded(conn, "patch_imports", repo)?,
    })
}

/// Where batches go: the server's writer, or a connection of its own
/// (`git-collab-server import` on the host).
pub trait Sink {
    fn store(&mut self, batch: Batch, last: Option<RepoReport>) -> anyhow::Result<(usize, usize)>;

    /// Store a batch of patches of `repo`; the last one carries the report.
    /// Returns `(patches, revisions, reviews, comments)` inserted.
    fn store_patches(
        &mut self,
        repo: &str,
        batch: PatchBatch,
        last: Option<PatchReport>,
    ) -> anyhow::Result<patch::Counts>;
}

/// A plain connection: one IMMEDIATE transaction per batch.
pub struct ConnSink<'a> {
    pub conn: &'a mut Connection,
    pub now: i64,
}

impl ConnSink<'_> {
    fn in_transaction<T>(
        &mut self,
        work: impl FnOnce(&Connection, i64) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let tx = self
            .conn
            .transaction_with_behavior(collab_store::sql::TransactionBehavior::Immediate)?;
        let stored = work(&tx, self.now)?;
        tx.commit()?;
        Ok(stored)
    }
}

impl Sink for ConnSink<'_> {
    fn store(&mut self, batch: Batch, last: Option<RepoReport>) -> anyhow::Result<(usize, usize)> {
        self.in_transaction(|conn, now| issue::store(conn, &batch, last.as_ref(), now))
    }

    fn store_patches(
        &mut self,
        repo: &str,
        batch: PatchBatch,
        last: Option<PatchReport>,
    ) -> anyhow::Result<patch::Counts> {
        self.in_transaction(|conn, now| patch::store(conn, repo, &batch, last.as_ref(), now))
    }
}

/// The server's writer thread, from a blocking thread.
pub struct WriterSink<'a> {
    pub writer: &'a Writer,
    pub runtime: tokio::runtime::Handle,
}

impl WriterSink<'_> {
    fn write<T: Send + 'static>(
        &self,
        label: &str,
        work: impl FnOnce(&Connection, i64) -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let writer = self.writer.clone();
        self.runtime.block_on(writer.write(label, work))
    }
}

impl Sink for WriterSink<'_> {
    fn store(&mut self, batch: Batch, last: Option<RepoReport>) -> anyhow::Result<(usize, usize)> {
        self.write("import", move |conn, now| {
            issue::store(conn, &batch, last.as_ref(), now)
        })
    }

    fn store_patches(
        &mut self,
        repo: &str,
        batch: PatchBatch,
        last: Option<PatchReport>,
    ) -> anyhow::Result<patch::Counts> {
        let repo = repo.to_string();
        self.write("import patches", move |conn, now| {
            patch::store(conn, &repo, &batch, last.as_ref(), now)
        })
    }
}

/// Import one repository (what `done` says is not imported yet) into
/// `sink`: its issues, then its patches.
pub fn import_repo(
    entry: &RepoEntry,
    done: Done,
    sink: &mut dyn Sink,
) -> anyhow::Result<RepoReport> {
    let mut report = RepoReport {
        repo: entry.name.clone(),
        status: "already_imported",
        ..Default::default()
    };
    if done.all() {
        return Ok(report);
    }
    report.status = "imported";
    let repo = Repository::open_bare(&entry.path)
        .with_context(|| format!("opening {}", entry.path.display()))?;
    if !done.issues {
        issue::import(&repo, entry, &mut report, &mut |batch, last| {
            sink.store(batch, last)
        })?;
    }
    if !done.patches {
        let name = entry.name.clone();
        let patches = patch::import(&repo, &entry.name, &mut |batch, last| {
            sink.store_patches(&name, batch, last)
        })
        .context("importing patch DAGs")?;
        report.patches = Some(patches);
    }
    Ok(report)
}

/// Which repositories this process knows to be imported, so that the check
/// on every issue verb is a set lookup after the first.
#[derive(Default)]
pub struct Imports {
    known: Mutex<HashSet<String>>,
    /// Held while a repository is imported on first use, so two requests
    /// never import it at once.
    importing: Mutex<()>,
}

impl Imports {
    /// Remember `repo` as imported.
    pub fn mark(&self, repo: &str) {
        self.known
            .lock()
            .expect("imports lock")
            .insert(repo.to_string());
    }

    fn known(&self, repo: &str) -> bool {
        self.known.lock().expect("imports lock").contains(repo)
    }

    /// Make sure `entry`'s issue DAGs are imported, importing them now if
    /// not (on first use of a repository created, or restored, after the
    /// server started): read through `reads`, stored through `writer`, and
    /// queued for the issue export. Blocking: call from a blocking thread.
    pub fn ensure(
        &self,
        reads: &ReadPool,
        writer: &Writer,
        export: &ExportQueue,
        entry: &RepoEntry,
        runtime: &tokio::runtime::Handle,
    ) -> anyhow::Result<()> {
        if self.known(&entry.name) {
            return Ok(());
        }
        let _one_at_a_time = self.importing.lock().expect("imports lock");
        let name = entry.name.clone();
        let done = reads.read_blocking(move |c| Ok(import_state(c, &name)?))?;
        if !done.all() {
            let report = import_repo(
                entry,
                done,
                &mut WriterSink {
                    writer,
                    runtime: runtime.clone(),
                },
            )?;
            log_report(&report);
            export.touch(&entry.name);
        }
        self.mark(&entry.name);
        Ok(())
    }
}

/// Log what importing a repository did: its patches, then its issues.
pub fn log_report(report: &RepoReport) {
    if report.status != "imported" {
        return;
    }
    if let Some(patches) = &report.patches {
        patch::log_report(&report.repo, patches);
    }
    issue::log_report(report);
}

/// Import every repository under `repos_dir` not imported yet (the
/// governance repository holds no issues), through `sink`. One
/// repository's failure is reported and the others go on.
pub fn import_all(
    repos_dir: &Path,
    only: Option<&RepoEntry>,
    is_done: &mut dyn FnMut(&str) -> anyhow::Result<Done>,
    sink: &mut dyn Sink,
) -> Vec<Result<RepoReport, (String, String)>> {
    let entries = match only {
        Some(entry) => vec![entry.clone()],
        None => crate::repos::list_repos(repos_dir),
    };
    entries
        .iter()
        .filter(|e| !e.is_governance())
        .map(|entry| {
            let done = is_done(&entry.name).map_err(|e| (entry.name.clone(), format!("{e:#}")))?;
            import_repo(entry, done, sink).map_err(|e| (entry.name.clone(), format!("{e:#}")))
        })
        .collect()
}

/// The JSON of `git-collab-server import --json`.
pub fn reports_json(results: &[Result<RepoReport, (String, String)>]) -> serde_json::Value {
    let repos: Vec<serde_json::Value> = results
        .iter()
        .map(|r| match r {
            Ok(report) => serde_json::to_value(report).unwrap_or_default(),
            Err((repo, error)) => json!({ "repo": repo, "status": "failed", "error": error }),
        })
        .collect();
    json!({ "repos": repos })
}
