//! The export of issues ([`IssueExport`]): each issue's DAG in the ordinary
//! issue format (`refs/collab/export/issues/<id>`). Its exporter follows
//! the writes of this process: each write marks its repository dirty
//! ([`ExportQueue::touch`]), and [`spawn`]'s task exports the dirty
//! repositories after [`DEBOUNCE`]. A crash between the ref move and
//! the record only makes the next run rebuild the summary by replaying the
//! export.
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
use std::sync::Mutex;

use collab_record::event::{
    Action, Event, IssueClose, IssueComment, IssueEdit, IssueLabel, IssueOpen,
};
use collab_record::refs;
use collab_record::sign::SigningKey;
use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::exporter::{
    at, export_pending, run_blocking, write_event, ExportKind, Exporter, DEBOUNCE, SERVER_NAME,
};
use collab_store::exports;
use collab_store::issues::{self, IssueDetail, IssueStatus};
use collab_store::sql::Connection;

/// The export of issues.
pub struct IssueExport;

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
pub struct Summary {
    title: String,
    body: String,
    labels: Vec<String>,
    closed: bool,
    reason: Option<String>,
    comments: usize,
    updated_ms: i64,
}

/// Start the background exporter: it catches up with everything behind,
/// then follows `queue` until the server stops.
pub fn spawn(queue: &ExportQueue, ex: Exporter) {
    let Some(mut dirty) = queue.receiver.lock().expect("export lock").take() else {
        return;
    };
    tokio::spawn(async move {
        let catch_up = ex.clone();
        run_blocking::<IssueExport>(move || export_pending::<IssueExport>(&catch_up, None)).await;
        while let Some(first) = dirty.recv().await {
            let mut repos = BTreeSet::from([first]);
            tokio::time::sleep(DEBOUNCE).await;
            while let Ok(more) = dirty.try_recv() {
                repos.insert(more);
            }
            for repo in repos {
                let ex = ex.clone();
                run_blocking::<IssueExport>(move || {
                    export_pending::<IssueExport>(&ex, Some(&repo))
                })
                .await;
            }
        }
    });
}

impl ExportKind for IssueExport {
    const KIND: exports::Kind = exports::Kind::Issue;
    const NOUN: &'static str = "issue";
    const RECORD_LABEL: &'static str = "export record";

    type Detail = IssueDetail;
    type Summary = Summary;

    fn ref_name(id: &str) -> String {
        refs::server_export_issue_ref(id)
    }

    fn load(c: &Connection, repo: &str, id: &str) -> anyhow::Result<(IssueDetail, i64)> {
        let detail = issues::show(c, repo, id)?;
        let revision: i64 = c.query_row(
            "SELECT revision FROM issues WHERE repo = ?1 AND id = ?2",
            [repo, id],
            |row| row.get(0),
        )?;
        Ok((detail, revision))
    }

    fn recorded(state: &str) -> anyhow::Result<Option<Summary>> {
        Ok(Some(serde_json::from_str::<Summary>(state)?))
    }

    /// What the export shows, as its DAG replays.
    fn unrecorded(git: &Repository, ref_name: &str, id: &str) -> anyhow::Result<Option<Summary>> {
        let mut checker = collab_record::replay::Checker::new(None);
        let replay = collab_record::export::replay_export(git, ref_name, id, &mut checker)?;
        let s = replay
            .state
            .map_err(|why| anyhow::anyhow!("the export of {id} does not replay: {why}"))?;
        Ok(Some(Summary {
            title: s.title,
            body: s.body,
            labels: s.labels,
            closed: s.status == IssueStatus::Closed,
            reason: s.closed_reason,
            comments: s.comments.len(),
            updated_ms: s.updated_at.timestamp_millis(),
        }))
    }

    fn append_changes(
        git: &Repository,
        key: &SigningKey,
        mut tip: Option<Oid>,
        before: Option<Summary>,
        detail: &IssueDetail,
    ) -> anyhow::Result<(Option<Oid>, Summary)> {
        let issue = &detail.issue;
        let server_key = key.public_key_line();
        let by = |name: &str| super::exporter::by(&server_key, name);
        let mut write = |event: Event, latest: &mut i64| -> anyhow::Result<()> {
            *latest = (*latest).max(event.at.timestamp_millis());
            write_event(git, key, &mut tip, &event)?;
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

    fn log_exported(n: usize) {
        tracing::debug!(issues = n, "exported issues");
    }

    fn log_failed(repo: &str, id: &str, e: &anyhow::Error) {
        tracing::warn!(repo, issue = id, "exporting the issue failed: {e:#}");
    }
}
