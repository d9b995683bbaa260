//! The import of a repository's issue DAGs (`refs/collab/issues/*`, see
//! [`super`]). Ids, authors, times, labels, status and comment order (and
//! comment ids: the event commit ids) are kept; links are not in the DAG
//! format. The repository's `imports` row is written with the last batch.

use anyhow::Context as _;
use collab_record::replay::DroppedEvent;
use collab_record::state::{self, IssueState};
use collab_record::trust::TrustList;
use git2::Repository;
use serde::Serialize;

use super::patch::PatchReport;
use super::replay::{person, replay_in_batches, DagKind, Replayed};
use crate::repos::RepoEntry;
use collab_store::issues::{self, Comment, Issue};
use collab_store::sql::Connection;

/// What importing one repository found and did (its issues here, its
/// patches in [`RepoReport::patches`]).
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

/// Store one batch inside the caller's transaction; the last batch also
/// records the repository as imported. Returns (issues, comments) inserted.
pub(super) fn store(
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
        .execute(collab_store::sql::params![
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

/// Issue DAGs, as [`replay_in_batches`] replays them.
struct IssueDags;

impl DagKind for IssueDags {
    type State = IssueState;
    type Rows = (Issue, Vec<Comment>);
    type Report = RepoReport;
    type Counts = (usize, usize);

    fn replay(
        git: &Repository,
        ref_name: &str,
        id: &str,
        trust: Option<&TrustList>,
    ) -> Result<Replayed<IssueState>, String> {
        let replay = state::replay_ref(git, ref_name, id, trust).map_err(|e| e.to_string())?;
        Ok(Replayed {
            events: replay.events,
            dropped: replay.dropped,
            state: replay.state,
        })
    }

    /// The rows of one replayed issue.
    fn rows(
        _: &Repository,
        repo: &str,
        s: &IssueState,
        _: &mut RepoReport,
    ) -> Result<(Issue, Vec<Comment>), String> {
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
        Ok((issue, comments))
    }

    fn note_replayed(report: &mut RepoReport, id: &str, events: usize, dropped: Vec<DroppedEvent>) {
        report.events += events;
        report
            .dropped
            .extend(dropped.into_iter().map(|event| DroppedJson {
                issue: id.to_string(),
                event,
            }));
    }

    fn note_left_out(report: &mut RepoReport, id: &str, reason: String, invalid: bool) {
        let skipped = Skipped {
            issue: id.to_string(),
            reason,
        };
        if invalid {
            report.invalid_issues.push(skipped);
        } else {
            report.skipped.push(skipped);
        }
    }

    fn add(report: &mut RepoReport, (issues_in, comments_in): (usize, usize)) {
        report.issues += issues_in;
        report.comments += comments_in;
    }
}

/// Import the issue DAGs of `repo`, handing the rows to `store` in batches
/// (the last call carries the report), counting in `report`.
pub(super) fn import(
    repo: &Repository,
    entry: &RepoEntry,
    report: &mut RepoReport,
    store: &mut dyn FnMut(Batch, Option<RepoReport>) -> anyhow::Result<(usize, usize)>,
) -> anyhow::Result<()> {
    let trust = TrustList::load(repo).context("reading the trust allowlist")?;
    let refs = state::issue_refs(repo)?;
    report.found = refs.len();
    replay_in_batches::<IssueDags>(
        repo,
        &entry.name,
        &refs,
        trust.as_ref(),
        report,
        &mut |issues, last| store(Batch { issues }, last),
    )
}

/// Log what importing a repository's issues did.
pub(super) fn log_report(report: &RepoReport) {
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
