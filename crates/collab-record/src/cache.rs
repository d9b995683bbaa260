//! A disk cache of replayed issues, `$GIT_DIR/collab/cache/issues-v1.json`,
//! so that `list_issues` re-verifies only the issues whose DAG changed.
//! Replay is a pure function of the DAG and the allowlist, so an entry is
//! keyed by the issue ref's tip; the whole file is also keyed by the
//! allowlist's digest and the crate version, and is ignored when either
//! differs. The cache is an optimisation only: an unreadable, stale or
//! unwritable cache is silently rebuilt or skipped. `verify` never reads it.
//!
//! An entry holds its replayed state as the caller's type (`state` stores
//! `IssueState`), so this module knows nothing of issues and `state` sits
//! above it. The cache's test is `cache_tests.rs`, beside the issue
//! operations it writes with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use git2::Repository;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::replay::DroppedEvent;
use crate::trust;

/// The replay of one issue at one tip (`S`: `state::IssueState`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Entry<S> {
    pub tip: String,
    /// `Ok(state)` or `Err(why the issue is invalid)`.
    pub state: Result<S, String>,
    pub dropped: Vec<DroppedEvent>,
    pub events: usize,
}

#[derive(Debug, Serialize, Deserialize)]
struct CacheFile<S> {
    version: String,
    trust: String,
    issues: BTreeMap<String, Entry<S>>,
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
pub(crate) fn load<S: DeserializeOwned>(
    repo: &Repository,
    key: &(String, String),
) -> BTreeMap<String, Entry<S>> {
    let Ok(bytes) = std::fs::read(cache_path(repo)) else {
        return BTreeMap::new();
    };
    match serde_json::from_slice::<CacheFile<S>>(&bytes) {
        Ok(file) if file.version == key.0 && file.trust == key.1 => file.issues,
        _ => BTreeMap::new(),
    }
}

/// Replaces the cache (temporary file, then rename: readers never see a
/// partial file). Failures are ignored: the cache is only an optimisation.
pub(crate) fn save<S: Serialize>(
    repo: &Repository,
    key: &(String, String),
    issues: BTreeMap<String, Entry<S>>,
) {
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
