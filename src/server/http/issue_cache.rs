//! Replayed issues kept in memory per repository, so that showing an issues
//! page does not verify and replay unchanged issues on every request.
//!
//! A snapshot is keyed by a digest of every issue ref with its tip and of
//! the allowlist file: replay is a pure function of those, so while the
//! digest is unchanged the snapshot is exact. Computing the digest reads the
//! refs only (no object), about what `git for-each-ref` costs. When it
//! changed, `state::list_issues` runs, which itself re-replays only the
//! issues whose tip moved (the library's disk cache).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use git2::Repository;
use git_collab::refs;
use git_collab::state::{self, IssueState, IssueStatus};
use sha2::{Digest, Sha256};

/// Most repositories kept; past that the cache starts over (a page is then
/// as slow as without it, never wrong).
const MAX_REPOS: usize = 64;

/// Every valid issue of one repository at one state of its refs.
#[derive(Debug)]
pub struct IssueSnapshot {
    key: [u8; 32],
    /// Newest first, as `list_issues` returns them.
    pub issues: Vec<IssueState>,
    pub open: usize,
    pub closed: usize,
}

/// The per-repository snapshots.
#[derive(Default)]
pub struct IssueCache {
    repos: Mutex<HashMap<PathBuf, Arc<IssueSnapshot>>>,
}

impl IssueCache {
    /// The issues of `repo` as its refs are now. Blocking (git and disk).
    pub fn snapshot(&self, repo: &Repository) -> anyhow::Result<Arc<IssueSnapshot>> {
        let key = refs_digest(repo)?;
        let path = repo.path().to_path_buf();
        if let Some(hit) = self.lock().get(&path).filter(|s| s.key == key) {
            return Ok(hit.clone());
        }
        let issues = state::list_issues(repo)?;
        let open = issues
            .iter()
            .filter(|i| i.status == IssueStatus::Open)
            .count();
        let snapshot = Arc::new(IssueSnapshot {
            key,
            closed: issues.len() - open,
            open,
            issues,
        });
        let mut repos = self.lock();
        if repos.len() >= MAX_REPOS && !repos.contains_key(&path) {
            repos.clear();
        }
        repos.insert(path, snapshot.clone());
        Ok(snapshot)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<IssueSnapshot>>> {
        self.repos.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Digest of every `refs/collab/issues/*` ref with its target, and of the
/// allowlist: what a replay depends on.
fn refs_digest(repo: &Repository) -> anyhow::Result<[u8; 32]> {
    let mut tips = Vec::new();
    for reference in repo.references_glob(refs::ISSUES_GLOB)? {
        let reference = reference?;
        let Ok(name) = reference.name() else { continue };
        let target = reference
            .target()
            .map(|o| o.to_string())
            .unwrap_or_default();
        tips.push((name.to_string(), target));
    }
    // libgit2 lists loose refs before packed ones: order must not matter.
    tips.sort_unstable();
    let mut hasher = Sha256::new();
    for (name, target) in &tips {
        hasher.update(name.as_bytes());
        hasher.update(b" ");
        hasher.update(target.as_bytes());
        hasher.update(b"\n");
    }
    match std::fs::read(git_collab::trust::trust_path(repo)) {
        Ok(bytes) => {
            hasher.update(b"trust\n");
            hasher.update(&bytes);
        }
        Err(_) => hasher.update(b"no trust\n"),
    }
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use git_collab::issue::{self, Identity};
    use git_collab::sign::SigningKey;

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
        let again = cache.snapshot(&repo).unwrap();
        assert!(
            Arc::ptr_eq(&one, &again),
            "unchanged refs must reuse the snapshot"
        );

        issue::close(&repo, &who, &a, None).unwrap();
        let moved = cache.snapshot(&repo).unwrap();
        assert!(!Arc::ptr_eq(&one, &moved));
        assert_eq!((moved.open, moved.closed), (1, 1));

        // An allowlist without the author's key drops every issue.
        let other = SigningKey::generate(&dir.path().join("other"), "other", false).unwrap();
        std::fs::create_dir_all(git_collab::trust::collab_dir(&repo)).unwrap();
        std::fs::write(
            git_collab::trust::trust_path(&repo),
            format!("{}\n", other.public_key_line()),
        )
        .unwrap();
        let trusted = cache.snapshot(&repo).unwrap();
        assert!(trusted.issues.is_empty());
    }
}
