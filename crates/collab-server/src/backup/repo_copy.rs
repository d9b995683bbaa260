//! A consistent copy of one bare repository while pushes continue.
//!
//! Order is what makes it consistent: first take the repository's
//! maintenance lock (no repack or prune can delete an object file until we
//! are done), then read every ref once (`git for-each-ref`), then copy the
//! object files. Git writes an object before any ref that points at it (a
//! push moves its quarantined objects into place before it updates refs),
//! and with the lock held nothing removes object files, so every object
//! reachable from the refs we read is in the object store while we copy it.
//! Objects of pushes that land during the copy may or may not come along;
//! their refs do not, so the copy is the repository as of the ref read,
//! plus possibly some unreferenced objects.
//!
//! The refs go into the copy as one `packed-refs` file; the live `refs/`,
//! `packed-refs` and reflogs are not copied (they may be newer than the ref
//! read). Skipped as well: lock files, push quarantines and half-written
//! packs, `.keep` files (a push keeps its pack while it updates refs), a
//! pack without its index (still arriving), and the issue cache (derived).
//! Everything else in the repository directory comes along as is: objects,
//! packs with their indexes, bitmaps and multi-pack index, commit-graphs,
//! `HEAD`, `config`, `collab-policy.toml`, `collab/trusted_keys`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::manifest::walk_files;
use crate::maintenance::git::{git, output};
use crate::maintenance::lock::{RepoLock, LOCK_FILE};
use crate::maintenance::quarantine::{is_quarantine, is_temp_pack};

/// The ref read of one repository.
pub struct RefSnapshot {
    /// `<oid> <refname>` per ref, sorted by name.
    pub lines: Vec<String>,
    /// `HEAD` as the file holds it (`ref: refs/heads/main`).
    pub head: String,
}

impl RefSnapshot {
    /// The `packed-refs` file that restores these refs.
    pub fn packed_refs(&self) -> String {
        let mut text = String::from("# pack-refs with: sorted \n");
        for line in &self.lines {
            text.push_str(line);
            text.push('\n');
        }
        text
    }
}

/// Read every ref of `repo_dir` and its `HEAD`.
pub fn read_refs(repo_dir: &Path) -> anyhow::Result<RefSnapshot> {
    let out = output(git(repo_dir).args(["for-each-ref", "--format=%(objectname) %(refname)"]))?;
    let text = String::from_utf8(out).context("ref names are not UTF-8")?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines.sort_by(|a, b| {
        a.split_once(' ')
            .map(|x| x.1)
            .cmp(&b.split_once(' ').map(|x| x.1))
    });
    let head = std::fs::read_to_string(repo_dir.join("HEAD"))
        .with_context(|| format!("reading {}/HEAD", repo_dir.display()))?
        .trim_end()
        .to_string();
    Ok(RefSnapshot { lines, head })
}

/// Whether the path `rel` inside a repository is left out of a copy.
fn skipped(rel: &Path, is_dir: bool) -> bool {
    let parts: Vec<&str> = rel.iter().filter_map(|p| p.to_str()).collect();
    let Some(name) = parts.last() else {
        return false;
    };
    if parts.len() != rel.iter().count() {
        return true; // non-UTF-8 names are never git's
    }
    if name.ends_with(".lock") || *name == LOCK_FILE || name.ends_with(".keep") {
        return true;
    }
    match parts.as_slice() {
        ["refs", ..] | ["packed-refs"] | ["logs", ..] => true,
        ["collab", "cache", ..] => true,
        ["objects", entry] if is_dir && is_quarantine(entry) => true,
        ["objects", entry, ..] if is_quarantine(entry) => true,
        ["objects", "pack", entry] => is_temp_pack(entry),
        // A loose object being written, not yet renamed into place: by
        // libgit2 (`objects/tmp_object_git2_*`, the issue and patch
        // exporters write this way without the repository's lock) or by
        // git (`objects/ab/tmp_obj_*`). No ref read before it can name it,
        // and it may vanish before it is read.
        ["objects", entry] if !is_dir && entry.starts_with("tmp_") => true,
        ["objects", _, entry] if entry.starts_with("tmp_obj") => true,
        _ => false,
    }
}

/// The files of `repo_dir` a copy takes, relative to it (the caller holds
/// the repository's lock). A pack file is taken only with its index, and
/// the index and its companions only with the pack.
pub fn files_to_copy(repo_dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let files = walk_files(repo_dir, &skipped)
        .with_context(|| format!("listing {}", repo_dir.display()))?;
    let pack_dir = Path::new("objects").join("pack");
    let present: BTreeSet<&Path> = files.iter().map(PathBuf::as_path).collect();
    let complete = |stem: &str| {
        present.contains(pack_dir.join(format!("{stem}.pack")).as_path())
            && present.contains(pack_dir.join(format!("{stem}.idx")).as_path())
    };
    Ok(files
        .iter()
        .filter(|rel| {
            if rel.parent() != Some(pack_dir.as_path()) {
                return true;
            }
            let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
            match name.split_once('.') {
                Some((stem, _)) if stem.starts_with("pack-") => complete(stem),
                _ => true,
            }
        })
        .cloned()
        .collect())
}

/// The directories a bare repository needs even when empty (a manifest
/// lists only files).
pub const SKELETON: [&str; 4] = ["refs/heads", "refs/tags", "objects/info", "objects/pack"];

/// Make the empty directories of a repository copy (`mode` before the
/// umask: 0700 in a backup, 0777 in a restored repository).
pub fn make_skeleton(repo_copy: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    for dir in SKELETON {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(repo_copy.join(dir))?;
    }
    Ok(())
}

/// Take the lock and the ref read of `repo_dir`; the caller copies
/// `files_to_copy` while the returned lock is held.
pub fn begin(repo_dir: &Path) -> anyhow::Result<(RepoLock, RefSnapshot)> {
    let lock =
        RepoLock::acquire(repo_dir).with_context(|| format!("locking {}", repo_dir.display()))?;
    let refs = read_refs(repo_dir)?;
    Ok((lock, refs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_live_refs_locks_and_leftovers() {
        for (path, dir, skip) in [
            ("refs/heads/main", false, true),
            ("packed-refs", false, true),
            ("logs/HEAD", false, true),
            ("HEAD", false, false),
            ("config", false, false),
            ("collab-policy.toml", false, false),
            ("collab/trusted_keys", false, false),
            ("collab/cache", true, true),
            ("collab-maintenance.lock", false, true),
            ("objects/ab/cdef", false, false),
            ("objects/tmp_objdir-incoming-x", true, true),
            ("objects/pack/pack-1.pack", false, false),
            ("objects/pack/pack-1.keep", false, true),
            ("objects/pack/tmp_pack_x", false, true),
            ("objects/tmp_object_git2_e7ca7925cf923663", false, true),
            ("objects/ab/tmp_obj_Xy12", false, true),
            ("objects/pack/.tmp-1-pack", false, true),
            ("objects/info/commit-graph", false, false),
            ("config.lock", false, true),
        ] {
            assert_eq!(skipped(Path::new(path), dir), skip, "{path}");
        }
    }

    #[test]
    fn a_pack_without_its_index_is_left_out() {
        let repo = tempfile::tempdir().unwrap();
        let pack = repo.path().join("objects/pack");
        std::fs::create_dir_all(&pack).unwrap();
        for name in [
            "pack-a.pack",
            "pack-a.idx",
            "pack-a.bitmap",
            "pack-b.pack",
            "multi-pack-index",
        ] {
            std::fs::write(pack.join(name), b"x").unwrap();
        }
        let files = files_to_copy(repo.path()).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(
            names,
            [
                "multi-pack-index",
                "pack-a.bitmap",
                "pack-a.idx",
                "pack-a.pack"
            ]
        );
    }
}
