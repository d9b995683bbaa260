//! `.gitmodules` files that attack the clients who clone them and that
//! `receive.fsckObjects` lets through: a carriage return that does not end
//! a line (CVE-2025-48384: git reads `path = "sub\r"` with its CR, writes
//! it to `.git/config` unquoted, and reads it back without, so a recursive
//! clone checks the submodule out beside where it belongs, through a
//! symlink into `.git/hooks`). Git's fsck checks `.gitmodules` names and
//! URLs (`ssh/git.rs` turns it on for every push) but not this, so every
//! commit a push brings is looked at: its root tree's `.gitmodules`, each
//! distinct blob once. A push holding one is refused whole.

use std::collections::HashSet;

use git2::{Oid, Repository};

use super::check::Refusal;
use super::context::HookContext;
use super::updates::RefUpdate;

/// Whether a `.gitmodules` text holds a CR that is not part of a CRLF line
/// end (git's config reader keeps such a CR inside a quoted value).
pub fn has_stray_cr(text: &[u8]) -> bool {
    text.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\r' && text.get(i + 1) != Some(&b'\n'))
}

pub fn check(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), Refusal> {
    let pushed: Vec<Oid> = updates.iter().filter_map(|u| u.new).collect();
    if pushed.is_empty() {
        return Ok(());
    }
    let repo = ctx.open_repo().map_err(Refusal::one)?;
    let bad = first_bad_commit(&repo, &pushed)
        .map_err(|e| Refusal::one(format!("reading the pushed commits: {e}")))?;
    match bad {
        None => Ok(()),
        Some((commit, Bad::TooLarge(size))) => Err(Refusal::one(format!(
            "commit {commit} has a .gitmodules of {size} bytes, more than the \
             {MAX_GITMODULES} a .gitmodules may have; nothing was changed"
        ))),
        Some((commit, Bad::StrayCr)) => Err(Refusal::one(format!(
            "commit {commit} has a .gitmodules with a carriage return inside a value \
             (CVE-2025-48384: it makes clients check a submodule out elsewhere); \
             nothing was changed"
        ))),
    }
}

/// The largest `.gitmodules` read: its size comes from the object header
/// (for a delta, the result size the delta declares) before libgit2
/// inflates it whole, so a pushed delta declaring gigabytes is refused
/// unread (issue 44, the libgit2 1.9.5 advisory).
pub const MAX_GITMODULES: usize = 1024 * 1024;

/// Why a `.gitmodules` is refused.
#[derive(Debug, PartialEq, Eq)]
enum Bad {
    StrayCr,
    TooLarge(usize),
}

/// The first pushed commit whose root `.gitmodules` has a stray CR. Only
/// commits the repository did not have are walked (one walk for the whole
/// push, every existing ref hidden), and each distinct blob is read once.
fn first_bad_commit(repo: &Repository, pushed: &[Oid]) -> Result<Option<(Oid, Bad)>, git2::Error> {
    let mut walk = repo.revwalk()?;
    for &new in pushed {
        // A ref may point at a tag or a tree: only commits are walked.
        if let Ok(commit) = repo.find_object(new, None).and_then(|o| o.peel_to_commit()) {
            walk.push(commit.id())?;
        }
    }
    for reference in repo.references()?.flatten() {
        if let Ok(commit) = reference.peel_to_commit() {
            walk.hide(commit.id())?;
        }
    }
    let mut seen_blobs = HashSet::new();
    for oid in walk {
        let oid = oid?;
        let tree = repo.find_commit(oid)?.tree()?;
        let Some(entry) = tree.get_name(".gitmodules") else {
            continue;
        };
        if !seen_blobs.insert(entry.id()) {
            continue;
        }
        // A symlink or a tree named .gitmodules is fsck's to refuse.
        if entry.kind() != Some(git2::ObjectType::Blob) {
            continue;
        }
        let (size, _) = repo.odb()?.read_header(entry.id())?;
        if size > MAX_GITMODULES {
            return Ok(Some((oid, Bad::TooLarge(size))));
        }
        let Ok(blob) = repo.find_blob(entry.id()) else {
            continue;
        };
        if has_stray_cr(blob.content()) {
            return Ok(Some((oid, Bad::StrayCr)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_cr_that_does_not_end_a_line_is_stray() {
        assert!(has_stray_cr(b"[submodule \"s\"]\n\tpath = \"s\r\"\n"));
        assert!(has_stray_cr(b"path = s\r"));
        assert!(!has_stray_cr(b"[submodule \"s\"]\r\n\tpath = s\r\n"));
        assert!(!has_stray_cr(b"[submodule \"s\"]\n\tpath = s\n"));
    }
}
