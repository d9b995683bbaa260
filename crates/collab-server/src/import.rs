//! The one-time importer: a repository's issue DAGs (`refs/collab/issues/*`)
//! replayed into `collab.db`, after which the server is authoritative for
//! that repository's issues.
//!
//! Replay is the library's (`record::state::replay_ref`): signatures are
//! verified and the repository's trust allowlist is honoured, so what is
//! imported is exactly what `git-collab issue list|show` showed; dropped
//! events are reported, never imported. Ids, authors, times, labels,
//! status and comment order (and comment ids: the event commit ids) are
//! kept. Reading a DAG is bounded by `record::store` (a DAG past its limits
//! fails to replay): such an issue is reported as skipped, never read whole.
//!
//! Idempotent: issues are inserted with `ON CONFLICT DO NOTHING`, in
//! batches of [`BATCH`], and the repository's `imports` row is written with
//! the last batch, so a crash mid-import is finished by the next start and a
//! finished repository is never imported again. The server imports every
//! repository without an `imports` row at start (before it listens), and
//! any repository that appears later on first use (`Imports::ensure`);
//! `git-collab-server import` does the same by hand.
//!
//! The repository's patch DAGs (`refs/collab/patches/*`) are imported in
//! the same run, after its issues, under the same rules and with their own
//! record (`patch_imports`, see `patch_import`): a repository whose issues
//! were imported by an older server gets its patches imported at the next
//! start. A repository counts as imported once both are.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;

use crate::db::sql::{Connection, OptionalExtension};
use anyhow::Context as _;
use collab_record::state::{self, DroppedEvent, IssueState};
use collab_record::trust::TrustList;
use git2::Repository;
use serde::Serialize;
use serde_json::json;

use crate::db::issues::{self, Comment, Issue};
use crate::db::reads::ReadPool;
use crate::db::writer::Writer;
use crate::export::ExportQueue;
use crate::import_shared::{person, BATCH};
use crate::patch_import::{self, PatchBatch, PatchReport};
use crate::repos::RepoEntry;

/// What importing one repository found and did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepoReport {
    pub repo: String,
    /// `imported`, or `already_imported` (nothing done).
    pub status: &'static str,
    /// Issue DAGs found.
    pub found: usize,
    /// Issues inserted now.
    pub issues: usize,
    pub comments: usize,
    /// Event commits replayed (structural merges excluded).
    pub events: usize,
    /// Events replay dropped (bad signature, untrusted key, malformed, ...).
    pub dropped: Vec<DroppedJson>,
    /// Issues whose root event was dropped: not imported.
    pub invalid_issues: Vec<Skipped>,
    /// Issues that could not be replayed at all (a DAG past the size
    /// limits, an unreadable object): not imported.
    pub skipped: Vec<Skipped>,
    /// The import of the repository's patch DAGs, when it ran now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patches: Option<PatchReport>,
}

/// A dropped event, as `git-collab verify --json` shows it, with its issue.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedJson {
    pub issue: String,
    #[serde(flatten)]
    pub event: DroppedEvent,
}

/// An issue left out, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub issue: String,
    pub reason: String,
}

/// One batch of replayed issues, ready to store.
pub struct Batch {
    issues: Vec<(Issue, Vec<Comment>)>,
}

/// The rows of one replayed issue.
fn rows(repo: &str, s: &IssueState) -> (Issue, Vec<Comment>) {
    let comments: Vec<Comment> = s
        .comments
        .iter()
        .map(|c| Comment {
            id: c.id.clone(),
            author: person(&c.author),
            at_ms: c.at.timestamp_millis(),
            body: c.body.clone(),
        })
        .collect();
    let issue = Issue {
        repo: repo.to_string(),
        id: s.id.clone(),
        title: s.title.clone(),
        body: s.body.clone(),
        author: person(&s.author),
        created_ms: s.created_at.timestamp_millis(),
        updated_ms: s.updated_at.timestamp_millis(),
        status: s.status,
        closed_reason: s.closed_reason.clone(),
        priority: None,
        imported: true,
        labels: s.labels.clone(),
        comment_count: comments.len() as i64,
    };
    (issue, comments)
}

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

/// What of `repo` (canonical name) has been imported.
pub fn import_state(conn: &Connection, repo: &str) -> crate::db::sql::Result<Done> {
    let issues = conn
        .prepare_cached("SELECT 1 FROM imports WHERE repo = ?1")?
        .query_row([repo], |_| Ok(()))
        .optional()?
        .is_some();
    Ok(Done {
        issues,
        patches: patch_import::is_imported(conn, repo)?,
    })
}

/// Store one batch inside the caller's transaction; the last batch also
/// records the repository as imported. Returns (issues, comments) inserted.
fn store(
    conn: &Connection,
    batch: &Batch,
    last: Option<&RepoReport>,
    now: i64,
) -> anyhow::Result<(usize, usize)> {
    let (mut issues_in, mut comments_in) = (0, 0);
    for (issue, comments) in &batch.issues {
        if issues::insert_imported(conn, issue, comments, now)?.is_some() {
            issues_in += 1;
            comments_in += comments.len();
        }
    }
    if let Some(report) = last {
        conn.prepare_cached(
            "INSERT INTO imports (repo, status, imported_at, issues, comments, events, dropped, report)
             VALUES (?1, 'imported', ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (repo) DO NOTHING",
        )?
        .execute(crate::db::sql::params![
            report.repo,
            now,
            (report.issues + issues_in) as i64,
            (report.comments + comments_in) as i64,
            report.events as i64,
            report.dropped.len() as i64,
            serde_json::to_string(report)?,
        ])?;
    }
    Ok((issues_in, comments_in))
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
    ) -> anyhow::Result<(usize, usize, usize, usize)>;
}

/// A plain connection: one IMMEDIATE transaction per batch.
pub struct ConnSink<'a> {
    pub conn: &'a mut Connection,
    pub now: i64,
}

impl Sink for ConnSink<'_> {
    fn store(&mut self, batch: Batch, last: Option<RepoReport>) -> anyhow::Result<(usize, usize)> {
        let tx = self
            .conn
            .transaction_with_behavior(crate::db::sql::TransactionBehavior::Immediate)?;
        let stored = store(&tx, &batch, last.as_ref(), self.now)?;
        tx.commit()?;
        Ok(stored)
    }

    fn store_patches(
        &mut self,
        repo: &str,
        batch: PatchBatch,
        last: Option<PatchReport>,
    ) -> anyhow::Result<(usize, usize, usize, usize)> {
        let tx = self
            .conn
            .transaction_with_behavior(crate::db::sql::TransactionBehavior::Immediate)?;
        let stored = patch_import::store(&tx, repo, &batch, last.as_ref(), self.now)?;
        tx.commit()?;
        Ok(stored)
    }
}

/// The server's writer thread, from a blocking thread.
pub struct WriterSink<'a> {
    pub writer: &'a Writer,
    pub runtime: tokio::runtime::Handle,
}

impl Sink for WriterSink<'_> {
    fn store(&mut self, batch: Batch, last: Option<RepoReport>) -> anyhow::Result<(usize, usize)> {
        let writer = self.writer.clone();
        self.runtime
            .block_on(writer.write("import", move |conn, now| {
                store(conn, &batch, last.as_ref(), now)
            }))
    }

    fn store_patches(
        &mut self,
        repo: &str,
        batch: PatchBatch,
        last: Option<PatchReport>,
    ) -> anyhow::Result<(usize, usize, usize, usize)> {
        let writer = self.writer.clone();
        let repo = repo.to_string();
        self.runtime
            .block_on(writer.write("import patches", move |conn, now| {
                patch_import::store(conn, &repo, &batch, last.as_ref(), now)
            }))
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
        import_issues(&repo, entry, &mut report, sink)?;
    }
    if !done.patches {
        let name = entry.name.clone();
        let patches = patch_import::import(&repo, &entry.name, &mut |batch, last| {
            sink.store_patches(&name, batch, last)
        })
        .context("importing patch DAGs")?;
        report.patches = Some(patches);
    }
    Ok(report)
}

fn import_issues(
    repo: &Repository,
    entry: &RepoEntry,
    report: &mut RepoReport,
    sink: &mut dyn Sink,
) -> anyhow::Result<()> {
    let trust = TrustList::load(repo).context("reading the trust allowlist")?;
    let refs = state::issue_refs(repo)?;
    report.found = refs.len();
    let chunks: Vec<&[(String, String)]> = refs.chunks(BATCH).collect();
    let total = chunks.len().max(1);
    for i in 0..total {
        let chunk: &[(String, String)] = chunks.get(i).copied().unwrap_or(&[]);
        let mut batch = Batch {
            issues: Vec::with_capacity(chunk.len()),
        };
        for (ref_name, id) in chunk {
            match state::replay_ref(repo, ref_name, id, trust.as_ref()) {
                Ok(replay) => {
                    report.events += replay.events;
                    report
                        .dropped
                        .extend(replay.dropped.into_iter().map(|event| DroppedJson {
                            issue: id.clone(),
                            event,
                        }));
                    match replay.state {
                        Ok(s) => batch.issues.push(rows(&entry.name, &s)),
                        Err(reason) => report.invalid_issues.push(Skipped {
                            issue: id.clone(),
                            reason,
                        }),
                    }
                }
                Err(e) => report.skipped.push(Skipped {
                    issue: id.clone(),
                    reason: e.to_string(),
                }),
            }
        }
        let last = (i + 1 == total).then(|| report.clone());
        let (issues_in, comments_in) = sink.store(batch, last)?;
        report.issues += issues_in;
        report.comments += comments_in;
    }
    Ok(())
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

pub fn log_report(report: &RepoReport) {
    if report.status != "imported" {
        return;
    }
    if let Some(patches) = &report.patches {
        patch_import::log_report(&report.repo, patches);
    }
    tracing::info!(
        repo = report.repo,
        issues = report.issues,
        comments = report.comments,
        events = report.events,
        dropped = report.dropped.len(),
        invalid = report.invalid_issues.len(),
        skipped = report.skipped.len(),
        "imported issues from git"
    );
    // Each issue left out is named, with why, so an operator can act on it.
    for s in report.invalid_issues.iter().chain(&report.skipped) {
        tracing::warn!(
            repo = report.repo,
            issue = s.issue,
            "issue not imported: {}",
            s.reason
        );
    }
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
