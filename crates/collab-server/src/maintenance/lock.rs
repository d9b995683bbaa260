//! The per-repository maintenance lock: an advisory `flock(2)` on
//! `<repo>/collab-maintenance.lock`. Whoever rewrites or deletes object
//! files in a repository (a maintenance run) or needs them to stay put
//! (a backup copying them) holds it, so the two never overlap. It is a
//! file lock rather than an in-process mutex because `git-collab-server
//! backup` runs as its own process beside the server. Pushes and clones
//! never take it: git's own lock files and atomic renames keep them safe
//! beside a repack (see docs/operations.md).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

/// The lock file's name inside a bare repository. Backups skip it.
pub const LOCK_FILE: &str = "collab-maintenance.lock";

/// A held lock; released when dropped (closing the file drops the flock).
#[derive(Debug)]
pub struct RepoLock {
    _file: File,
}

impl RepoLock {
    /// Take the lock, waiting for a holder to finish.
    pub fn acquire(repo_dir: &Path) -> io::Result<RepoLock> {
        Self::take(repo_dir, true).map(|held| held.expect("a blocking flock returns held"))
    }

    /// Take the lock if nobody holds it; `Ok(None)` if somebody does.
    pub fn try_acquire(repo_dir: &Path) -> io::Result<Option<RepoLock>> {
        Self::take(repo_dir, false)
    }

    fn take(repo_dir: &Path, wait: bool) -> io::Result<Option<RepoLock>> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(repo_dir.join(LOCK_FILE))?;
        let held = crate::flock::lock(&file, crate::flock::Mode::Exclusive, wait)?;
        Ok(held.then_some(RepoLock { _file: file }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_waits_or_is_told_busy() {
        let dir = tempfile::tempdir().unwrap();
        let held = RepoLock::acquire(dir.path()).unwrap();
        assert!(RepoLock::try_acquire(dir.path()).unwrap().is_none());
        drop(held);
        assert!(RepoLock::try_acquire(dir.path()).unwrap().is_some());
    }
}
