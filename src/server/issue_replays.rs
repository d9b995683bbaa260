//! One replay at a time per issue, and the outcome of the last replay of
//! each issue, for the verbs that need one issue's state (`collab-lease
//! acquire` needs it open).
//!
//! Replaying verifies every event of the DAG, so N concurrent acquires of
//! the same large issue must not run N replays: requests for the same
//! `(repository, issue ref)` wait for the one replay in progress and take
//! its outcome ("coalesced"). Outcomes are kept keyed by the ref's tip and
//! the allowlist's digest, so a repeated request for an unchanged issue
//! replays nothing; an outcome that depends on the clock (an event dated in
//! the future, see `replay::expires_at`) is kept only until it expires.
//! Both maps are bounded ([`MAX_OUTCOMES`]); an outcome is a status and a
//! short reason, never the issue's text.
//!
//! The DAG itself is bounded by the library (`record::store::read_dag`):
//! one replay reads at most `MAX_DAG_COMMITS` commits and
//! `MAX_DAG_EVENT_BYTES` of events.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use git2::{Oid, Repository};
use git_collab::record::replay::expires_at;
use git_collab::record::state::{self, IssueStatus};
use git_collab::record::trust::{self, TrustList};
use sha2::{Digest, Sha256};

/// Most outcomes kept; past that the map starts over (a request then
/// replays again, never sees a wrong outcome).
pub const MAX_OUTCOMES: usize = 4096;

/// What one replay of an issue found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IssueOutcome {
    Open,
    Closed,
    /// The issue cannot be shown: its root was dropped, or its DAG is past
    /// the replay limits (`state::is_over_limits(reason)`).
    Invalid(String),
}

/// Which issue: its repository's git directory and its ref.
type Key = (PathBuf, String);

/// An outcome and what it holds for.
struct Kept {
    tip: Oid,
    trust: [u8; 32],
    expires: Option<DateTime<Utc>>,
    outcome: IssueOutcome,
}

/// The coalescing replayer, shared by every connection (`App::replays`).
#[derive(Default)]
pub struct IssueReplays {
    outcomes: Mutex<HashMap<Key, Kept>>,
    /// One lock per issue being replayed right now.
    running: Mutex<HashMap<Key, Arc<Mutex<()>>>>,
}

impl IssueReplays {
    /// The outcome of replaying the issue at `ref_name` (root `full_id`) of
    /// `repo` as its ref and allowlist are now. Blocking: call it from a
    /// blocking thread.
    pub fn outcome(
        &self,
        repo: &Repository,
        ref_name: &str,
        full_id: &str,
    ) -> git_collab::Result<IssueOutcome> {
        let key: Key = (repo.path().to_path_buf(), ref_name.to_string());
        let tip = git_collab::record::store::ref_tip(repo, ref_name)?
            .ok_or_else(|| git_collab::Error::IssueNotFound(full_id.to_string()))?;
        let digest = trust_digest(repo);
        if let Some(hit) = self.kept(&key, tip, &digest) {
            return Ok(hit);
        }
        let turn = lock(&self.running).entry(key.clone()).or_default().clone();
        let result = {
            let _turn = lock(&turn);
            // Whoever held the turn before may have replayed this very state.
            match self.kept(&key, tip, &digest) {
                Some(hit) => Ok(hit),
                None => self.replay(repo, &key, tip, digest, full_id),
            }
        };
        let mut running = lock(&self.running);
        // The last one out removes the lock (ours, the map's: 2).
        if Arc::strong_count(&turn) == 2 {
            running.remove(&key);
        }
        result
    }

    fn kept(&self, key: &Key, tip: Oid, trust: &[u8; 32]) -> Option<IssueOutcome> {
        let now = Utc::now();
        lock(&self.outcomes)
            .get(key)
            .filter(|k| k.tip == tip && k.trust == *trust)
            .filter(|k| k.expires.is_none_or(|at| now < at))
            .map(|k| k.outcome.clone())
    }

    fn replay(
        &self,
        repo: &Repository,
        key: &Key,
        tip: Oid,
        digest: [u8; 32],
        full_id: &str,
    ) -> git_collab::Result<IssueOutcome> {
        let allowlist = TrustList::load(repo)?;
        let replay = state::replay_ref(repo, &key.1, full_id, allowlist.as_ref())?;
        let outcome = match &replay.state {
            Ok(issue) if issue.status == IssueStatus::Open => IssueOutcome::Open,
            Ok(_) => IssueOutcome::Closed,
            Err(reason) => {
                if state::is_over_limits(reason) {
                    tracing::warn!(
                        repo = %repo.path().display(),
                        issue = full_id,
                        "issue not replayed: {reason}"
                    );
                }
                IssueOutcome::Invalid(reason.clone())
            }
        };
        let mut outcomes = lock(&self.outcomes);
        if outcomes.len() >= MAX_OUTCOMES && !outcomes.contains_key(key) {
            outcomes.clear();
        }
        // The replay ran against the tip it read itself; keep it only if
        // that is the tip this request saw.
        if replay.tip == tip {
            outcomes.insert(
                key.clone(),
                Kept {
                    tip,
                    trust: digest,
                    expires: expires_at(&replay.dropped),
                    outcome: outcome.clone(),
                },
            );
        }
        Ok(outcome)
    }
}

/// Digest of the allowlist file (or of its absence).
fn trust_digest(repo: &Repository) -> [u8; 32] {
    let mut digest = Sha256::new();
    match std::fs::read(trust::trust_path(repo)) {
        Ok(bytes) => {
            digest.update(b"trust\n");
            digest.update(&bytes);
        }
        Err(_) => digest.update(b"no trust\n"),
    }
    digest.finalize().into()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves a map that is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use git_collab::client::issue::{self, Identity};
    use git_collab::record::refs;
    use git_collab::record::sign::SigningKey;

    #[test]
    fn outcomes_follow_the_tip_and_concurrent_requests_share_one_replay() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let who = Identity {
            key: SigningKey::generate(&dir.path().join("k"), "k", false).unwrap(),
            name: "n".into(),
        };
        let id = issue::open(&repo, &who, "t", "", &[]).unwrap().issue;
        let name = refs::issue_ref(&id);
        let replays = IssueReplays::default();
        assert_eq!(
            replays.outcome(&repo, &name, &id).unwrap(),
            IssueOutcome::Open
        );
        issue::close(&repo, &who, &id, None).unwrap();
        assert_eq!(
            replays.outcome(&repo, &name, &id).unwrap(),
            IssueOutcome::Closed
        );

        // Many threads at once: every one gets the outcome, and no lock is
        // left behind.
        issue::reopen(&repo, &who, &id).unwrap();
        let path = repo.path().to_path_buf();
        std::thread::scope(|scope| {
            for _ in 0..8 {
                let (replays, path, name, id) = (&replays, &path, &name, &id);
                scope.spawn(move || {
                    let repo = Repository::open_bare(path).unwrap();
                    assert_eq!(
                        replays.outcome(&repo, name, id).unwrap(),
                        IssueOutcome::Open
                    );
                });
            }
        });
        assert!(lock(&replays.running).is_empty());
        assert_eq!(lock(&replays.outcomes).len(), 1);
    }
}
