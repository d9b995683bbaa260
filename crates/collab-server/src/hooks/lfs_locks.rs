//! git-lfs file locks held in the push: a push that changes a path of the
//! repository locked by someone else (`git lfs lock`, the `lfs_locks`
//! rows of `ssh::lfs_locks`) is refused whole, with one line naming the
//! path, the lock's owner and how the lock is given back. git-lfs checks
//! this on the client too, but only with `lfs.locksverify` on, and a
//! client without git-lfs (or `git push --no-verify`) does not check at
//! all: the server decides. The lock owner's own pushes pass.
//!
//! "Changes" is git's own sense: a commit the push brings changes a path
//! when the path's entry (blob id or mode, or its presence) differs from
//! that in every parent (a merge taking one side's version unchanged does
//! not change it; a root commit changes every path it has). Only the
//! commits the repository does not have yet are looked at (one walk for
//! the whole push, every existing ref hidden), and the work is bounded:
//! at most [`MAX_LOOKUPS`] (commit, locked path) pairs, else the push is
//! refused asking for smaller pushes (docs/security.md's limits table).

use std::collections::HashSet;

use git2::{Oid, Repository};

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;
use collab_store::lfs_locks::{self, Lock};

/// The most (new commit, path locked by another) pairs one push's check
/// compares; each is one tree lookup per parent.
pub const MAX_LOOKUPS: usize = 1_000_000;

/// The refusal of a push changing `lock`'s path in `commit`.
pub fn refusal(lock: &Lock, commit: Oid) -> String {
    format!(
        "{path}: locked by {owner} (git lfs lock, id {id}) and commit {short} changes it; \
         ask {owner} to run `git lfs unlock {path}` (an administrator may run \
         `git lfs unlock --force {path}`); nothing was changed",
        path = lock.path,
        owner = lock.owner,
        id = lock.id,
        short = &commit.to_string()[..12],
    )
}

pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let pushed: Vec<Oid> = updates.iter().filter_map(|u| u.new).collect();
    if pushed.is_empty() {
        return Ok(());
    }
    let conn = collab_store::open_reader(&ctx.collab_db)
        .map_err(|e| Refusal::one(format!("push refused: cannot read the LFS locks: {e}")))?;
    let locks = lfs_locks::held_by_others(&conn, &ctx.repo, &ctx.principal, MAX_LOOKUPS as i64)
        .map_err(|e| Refusal::one(format!("push refused: cannot read the LFS locks: {e}")))?;
    drop(conn);
    if locks.is_empty() {
        return Ok(());
    }
    let repo = ctx.open_repo().map_err(Refusal::one)?;
    match first_change(&repo, &pushed, &locks, MAX_LOOKUPS) {
        Ok(Found::None) => Ok(()),
        Ok(Found::Change(lock, commit)) => Err(Refusal::one(refusal(lock, commit))),
        Ok(Found::TooMuch) => Err(Refusal::one(format!(
            "push refused: it brings more commits than the server compares with the {} \
             paths locked by others (at most {MAX_LOOKUPS} commit-path pairs per push); \
             push it in smaller parts, or have the locks given back; nothing was changed",
            locks.len()
        ))),
        Err(e) => Err(Refusal::one(format!(
            "push refused: reading the pushed commits for LFS locks: {e}"
        ))),
    }
}

enum Found<'a> {
    None,
    Change(&'a Lock, Oid),
    TooMuch,
}

/// The entry (id, mode) at `path` in `tree`, if any.
fn entry(tree: &git2::Tree<'_>, path: &str) -> Option<(Oid, i32)> {
    tree.get_path(std::path::Path::new(path))
        .ok()
        .map(|e| (e.id(), e.filemode()))
}

fn first_change<'a>(
    repo: &Repository,
    pushed: &[Oid],
    locks: &'a [Lock],
    max_lookups: usize,
) -> Result<Found<'a>, git2::Error> {
    let max_commits = max_lookups / locks.len().max(1);
    let mut walk = repo.revwalk()?;
    let mut any = false;
    for &new in pushed {
        // A ref may point at a tag or a tree: only commits are walked.
        if let Ok(commit) = repo.find_object(new, None).and_then(|o| o.peel_to_commit()) {
            walk.push(commit.id())?;
            any = true;
        }
    }
    if !any {
        return Ok(Found::None);
    }
    for reference in repo.references()?.flatten() {
        if let Ok(commit) = reference.peel_to_commit() {
            walk.hide(commit.id())?;
        }
    }
    let mut walked = 0usize;
    for oid in walk {
        let oid = oid?;
        walked += 1;
        if walked > max_commits {
            return Ok(Found::TooMuch);
        }
        let commit = repo.find_commit(oid)?;
        let tree = commit.tree()?;
        let parents: Vec<git2::Tree<'_>> = commit
            .parents()
            .map(|p| p.tree())
            .collect::<Result<_, _>>()?;
        // A commit whose tree is a parent's changes nothing.
        if parents.iter().any(|p| p.id() == tree.id()) {
            continue;
        }
        let mut seen = HashSet::new();
        for lock in locks {
            if !seen.insert(lock.path.as_str()) {
                continue;
            }
            let here = entry(&tree, &lock.path);
            let changed = if parents.is_empty() {
                here.is_some()
            } else {
                parents.iter().all(|p| entry(p, &lock.path) != here)
            };
            if changed {
                return Ok(Found::Change(lock, oid));
            }
        }
    }
    Ok(Found::None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &Repository, files: &[(&str, &str)], parents: &[Oid]) -> Oid {
        let mut index = git2::Index::new().unwrap();
        for (path, content) in files {
            let blob = repo.blob(content.as_bytes()).unwrap();
            index
                .add(&git2::IndexEntry {
                    ctime: git2::IndexTime::new(0, 0),
                    mtime: git2::IndexTime::new(0, 0),
                    dev: 0,
                    ino: 0,
                    mode: 0o100644,
                    uid: 0,
                    gid: 0,
                    file_size: 0,
                    id: blob,
                    flags: 0,
                    flags_extended: 0,
                    path: path.as_bytes().to_vec(),
                })
                .unwrap();
        }
        let tree = repo.find_tree(index.write_tree_to(repo).unwrap()).unwrap();
        let sig = git2::Signature::new("t", "t@example.com", &git2::Time::new(0, 0)).unwrap();
        let parents: Vec<_> = parents
            .iter()
            .map(|p| repo.find_commit(*p).unwrap())
            .collect();
        let refs: Vec<_> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
    }

    fn lock(path: &str) -> Lock {
        Lock {
            id: "00000000000000aa".into(),
            path: path.into(),
            owner: "alice".into(),
            created_at: 0,
        }
    }

    fn changed(repo: &Repository, pushed: Oid, locks: &[Lock]) -> Option<(String, Oid)> {
        match first_change(repo, &[pushed], locks, MAX_LOOKUPS).unwrap() {
            Found::None => None,
            Found::Change(l, c) => Some((l.path.clone(), c)),
            Found::TooMuch => panic!("too much"),
        }
    }

    #[test]
    fn finds_the_commit_that_changes_a_locked_path_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let base = commit(&repo, &[("a/x.bin", "1"), ("y", "1")], &[]);
        repo.reference("refs/heads/main", base, true, "").unwrap();
        let locks = [lock("a/x.bin")];

        // Changing another path: fine; changing the locked one, even in an
        // earlier commit of the push, is found; so is deleting it.
        let other = commit(&repo, &[("a/x.bin", "1"), ("y", "2")], &[base]);
        assert_eq!(changed(&repo, other, &locks), None);
        let touch = commit(&repo, &[("a/x.bin", "2"), ("y", "2")], &[other]);
        let back = commit(&repo, &[("a/x.bin", "2"), ("y", "3")], &[touch]);
        assert_eq!(
            changed(&repo, back, &locks),
            Some(("a/x.bin".into(), touch))
        );
        let gone = commit(&repo, &[("y", "1")], &[base]);
        assert_eq!(changed(&repo, gone, &locks), Some(("a/x.bin".into(), gone)));

        // A merge that takes the repository's version changes nothing; the
        // commits already in the repository are not looked at again.
        repo.reference("refs/heads/side", touch, true, "").unwrap();
        let merge = commit(&repo, &[("a/x.bin", "2"), ("y", "9")], &[base, touch]);
        assert_eq!(changed(&repo, merge, &locks), None);
        // A new root commit with the path changes it.
        let root = commit(&repo, &[("a/x.bin", "1")], &[]);
        assert_eq!(changed(&repo, root, &locks), Some(("a/x.bin".into(), root)));
    }

    #[test]
    fn more_commits_than_the_bound_allows_are_refused_unread() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let one = commit(&repo, &[("y", "1")], &[]);
        let two = commit(&repo, &[("y", "2")], &[one]);
        let three = commit(&repo, &[("y", "3")], &[two]);
        let locks = [lock("a.bin"), lock("b.bin")];
        // Two locks: six lookups cover three commits, five do not.
        assert!(matches!(
            first_change(&repo, &[three], &locks, 6).unwrap(),
            Found::None
        ));
        assert!(matches!(
            first_change(&repo, &[three], &locks, 5).unwrap(),
            Found::TooMuch
        ));
    }

    #[test]
    fn the_refusal_is_one_line_naming_path_owner_and_unlock() {
        let line = refusal(&lock("a/x.bin"), Oid::ZERO_SHA1);
        assert!(!line.contains('\n'));
        assert!(line.starts_with("a/x.bin: locked by alice"), "{line}");
        assert!(line.contains("git lfs unlock a/x.bin"), "{line}");
    }
}
