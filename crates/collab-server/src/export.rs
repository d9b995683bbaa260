//! The signed git export of the issues the server holds: for each issue, a
//! DAG of event commits in the ordinary issue format
//! (`refs/collab/export/issues/<id>`), every event signed by the server's
//! Ed25519 key (`signing`, published as `server_key` by `collab-whoami`),
//! so any clone can fetch an offline copy and verify it
//! (`git fetch origin 'refs/collab/export/*:refs/collab/export/*'`;
//! `git collab issue list|show --offline`, `git collab verify`).
//!
//! The export follows the database, never the other way round. Each write
//! marks its repository dirty ([`ExportQueue::touch`]); a background task
//! waits [`DEBOUNCE`] for more writes, then brings every issue of the dirty
//! repositories whose `revision` is ahead of its export up to date by
//! appending events for what changed since the last export (new comments,
//! a new title or body, labels, status), then moving the ref by
//! compare-and-swap and recording the new revision (`db::exports`). A crash
//! between the ref move and the record only makes the next run rebuild the
//! summary by replaying the export. At start, everything behind is caught up.
//!
//! Shape of an exported DAG: a linear chain. The root is an `issue.open`
//! (title, body and labels as they were when the issue was first exported,
//! `at` = its creation time, the author's display name); then one
//! `issue.comment` per comment (its author's name and time), and
//! `issue.edit` / `issue.label` / `issue.close` / `issue.reopen` for state
//! changes (at the issue's update time, by `git-collab-server`). Every
//! event's key is the server's. The root's commit id is not the issue id
//! (ids of issues the server opened are random): readers take the id from
//! the ref name and the root from the chain's first commit. Links are not
//! in the export (the DAG format has no link event). Replaying an export
//! gives the issue's title, body, author name, times, labels, status, close
//! reason and comment authors, times and bodies as the database holds them;
//! comment ids are the export's own commit ids.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use collab_record::event::{
    Action, Author, Event, IssueClose, IssueComment, IssueEdit, IssueLabel, IssueOpen,
};
use collab_record::sign::SigningKey;
use collab_record::{refs, store};
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::db::exports::{self, Exported};
use crate::db::issues::{self, IssueDetail, IssueStatus};
use crate::db::reads::ReadPool;
use crate::db::writer::Writer;

/// How long the exporter waits after a write for more writes to the same
/// repositories before it writes git objects.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// Issues exported per database read.
const CHUNK: i64 = 500;

/// The author name of state changes the export cannot attribute.
const SERVER_NAME: &str = "git-collab-server";

/// Repositories with writes not exported yet.
pub struct ExportQueue {
    dirty: mpsc::UnboundedSender<String>,
    receiver: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
}

impl Default for ExportQueue {
    fn default() -> Self {
        let (dirty, receiver) = mpsc::unbounded_channel();
        ExportQueue {
            dirty,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

impl ExportQueue {
    /// Mark `repo` (canonical name) as written: its export is brought up to
    /// date shortly.
    pub fn touch(&self, repo: &str) {
        let _ = self.dirty.send(repo.to_string());
    }
}

/// What an export shows, kept beside it so the next run appends only the
/// difference.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Summary {
    title: String,
    body: String,
    labels: Vec<String>,
    closed: bool,
    reason: Option<String>,
    comments: usize,
    updated_ms: i64,
}

/// Start the background exporter: it catches up with everything behind,
/// then follows `queue` until the server stops. It reads through `reads`,
/// records through `writer`, finds repositories under `repos_dir` and signs
/// with `key`.
pub fn spawn(
    queue: &ExportQueue,
    reads: ReadPool,
    writer: Writer,
    repos_dir: PathBuf,
    key: Arc<SigningKey>,
) {
    let Some(mut dirty) = queue.receiver.lock().expect("export lock").take() else {
        return;
    };
    let export = move |repo: Option<String>| {
        let (reads, writer, repos_dir, key) = (
            reads.clone(),
            writer.clone(),
            repos_dir.clone(),
            key.clone(),
        );
        run_blocking(move || export_pending(&reads, &writer, &repos_dir, &key, repo.as_deref()))
    };
    tokio::spawn(async move {
        export(None).await;
        while let Some(first) = dirty.recv().await {
            let mut repos = BTreeSet::from([first]);
            tokio::time::sleep(DEBOUNCE).await;
            while let Ok(more) = dirty.try_recv() {
                repos.insert(more);
            }
            for repo in repos {
                export(Some(repo)).await;
            }
        }
    });
}

async fn run_blocking(work: impl FnOnce() -> anyhow::Result<usize> + Send + 'static) {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => tracing::debug!(issues = n, "exported issues"),
        Ok(Err(e)) => tracing::warn!("issue export: {e:#}"),
        Err(e) => tracing::warn!("issue export task: {e}"),
    }
}

/// Bring every issue of `repo` (of every repository when `None`) whose
/// export is behind up to date; returns how many were exported. Blocking.
pub fn export_pending(
    reads: &ReadPool,
    writer: &Writer,
    repos_dir: &Path,
    key: &SigningKey,
    repo: Option<&str>,
) -> anyhow::Result<usize> {
    let runtime = tokio::runtime::Handle::current();
    let mut done = 0;
    let mut failed = BTreeSet::new();
    loop {
        let only = repo.map(str::to_string);
        let pending = reads.read_blocking(move |c| {
            Ok(exports::pending(
                c,
                exports::Kind::Issue,
                only.as_deref(),
                CHUNK,
            )?)
        })?;
        let pending: Vec<_> = pending
            .into_iter()
            .filter(|p| !failed.contains(&(p.repo.clone(), p.id.clone())))
            .collect();
        if pending.is_empty() {
            return Ok(done);
        }
        let mut git: Option<(String, Repository)> = None;
        for p in pending {
            if git.as_ref().map(|(name, _)| name) != Some(&p.repo) {
                let Some(entry) = crate::repos::find_repo(repos_dir, &p.repo) else {
                    failed.insert((p.repo.clone(), p.id.clone()));
                    continue;
                };
                git = Some((p.repo.clone(), Repository::open_bare(&entry.path)?));
            }
            let (_, repository) = git.as_ref().expect("opened above");
            match export_issue(reads, writer, key, &runtime, repository, &p.repo, &p.id) {
                Ok(()) => done += 1,
                Err(e) => {
                    tracing::warn!(
                        repo = p.repo,
                        issue = p.id,
                        "exporting the issue failed: {e:#}"
                    );
                    failed.insert((p.repo.clone(), p.id.clone()));
                }
            }
        }
    }
}

/// Export one issue: read it and its export record in one read
/// transaction, append the events for what changed, move the ref, record.
fn export_issue(
    reads: &ReadPool,
    writer: &Writer,
    key: &SigningKey,
    runtime: &tokio::runtime::Handle,
    git: &Repository,
    repo: &str,
    id: &str,
) -> anyhow::Result<()> {
    let (r, i) = (repo.to_string(), id.to_string());
    let (detail, revision, recorded) = reads.read_blocking(move |c| {
        let detail = issues::show(c, &r, &i)?;
        let revision: i64 = c.query_row(
            "SELECT revision FROM issues WHERE repo = ?1 AND id = ?2",
            [&r, &i],
            |row| row.get(0),
        )?;
        Ok((
            detail,
            revision,
            exports::get(c, exports::Kind::Issue, &r, &i)?,
        ))
    })?;
    let ref_name = refs::server_export_issue_ref(id);
    let tip = store::ref_tip(git, &ref_name)?;
    let before = match (&tip, recorded) {
        (None, _) => None,
        (Some(tip), Some(rec)) if rec.tip == tip.to_string() => {
            Some(serde_json::from_str::<Summary>(&rec.state)?)
        }
        // The ref and the record disagree (a crash between them, a
        // restored repository): read what the export shows.
        (Some(_), _) => Some(replayed_summary(git, &ref_name, id)?),
    };
    let (new_tip, after) = append_changes(git, key, tip, before, &detail)?;
    if new_tip != tip {
        store::compare_and_swap(git, &ref_name, tip, new_tip.expect("a tip"), "export")?;
    }
    let record = Exported {
        revision,
        tip: new_tip.map(|t| t.to_string()).unwrap_or_default(),
        state: serde_json::to_string(&after)?,
    };
    let (r, i) = (repo.to_string(), id.to_string());
    runtime.block_on(writer.write("export record", move |conn, _now| {
        Ok(exports::record(
            conn,
            exports::Kind::Issue,
            &r,
            &i,
            &record,
        )?)
    }))
}

/// The summary of an export as its DAG replays.
fn replayed_summary(git: &Repository, ref_name: &str, id: &str) -> anyhow::Result<Summary> {
    let mut checker = collab_record::replay::Checker::new(None);
    let replay = collab_record::export::replay_export(git, ref_name, id, &mut checker)?;
    let s = replay
        .state
        .map_err(|why| anyhow::anyhow!("the export of {id} does not replay: {why}"))?;
    Ok(Summary {
        title: s.title,
        body: s.body,
        labels: s.labels,
        closed: s.status == IssueStatus::Closed,
        reason: s.closed_reason,
        comments: s.comments.len(),
        updated_ms: s.updated_at.timestamp_millis(),
    })
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default()
}

/// Append to the chain at `tip` the events that take `before` (nothing:
/// start a chain) to `detail`; returns the new tip and the summary.
fn append_changes(
    git: &Repository,
    key: &SigningKey,
    mut tip: Option<Oid>,
    before: Option<Summary>,
    detail: &IssueDetail,
) -> anyhow::Result<(Option<Oid>, Summary)> {
    let issue = &detail.issue;
    let server_key = key.public_key_line();
    let by = |name: &str| Author {
        name: name.to_string(),
        key: server_key.clone(),
    };
    let mut write = |event: Event, latest: &mut i64| -> anyhow::Result<()> {
        *latest = (*latest).max(event.at.timestamp_millis());
        let parents: Vec<Oid> = tip.into_iter().collect();
        tip = Some(store::write_event_commit(git, &parents, &event, key)?);
        Ok(())
    };
    let mut latest;
    let mut s = match before {
        Some(s) => {
            latest = s.updated_ms;
            s
        }
        None => {
            latest = issue.created_ms;
            let open = Action::IssueOpen(IssueOpen {
                title: issue.title.clone(),
                body: issue.body.clone(),
                labels: issue.labels.clone(),
                nonce: hex::encode(rand::random::<[u8; 16]>()),
            });
            write(
                Event::new(by(&issue.author.name), at(issue.created_ms), open),
                &mut latest,
            )?;
            Summary {
                title: issue.title.clone(),
                body: issue.body.clone(),
                labels: issue.labels.clone(),
                ..Default::default()
            }
        }
    };
    for c in detail.comments.iter().skip(s.comments) {
        let comment = Action::IssueComment(IssueComment {
            body: c.body.clone(),
        });
        write(
            Event::new(by(&c.author.name), at(c.at_ms), comment),
            &mut latest,
        )?;
        s.comments += 1;
    }
    let when = at(issue.updated_ms);
    if s.title != issue.title || s.body != issue.body {
        let edit = Action::IssueEdit(IssueEdit {
            title: (s.title != issue.title).then(|| issue.title.clone()),
            body: (s.body != issue.body).then(|| issue.body.clone()),
        });
        write(Event::new(by(SERVER_NAME), when, edit), &mut latest)?;
        s.title = issue.title.clone();
        s.body = issue.body.clone();
    }
    if s.labels != issue.labels {
        let add = issue
            .labels
            .iter()
            .filter(|l| !s.labels.contains(l))
            .cloned()
            .collect();
        let remove = s
            .labels
            .iter()
            .filter(|l| !issue.labels.contains(l))
            .cloned()
            .collect();
        let label = Action::IssueLabel(IssueLabel { add, remove });
        write(Event::new(by(SERVER_NAME), when, label), &mut latest)?;
        s.labels = issue.labels.clone();
    }
    let closed = issue.status == IssueStatus::Closed;
    if s.closed && (!closed || s.reason != issue.closed_reason) {
        write(
            Event::new(by(SERVER_NAME), when, Action::IssueReopen),
            &mut latest,
        )?;
        s.closed = false;
        s.reason = None;
    }
    if closed && !s.closed {
        let close = Action::IssueClose(IssueClose {
            reason: issue.closed_reason.clone(),
        });
        write(Event::new(by(SERVER_NAME), when, close), &mut latest)?;
        s.closed = true;
        s.reason = issue.closed_reason.clone();
    }
    // A write the export does not show (a link) still moves `updated_at`:
    // an empty label event carries the time and changes nothing else.
    if latest < issue.updated_ms {
        let nothing = Action::IssueLabel(IssueLabel {
            add: Vec::new(),
            remove: Vec::new(),
        });
        write(Event::new(by(SERVER_NAME), when, nothing), &mut latest)?;
    }
    s.updated_ms = latest;
    Ok((tip, s))
}
