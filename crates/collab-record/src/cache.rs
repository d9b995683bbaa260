//! A disk cache of replayed issues, `$GIT_DIR/collab/cache/issues-v1.json`,
//! so that `list_issues` re-verifies only the issues whose DAG changed.
//! Replay is a pure function of the DAG and the allowlist, so an entry is
//! keyed by the issue ref's tip; the whole file is also keyed by the
//! allowlist's digest and the crate version, and is ignored when either
//! differs. The cache is an optimisation only: an unreadable, stale or
//! unwritable cache is silently rebuilt or skipped. `verify` never reads it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use git2::Repository;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::replay::DroppedEvent;
use crate::state::IssueState;
use crate::trust;

/// The replay of one issue at one tip.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub tip: String,
    /// `Ok(state)` or `Err(why the issue is invalid)`.
    pub state: Result<IssueState, String>,
    pub dropped: Vec<DroppedEvent>,
    pub events: usize,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CacheFile {
    version: String,
    trust: String,
    issues: BTreeMap<String, Entry>,
}

/// The cache file of `repo`.
pub fn cache_path(repo: &Repository) -> PathBuf {
    trust::collab_dir(repo).join("cache").join("issues-v1.json")
}

/// What a cache is valid for: this crate version and this allowlist.
pub(crate) fn fingerprint(repo: &Repository) -> (String, String) {
    let trust = match std::fs::read(trust::trust_path(repo)) {
        Ok(bytes) => hex::encode(Sha256::digest(&bytes)),
        Err(_) => "none".to_string(),
    };
    (env!("CARGO_PKG_VERSION").to_string(), trust)
}

/// The cached entries, or none if the cache is missing, unreadable or for
/// another version or allowlist.
pub(crate) fn load(repo: &Repository, key: &(String, String)) -> BTreeMap<String, Entry> {
    let Ok(bytes) = std::fs::read(cache_path(repo)) else {
        return BTreeMap::new();
    };
    match serde_json::from_slice::<CacheFile>(&bytes) {
        Ok(file) if file.version == key.0 && file.trust == key.1 => file.issues,
        _ => BTreeMap::new(),
    }
}

/// Replaces the cache (temporary file, then rename: readers never see a
/// partial file). Failures are ignored: the cache is only an optimisation.
pub(crate) fn save(repo: &Repository, key: &(String, String), issues: BTreeMap<String, Entry>) {
    let path = cache_path(repo);
    let file = CacheFile {
        version: key.0.clone(),
        trust: key.1.clone(),
        issues,
    };
    let Some(dir) = path.parent() else { return };
    // Unique per process and per call: threads of one server may save at
    // the same time, and each must rename a file it alone wrote.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".issues-v1.json.{}.{n}", std::process::id()));
    let written = std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&tmp, serde_json::to_vec(&file).unwrap_or_default()))
        .and_then(|_| std::fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issue::{self, Identity};
    use crate::sign::SigningKey;
    use crate::state::list_issues;

    #[test]
    fn list_issues_reuses_entries_until_the_tip_or_the_allowlist_changes() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path().join("r.git")).unwrap();
        let who = Identity {
            key: SigningKey::generate(&dir.path().join("k"), "k", false).unwrap(),
            name: "n".into(),
        };
        let a = issue::open(&repo, &who, "first", "", &[]).unwrap().issue;
        let b = issue::open(&repo, &who, "second", "", &[]).unwrap().issue;
        assert_eq!(list_issues(&repo).unwrap().len(), 2);
        assert!(cache_path(&repo).exists());

        // Prove that entries are served from the cache: doctor one.
        let key = fingerprint(&repo);
        let mut entries = load(&repo, &key);
        entries.get_mut(&a).unwrap().state.as_mut().unwrap().title = "from cache".into();
        save(&repo, &key, entries);
        let titles = |repo: &Repository| -> Vec<String> {
            let mut t: Vec<String> = list_issues(repo)
                .unwrap()
                .into_iter()
                .map(|i| i.title)
                .collect();
            t.sort();
            t
        };
        assert_eq!(titles(&repo), vec!["from cache", "second"]);

        // A new event moves the tip: that issue is replayed again.
        issue::comment(&repo, &who, &a, "c").unwrap();
        assert_eq!(titles(&repo), vec!["first", "second"]);

        // A changed allowlist invalidates everything.
        let mut entries = load(&repo, &key);
        entries.get_mut(&b).unwrap().state.as_mut().unwrap().title = "stale".into();
        save(&repo, &key, entries);
        assert_eq!(titles(&repo), vec!["first", "stale"]);
        std::fs::create_dir_all(trust::collab_dir(&repo)).unwrap();
        std::fs::write(
            trust::trust_path(&repo),
            format!("{}\n", who.key.public_key_line()),
        )
        .unwrap();
        assert_eq!(titles(&repo), vec!["first", "second"]);

        // A corrupt cache is rebuilt.
        std::fs::write(cache_path(&repo), b"{garbage").unwrap();
        assert_eq!(titles(&repo), vec!["first", "second"]);
    }
}
