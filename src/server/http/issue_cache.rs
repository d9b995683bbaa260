//! Replayed issues kept in memory per repository, so that showing an issues
//! page does not verify and replay unchanged issues on every request.
//!
//! Replay is a pure function of an issue's DAG (named by its ref's tip) and
//! of the allowlist. A snapshot records every issue ref's tip and a digest
//! of all of them plus the allowlist file:
//! - digest unchanged: the snapshot is exact and is served as is (the cost
//!   is reading the refs, about what `git for-each-ref` costs);
//! - some tips moved, allowlist unchanged: only the issues whose tip moved
//!   (or that are new) are replayed; the rest are reused;
//! - no snapshot yet, or the allowlist changed: `state::list_all_issues`
//!   runs, which itself replays only what its disk cache does not have.
//!
//! A replay that dropped an event dated in the future holds only until the
//! clock nears that date (`replay::expires_at`): such an issue counts as
//! moved once its replay expires.
//!
//! Bounded: at most [`MAX_REPOS`] repositories and [`MAX_CACHED_BYTES`] of
//! issue text in all (past either, the cache starts over: a page is then as
//! slow as without it, never wrong); each issue's replay is bounded by the
//! library's replay limits, and an issue past them is left out of the list
//! and logged.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use git2::Repository;
use git_collab::record::refs;
use git_collab::record::replay::expires_at;
use git_collab::record::state::{self, IssueState, IssueStatus};
use git_collab::record::trust::{self, TrustList};
use sha2::{Digest, Sha256};

/// Most repositories kept.
const MAX_REPOS: usize = 64;

/// Most issue memory (by [`approx_bytes`]) kept in all snapshots
/// together; a single repository with more is served but not kept.
pub const MAX_CACHED_BYTES: usize = 256 * 1024 * 1024;

/// Every valid issue of one repository at one state of its refs.
#[derive(Debug)]
pub struct IssueSnapshot {
    /// Digest of every issue ref's tip and of the allowlist.
    key: [u8; 32],
    /// Digest of the allowlist alone.
    trust: [u8; 32],
    /// Issue id -> the tip its state was replayed from (invalid issues
    /// too), and when that replay expires.
    tips: HashMap<String, (String, Option<DateTime<Utc>>)>,
    /// The earliest expiry among `tips`.
    expires: Option<DateTime<Utc>>,
    /// About how much memory the issues hold ([`approx_bytes`]).
    bytes: usize,
    /// Newest first (ties by id), as `list_issues` returns them. Shared, so
    /// that an update reuses unchanged issues without copying them.
    pub issues: Vec<Arc<IssueState>>,
    pub open: usize,
    pub closed: usize,
}

impl IssueSnapshot {
    fn new(
        key: [u8; 32],
        trust: [u8; 32],
        tips: HashMap<String, (String, Option<DateTime<Utc>>)>,
        mut issues: Vec<Arc<IssueState>>,
    ) -> Self {
        issues.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        let open = issues
            .iter()
            .filter(|i| i.status == IssueStatus::Open)
            .count();
        let expires = tips.values().filter_map(|(_, e)| *e).min();
        let bytes = issues.iter().map(|i| approx_bytes(i)).sum();
        IssueSnapshot {
            key,
            trust,
            tips,
            expires,
            bytes,
            closed: issues.len() - open,
            open,
            issues,
        }
    }

    /// Whether this snapshot is still right for refs whose digest is `key`.
    fn holds_for(&self, key: &[u8; 32]) -> bool {
        self.key == *key && self.expires.is_none_or(|at| Utc::now() < at)
    }
}

/// The per-repository snapshots.
#[derive(Default)]
pub struct IssueCache {
    repos: Mutex<HashMap<PathBuf, Arc<IssueSnapshot>>>,
    /// One lock per repository being replayed, so that concurrent requests
    /// for a stale repository wait for one replay instead of each running
    /// their own.
    replaying: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

/// The issue refs and the allowlist as they are now.
struct RefsNow {
    /// `(ref name, issue id, tip)`, sorted.
    refs: Vec<(String, String, String)>,
    key: [u8; 32],
    trust: [u8; 32],
}

impl IssueCache {
    /// The issues of `repo` as its refs are now. Blocking (git and disk).
    pub fn snapshot(&self, repo: &Repository) -> anyhow::Result<Arc<IssueSnapshot>> {
        let now = read_refs(repo)?;
        let path = repo.path().to_path_buf();
        if let Some(hit) = self.cached(&path, &now.key) {
            return Ok(hit);
        }
        let turn = self
            .replaying
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(path.clone())
            .or_default()
            .clone();
        let _turn = turn.lock().unwrap_or_else(|e| e.into_inner());
        // Whoever held the lock before may have just replayed this state.
        if let Some(hit) = self.cached(&path, &now.key) {
            return Ok(hit);
        }
        let previous = self.lock().get(&path).cloned();
        let snapshot = Arc::new(match previous {
            Some(old) if old.trust == now.trust => update(repo, &old, now)?,
            _ => full(repo, now)?,
        });
        let mut repos = self.lock();
        repos.remove(&path);
        let kept: usize = repos.values().map(|s| s.bytes).sum();
        if repos.len() >= MAX_REPOS || kept + snapshot.bytes > MAX_CACHED_BYTES {
            repos.clear();
        }
        if snapshot.bytes <= MAX_CACHED_BYTES {
            repos.insert(path, snapshot.clone());
        }
        Ok(snapshot)
    }

    fn cached(&self, path: &Path, key: &[u8; 32]) -> Option<Arc<IssueSnapshot>> {
        self.lock().get(path).filter(|s| s.holds_for(key)).cloned()
    }

    /// Bytes kept in all snapshots (for tests).
    #[cfg(test)]
    fn kept_bytes(&self) -> usize {
        self.lock().values().map(|s| s.bytes).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<IssueSnapshot>>> {
        self.repos.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A snapshot from scratch, through the library (and its disk cache). The
/// tips recorded are those read before: if a ref moved in between, the next
/// request sees a different tip and replays that issue again.
fn full(repo: &Repository, now: RefsNow) -> anyhow::Result<IssueSnapshot> {
    let mut listed: HashMap<String, state::ListedIssue> = state::list_all_issues(repo)?
        .into_iter()
        .map(|i| (i.id.clone(), i))
        .collect();
    let mut issues = Vec::with_capacity(listed.len());
    let mut tips = HashMap::with_capacity(now.refs.len());
    for (_, id, tip) in now.refs {
        let expires = match listed.remove(&id) {
            Some(found) => {
                match found.state {
                    Ok(issue) => issues.push(Arc::new(issue)),
                    Err(reason) => log_invalid(repo, &id, &reason),
                }
                found.expires
            }
            None => None,
        };
        tips.insert(id, (tip, expires));
    }
    Ok(IssueSnapshot::new(now.key, now.trust, tips, issues))
}

/// About how much memory one replayed issue holds: its strings and a fixed
/// cost per issue and per comment.
fn approx_bytes(i: &IssueState) -> usize {
    let author = |a: &state::Author| a.name.len() + a.key.len();
    256 + i.id.len()
        + i.title.len()
        + i.body.len()
        + author(&i.author)
        + i.closed_reason.as_ref().map_or(0, String::len)
        + i.labels.iter().map(|l| l.len() + 24).sum::<usize>()
        + i.comments
            .iter()
            .map(|c| 128 + c.id.len() + c.body.len() + author(&c.author))
            .sum::<usize>()
}

/// An issue left out of the list because its DAG is past the replay limits
/// is worth a line in the log (a dropped root is `verify`'s business).
fn log_invalid(repo: &Repository, id: &str, reason: &str) {
    if state::is_over_limits(reason) {
        tracing::warn!(repo = %repo.path().display(), issue = id, "issue not replayed: {reason}");
    }
}

/// `old` brought up to date: issues whose tip did not move are reused, the
/// others replayed (same allowlist).
fn update(repo: &Repository, old: &IssueSnapshot, now: RefsNow) -> anyhow::Result<IssueSnapshot> {
    let trust = TrustList::load(repo)?;
    let mut kept: HashMap<&str, &Arc<IssueState>> =
        old.issues.iter().map(|i| (i.id.as_str(), i)).collect();
    let mut issues = Vec::with_capacity(now.refs.len());
    let mut tips = HashMap::with_capacity(now.refs.len());
    let clock = Utc::now();
    for (name, id, tip) in now.refs {
        match old.tips.get(&id) {
            Some((old_tip, expires)) if *old_tip == tip && expires.is_none_or(|at| clock < at) => {
                // Unchanged; an invalid issue stays out of the list.
                if let Some(state) = kept.remove(id.as_str()) {
                    issues.push(state.clone());
                }
                tips.insert(id, (tip, *expires));
            }
            _ => {
                let replay = state::replay_ref(repo, &name, &id, trust.as_ref())?;
                match replay.state {
                    Ok(state) => issues.push(Arc::new(state)),
                    Err(reason) => log_invalid(repo, &id, &reason),
                }
                tips.insert(id, (tip, expires_at(&replay.dropped)));
            }
        }
    }
    Ok(IssueSnapshot::new(now.key, now.trust, tips, issues))
}

/// Every `refs/collab/issues/*` ref with its tip, and the digests.
fn read_refs(repo: &Repository) -> anyhow::Result<RefsNow> {
    let mut refs = Vec::new();
    for reference in repo.references_glob(refs::ISSUES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        let Some(id) = refs::issue_id_of(name) else {
            continue;
        };
        let tip = reference
            .target()
            .map(|o| o.to_string())
            .unwrap_or_default();
        refs.push((name.to_string(), id.to_string(), tip));
    }
    // libgit2 lists loose refs before packed ones: order must not matter.
    refs.sort_unstable();
    let mut trust = Sha256::new();
    match std::fs::read(trust::trust_path(repo)) {
        Ok(bytes) => {
            trust.update(b"trust\n");
            trust.update(&bytes);
        }
        Err(_) => trust.update(b"no trust\n"),
    }
    let trust: [u8; 32] = trust.finalize().into();
    let mut key = Sha256::new();
    for (name, _, tip) in &refs {
        key.update(name.as_bytes());
        key.update(b" ");
        key.update(tip.as_bytes());
        key.update(b"\n");
    }
    key.update(trust);
    Ok(RefsNow {
        refs,
        key: key.finalize().into(),
        trust,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use git_collab::client::issue::{self, Identity};
    use git_collab::record::sign::SigningKey;

    #[test]
    fn reuses_a_snapshot_until_an_issue_ref_or_the_allowlist_changes() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let who = Identity {
            key: SigningKey::generate(&dir.path().join("k"), "k", false).unwrap(),
            name: "n".into(),
        };
        let a = issue::open(&repo, &who, "first", "", &[]).unwrap().issue;
        issue::open(&repo, &who, "second", "", &[]).unwrap();
        let cache = IssueCache::default();

        let one = cache.snapshot(&repo).unwrap();
        assert_eq!((one.open, one.closed, one.issues.len()), (2, 0, 2));
        assert_eq!(cache.kept_bytes(), one.bytes);
        assert!(one.bytes > 2 * 256 && one.bytes < MAX_CACHED_BYTES);
        let again = cache.snapshot(&repo).unwrap();
        assert!(
            Arc::ptr_eq(&one, &again),
            "unchanged refs must reuse the snapshot"
        );

        // Moved, new and deleted refs: the incremental update agrees with a
        // full replay.
        issue::close(&repo, &who, &a, None).unwrap();
        let moved = cache.snapshot(&repo).unwrap();
        assert!(!Arc::ptr_eq(&one, &moved));
        assert_eq!((moved.open, moved.closed), (1, 1));
        let full = |repo: &Repository| -> Vec<Arc<IssueState>> {
            state::list_issues(repo)
                .unwrap()
                .into_iter()
                .map(Arc::new)
                .collect()
        };
        assert_eq!(moved.issues, full(&repo));
        let c = issue::open(&repo, &who, "third", "", &[]).unwrap().issue;
        issue::comment(&repo, &who, &c, "hello").unwrap();
        let added = cache.snapshot(&repo).unwrap();
        assert_eq!(added.issues.len(), 3);
        assert_eq!(added.issues, full(&repo));
        repo.find_reference(&refs::issue_ref(&a))
            .unwrap()
            .delete()
            .unwrap();
        let deleted = cache.snapshot(&repo).unwrap();
        assert_eq!((deleted.open, deleted.closed), (2, 0));
        assert_eq!(deleted.issues, full(&repo));

        // An allowlist without the author's key drops every issue.
        let other = SigningKey::generate(&dir.path().join("other"), "other", false).unwrap();
        std::fs::create_dir_all(git_collab::record::trust::collab_dir(&repo)).unwrap();
        std::fs::write(
            git_collab::record::trust::trust_path(&repo),
            format!("{}\n", other.public_key_line()),
        )
        .unwrap();
        let trusted = cache.snapshot(&repo).unwrap();
        assert!(trusted.issues.is_empty());
    }
}
