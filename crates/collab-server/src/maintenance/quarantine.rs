//! Leftovers of killed git processes inside a repository's object store:
//! the quarantine directories of pushes that never finished
//! (`objects/tmp_objdir-incoming-*`, where `git receive-pack` keeps a
//! push's objects until its hooks accept it) and the temporary packs of a
//! killed `index-pack` or `repack` (`objects/pack/tmp_*`, `.tmp-*`).
//!
//! A live push keeps writing into its quarantine, so only entries whose
//! newest file is older than `max_age` are removed; the server's own
//! pushes are bounded in time far below [`DEFAULT_MAX_AGE`]. This is the
//! one function for it: maintenance calls it per repository, and startup
//! clean-up may call it for every repository.

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How old a leftover must be before it is removed.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(60 * 60);

/// Remove the quarantine and temporary-pack leftovers in `repo_dir` whose
/// newest modification is older than `max_age` before `now`. Returns how
/// many entries were removed. Entries that vanish meanwhile are not errors.
pub fn prune_leftovers(repo_dir: &Path, max_age: Duration, now: SystemTime) -> io::Result<usize> {
    let mut removed = 0;
    let objects = repo_dir.join("objects");
    for (dir, is_leftover) in [
        (objects.clone(), is_quarantine as fn(&str) -> bool),
        (objects.join("pack"), is_temp_pack),
    ] {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if !is_leftover(name) {
                continue;
            }
            let path = entry.path();
            let Some(newest) = newest_mtime(&path) else {
                continue;
            };
            if now.duration_since(newest).unwrap_or_default() < max_age {
                continue;
            }
            let result = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match result {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(removed)
}

/// `tmp_objdir-incoming-XXXXXX`: git's push quarantine directory.
pub fn is_quarantine(name: &str) -> bool {
    name.starts_with("tmp_objdir-")
}

/// `tmp_pack_XXXXXX`, `tmp_idx_XXXXXX`, `.tmp-NNN-pack-*`: a pack still
/// (or forever, if its writer died) being written.
pub fn is_temp_pack(name: &str) -> bool {
    name.starts_with("tmp_") || name.starts_with(".tmp-")
}

/// The newest modification time of `path` and everything under it (a
/// directory's own mtime only moves when entries are added or removed).
fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mut newest = meta.modified().ok()?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).ok()?.flatten() {
            if let Some(t) = newest_mtime(&entry.path()) {
                newest = newest.max(t);
            }
        }
    }
    Some(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_only_old_leftovers() {
        let repo = tempfile::tempdir().unwrap();
        let objects = repo.path().join("objects");
        let old = objects.join("tmp_objdir-incoming-old");
        let fresh = objects.join("tmp_objdir-incoming-new");
        std::fs::create_dir_all(old.join("pack")).unwrap();
        std::fs::create_dir_all(&fresh).unwrap();
        std::fs::write(old.join("pack/tmp_pack_1"), b"x").unwrap();
        std::fs::write(fresh.join("obj"), b"x").unwrap();
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        std::fs::write(objects.join("pack/tmp_pack_abc"), b"x").unwrap();
        std::fs::write(objects.join("pack/pack-1.pack"), b"x").unwrap();
        std::fs::create_dir_all(objects.join("ab")).unwrap();

        // Nothing is old yet.
        let now = SystemTime::now();
        assert_eq!(
            prune_leftovers(repo.path(), DEFAULT_MAX_AGE, now).unwrap(),
            0
        );
        // Two hours later every leftover is stale, real objects stay.
        let later = now + Duration::from_secs(2 * 60 * 60);
        assert_eq!(
            prune_leftovers(repo.path(), DEFAULT_MAX_AGE, later).unwrap(),
            3
        );
        assert!(!old.exists() && !fresh.exists());
        assert!(objects.join("pack/pack-1.pack").exists());
        assert!(objects.join("ab").is_dir());
    }
}
