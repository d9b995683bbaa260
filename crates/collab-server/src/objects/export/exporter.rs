//! The export machinery every kind shares, generic over [`ExportKind`]:
//! the handles an exporter works with ([`Exporter`]), the pass that brings
//! every object behind up to date ([`export_pending`]), one object's export,
//! and the helpers the kinds write their events with. The kinds (`issue`,
//! `patch`) sit above it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use collab_record::event::Author;
use collab_record::sign::SigningKey;
use collab_record::store;
use git2::{Oid, Repository};
use serde::de::DeserializeOwned;
use serde::Serialize;

use collab_store::exports::{self, Exported};
use collab_store::reads::ReadPool;
use collab_store::sql::Connection;
use collab_store::writer::Writer;

/// What an exporter reads through, records through, finds repositories in
/// and signs with: the handles it uses rather than the server's `App`, so
/// the export depends on the store and the record only.
#[derive(Clone)]
pub struct Exporter {
    pub reads: ReadPool,
    pub writer: Writer,
    pub repos_dir: PathBuf,
    pub key: Arc<SigningKey>,
}

/// How long an exporter waits after a write for more writes to the same
/// repositories before it writes git objects.
pub const DEBOUNCE: Duration = Duration::from_millis(500);

/// Objects exported per database read.
const CHUNK: i64 = 500;

/// The author name of state changes the export cannot attribute.
pub(super) const SERVER_NAME: &str = "git-collab-server";

/// One kind of object the server exports: what the shared machinery needs
/// to know of it.
pub trait ExportKind {
    /// Its table of export records.
    const KIND: exports::Kind;
    /// `issue` or `patch`, in log lines.
    const NOUN: &'static str;
    /// The label of the write that records an export.
    const RECORD_LABEL: &'static str;

    /// What the database holds of one object.
    type Detail;
    /// What an export shows, kept beside it (as JSON) so the next run
    /// appends only the difference.
    type Summary: Serialize + DeserializeOwned;

    /// The export ref of object `id`.
    fn ref_name(id: &str) -> String;

    /// The object and its counter, inside the caller's read transaction.
    fn load(c: &Connection, repo: &str, id: &str) -> anyhow::Result<(Self::Detail, i64)>;

    /// The summary to append to, from the record of an export whose tip is
    /// the ref's; `None` starts a new chain.
    fn recorded(state: &str) -> anyhow::Result<Option<Self::Summary>>;

    /// The summary to append to when the ref and the record disagree (a
    /// crash between them, a restored repository); `None` starts a new
    /// chain.
    fn unrecorded(
        git: &Repository,
        ref_name: &str,
        id: &str,
    ) -> anyhow::Result<Option<Self::Summary>>;

    /// Append to the chain at `tip` the events that take `before`
    /// (nothing: start a chain) to `detail`; returns the new tip and its
    /// summary.
    fn append_changes(
        git: &Repository,
        key: &SigningKey,
        tip: Option<Oid>,
        before: Option<Self::Summary>,
        detail: &Self::Detail,
    ) -> anyhow::Result<(Option<Oid>, Self::Summary)>;

    /// Log that a run exported `n` objects.
    fn log_exported(n: usize);

    /// Log that exporting object `id` of `repo` failed.
    fn log_failed(repo: &str, id: &str, e: &anyhow::Error);
}

/// Run one export pass on a blocking thread and log what it did.
pub(super) async fn run_blocking<K: ExportKind>(
    work: impl FnOnce() -> anyhow::Result<usize> + Send + 'static,
) {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => K::log_exported(n),
        Ok(Err(e)) => tracing::warn!("{} export: {e:#}", K::NOUN),
        Err(e) => tracing::warn!("{} export task: {e}", K::NOUN),
    }
}

/// Bring every object of kind `K` of `repo` (of every repository when
/// `None`) whose export is behind up to date; returns how many were
/// exported. An object that fails is logged and left for the next run.
/// Blocking.
pub fn export_pending<K: ExportKind>(ex: &Exporter, repo: Option<&str>) -> anyhow::Result<usize> {
    let mut done = 0;
    let mut failed = BTreeSet::new();
    loop {
        let only = repo.map(str::to_string);
        let pending = ex
            .reads
            .read_blocking(move |c| Ok(exports::pending(c, K::KIND, only.as_deref(), CHUNK)?))?;
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
                let Some(entry) = crate::repos::find_repo(&ex.repos_dir, &p.repo) else {
                    failed.insert((p.repo.clone(), p.id.clone()));
                    continue;
                };
                git = Some((p.repo.clone(), Repository::open_bare(&entry.path)?));
            }
            let (_, repository) = git.as_ref().expect("opened above");
            match export_one::<K>(ex, repository, &p.repo, &p.id) {
                Ok(()) => done += 1,
                Err(e) => {
                    K::log_failed(&p.repo, &p.id, &e);
                    failed.insert((p.repo.clone(), p.id.clone()));
                }
            }
        }
    }
}

/// Export one object: read it and its export record in one read
/// transaction, append the events for what changed, move the ref, record.
fn export_one<K: ExportKind>(
    ex: &Exporter,
    git: &Repository,
    repo: &str,
    id: &str,
) -> anyhow::Result<()> {
    let ((detail, counter), recorded) = ex
        .reads
        .read_blocking(|c| Ok((K::load(c, repo, id)?, exports::get(c, K::KIND, repo, id)?)))?;
    let ref_name = K::ref_name(id);
    let tip = store::ref_tip(git, &ref_name)?;
    let before = match (&tip, recorded) {
        (None, _) => None,
        (Some(tip), Some(rec)) if rec.tip == tip.to_string() => K::recorded(&rec.state)?,
        (Some(_), _) => K::unrecorded(git, &ref_name, id)?,
    };
    let (new_tip, after) = K::append_changes(git, &ex.key, tip, before, &detail)?;
    if new_tip != tip {
        store::compare_and_swap(git, &ref_name, tip, new_tip.expect("a tip"), "export")?;
    }
    let record = Exported {
        revision: counter,
        tip: new_tip.map(|t| t.to_string()).unwrap_or_default(),
        state: serde_json::to_string(&after)?,
    };
    let (r, i) = (repo.to_string(), id.to_string());
    tokio::runtime::Handle::current().block_on(
        ex.writer.write(K::RECORD_LABEL, move |conn, _now| {
            Ok(exports::record(conn, K::KIND, &r, &i, &record)?)
        }),
    )
}

/// An event's time from unix milliseconds.
pub(super) fn at(ms: i64) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default()
}

/// The author of an exported event: the name of who did it, the server's
/// key (every event of an export is the server's).
pub(super) fn by(server_key: &str, name: &str) -> Author {
    Author {
        name: name.to_string(),
        key: server_key.to_string(),
    }
}

/// Append `event` to the chain at `tip`; returns the new tip.
pub(super) fn write_event(
    git: &Repository,
    key: &SigningKey,
    tip: &mut Option<Oid>,
    event: &collab_record::event::Event,
) -> anyhow::Result<Oid> {
    let parents: Vec<Oid> = tip.iter().copied().collect();
    let oid = store::write_event_commit(git, &parents, event, key)?;
    *tip = Some(oid);
    Ok(oid)
}
