//! The sweep of leftovers of killed git processes (`quarantine`) over every
//! repository: once when the server starts, then every [`SWEEP_EVERY`], on
//! a blocking thread. A push that git itself ends (refused by a hook, a
//! client that hung up) removes its own quarantine; what is left comes
//! from git processes killed outright (the server or its children
//! SIGKILLed, the OOM killer), and this is what removes it.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::lock::RepoLock;
use super::quarantine::{prune_leftovers, DEFAULT_MAX_AGE};
use crate::shutdown::Stop;

/// How often the sweep runs after the first one at start.
pub const SWEEP_EVERY: Duration = Duration::from_secs(15 * 60);

/// Sweep now, then every [`SWEEP_EVERY`], until `stopping` fires.
pub async fn run(repos_dir: PathBuf, stopping: Stop) {
    loop {
        let dir = repos_dir.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || sweep_all(&dir)).await {
            tracing::warn!("leftover sweep failed: {e}");
        }
        tokio::select! {
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stopping.clone().wait() => return,
        }
    }
}

/// Remove the leftovers older than `DEFAULT_MAX_AGE` in every repository;
/// returns how many were removed in all.
pub fn sweep_all(repos_dir: &std::path::Path) -> usize {
    let now = SystemTime::now();
    let mut total = 0;
    for repo in crate::repos::list_repos(repos_dir) {
        // A maintenance run or a backup holding the repository's lock does
        // this itself, or must not see files vanish: skip it this time.
        let _lock = match RepoLock::try_acquire(&repo.path) {
            Ok(Some(lock)) => lock,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(repo = repo.name, "locking for the leftover sweep: {e}");
                continue;
            }
        };
        match prune_leftovers(&repo.path, DEFAULT_MAX_AGE, now) {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(
                    repo = repo.name,
                    "removed {n} leftovers of killed git processes"
                );
                total += n;
            }
            Err(e) => tracing::warn!(repo = repo.name, "removing leftovers: {e}"),
        }
    }
    total
}
