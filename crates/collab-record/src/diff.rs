//! Diffs of patch revisions, computed with git2 from the commits their
//! events name: a revision against its base (what the patch changes), and
//! the interdiff of two revisions (what the author changed between them).
//!
//! An interdiff must not show what a rebase brought in. When two revisions
//! start from different base commits, revision A's own changes (its base to
//! its head) are first replayed onto B's base in memory (a three-way tree
//! merge, as `git range-diff` or a cherry-pick would), and that tree is
//! diffed against B. Where that replay conflicts, the file is compared as A
//! has it, and the path is listed in [`Interdiff::conflicts`]. Nothing here
//! writes a ref; only the in-memory merge writes tree objects.

use git2::{DiffFindOptions, DiffFormat, DiffOptions, Oid, Repository, Tree};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::patch::{self, PatchState, Revision};

/// The stage bits of an index entry's flags (libgit2's
/// `GIT_INDEX_ENTRY_STAGEMASK`, which git2 does not export).
const INDEX_STAGE_MASK: u16 = 0x3000;

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// The path after the change (before it, for a deletion).
    pub path: String,
    /// The path before a rename or copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
    /// `added`, `deleted`, `modified`, `renamed`, `copied`, `type_change`.
    pub status: &'static str,
    pub additions: usize,
    pub deletions: usize,
}

/// A diff between two trees, as unified diff text plus a per-file summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TreeDiff {
    pub files: Vec<FileChange>,
    /// `git diff`-style unified diff text.
    pub text: String,
}

/// Revision `n` against its base.
#[derive(Debug, Clone, Serialize)]
pub struct RevisionDiff {
    pub revision: u32,
    /// The base commit the diff starts from.
    pub base_commit: String,
    pub head: String,
    #[serde(flatten)]
    pub diff: TreeDiff,
}

/// What changed from revision `from` to revision `to`.
#[derive(Debug, Clone, Serialize)]
pub struct Interdiff {
    pub from: u32,
    pub to: u32,
    /// True when the two revisions start from different base commits and
    /// `from` was replayed onto `to`'s base before comparing.
    pub rebased: bool,
    /// Paths where that replay conflicted (compared as `from` has them).
    pub conflicts: Vec<String>,
    #[serde(flatten)]
    pub diff: TreeDiff,
}

/// The base commit revision `r` starts from: the one its event recorded,
/// else the merge base of its head and the base branch.
pub fn fork_point(repo: &Repository, state: &PatchState, r: &Revision) -> Result<Oid> {
    if let Some(recorded) = r.base_commit.as_deref() {
        if let Ok(oid) = Oid::from_str(recorded) {
            if recorded.len() == 40 && repo.find_commit(oid).is_ok() {
                return Ok(oid);
            }
        }
    }
    let head = patch::present_commit(repo, &r.head, r.n)?;
    let (_, tip) = patch::base_tip(repo, &state.base)?;
    repo.merge_base(head, tip).map_err(|_| {
        Error::Invalid(format!(
            "revision {} shares no history with '{}'",
            r.n, state.base
        ))
    })
}

/// The trees a revision diff compares: the base commit's and the head's.
pub struct RevisionSides<'r> {
    pub revision: u32,
    pub base_commit: Oid,
    pub head: Oid,
    pub old: Tree<'r>,
    pub new: Tree<'r>,
}

/// The trees an interdiff compares: revision `from` (replayed onto the
/// base of `to` when `rebased`) and revision `to`.
pub struct InterdiffSides<'r> {
    pub from: u32,
    pub to: u32,
    pub rebased: bool,
    pub conflicts: Vec<String>,
    pub old: Tree<'r>,
    pub new: Tree<'r>,
}

/// What the diff of revision `rev` (default: the latest) compares.
pub fn revision_sides<'r>(
    repo: &'r Repository,
    state: &PatchState,
    rev: Option<u32>,
) -> Result<RevisionSides<'r>> {
    let r = state.revision(rev)?;
    let head = patch::present_commit(repo, &r.head, r.n)?;
    let base = fork_point(repo, state, r)?;
    Ok(RevisionSides {
        revision: r.n,
        base_commit: base,
        head,
        old: tree_of(repo, base)?,
        new: tree_of(repo, head)?,
    })
}

/// What the interdiff from revision `from` to revision `to` compares.
pub fn interdiff_sides<'r>(
    repo: &'r Repository,
    state: &PatchState,
    from: u32,
    to: u32,
) -> Result<InterdiffSides<'r>> {
    let (ra, rb) = (state.revision(Some(from))?, state.revision(Some(to))?);
    let head_a = patch::present_commit(repo, &ra.head, ra.n)?;
    let head_b = patch::present_commit(repo, &rb.head, rb.n)?;
    let (fork_a, fork_b) = (fork_point(repo, state, ra)?, fork_point(repo, state, rb)?);
    commits_interdiff_sides(repo, (from, fork_a, head_a), (to, fork_b, head_b))
}

/// What the interdiff compares, from revisions given as `(n, fork, head)`:
/// `from`'s changes replayed onto `to`'s fork when the forks differ, and
/// `to`'s head. For callers that keep revisions themselves (the server).
pub fn commits_interdiff_sides(
    repo: &Repository,
    (from, fork_a, head_a): (u32, Oid, Oid),
    (to, fork_b, head_b): (u32, Oid, Oid),
) -> Result<InterdiffSides<'_>> {
    let (old, conflicts) = if fork_a == fork_b {
        (tree_of(repo, head_a)?, Vec::new())
    } else {
        replay_onto(repo, fork_a, head_a, fork_b)?
    };
    Ok(InterdiffSides {
        from,
        to,
        rebased: fork_a != fork_b,
        conflicts,
        old,
        new: tree_of(repo, head_b)?,
    })
}

/// The diff of revision `n` given as its fork and head commits.
pub fn commits_revision_diff(
    repo: &Repository,
    n: u32,
    fork: Oid,
    head: Oid,
) -> Result<RevisionDiff> {
    Ok(RevisionDiff {
        revision: n,
        base_commit: fork.to_string(),
        head: head.to_string(),
        diff: diff_trees(repo, &tree_of(repo, fork)?, &tree_of(repo, head)?)?,
    })
}

/// The interdiff of revisions given as `(n, fork, head)`.
pub fn commits_interdiff(
    repo: &Repository,
    from: (u32, Oid, Oid),
    to: (u32, Oid, Oid),
) -> Result<Interdiff> {
    let sides = commits_interdiff_sides(repo, from, to)?;
    Ok(Interdiff {
        from: sides.from,
        to: sides.to,
        rebased: sides.rebased,
        diff: diff_trees(repo, &sides.old, &sides.new)?,
        conflicts: sides.conflicts,
    })
}

/// Revision `rev` (default: the latest) against its base.
pub fn revision_diff(
    repo: &Repository,
    state: &PatchState,
    rev: Option<u32>,
) -> Result<RevisionDiff> {
    let sides = revision_sides(repo, state, rev)?;
    Ok(RevisionDiff {
        revision: sides.revision,
        base_commit: sides.base_commit.to_string(),
        head: sides.head.to_string(),
        diff: diff_trees(repo, &sides.old, &sides.new)?,
    })
}

/// What the author changed from revision `from` to revision `to`, leaving
/// out what moving to a newer base brought in.
pub fn interdiff(repo: &Repository, state: &PatchState, from: u32, to: u32) -> Result<Interdiff> {
    let sides = interdiff_sides(repo, state, from, to)?;
    Ok(Interdiff {
        from,
        to,
        rebased: sides.rebased,
        diff: diff_trees(repo, &sides.old, &sides.new)?,
        conflicts: sides.conflicts,
    })
}

/// The tree of `head`'s changes since `fork` replayed onto `onto`, and the
/// paths where that conflicted (resolved to `head`'s version).
fn replay_onto(
    repo: &Repository,
    fork: Oid,
    head: Oid,
    onto: Oid,
) -> Result<(Tree<'_>, Vec<String>)> {
    let mut index = repo.merge_trees(
        &tree_of(repo, fork)?,
        &tree_of(repo, onto)?,
        &tree_of(repo, head)?,
        None,
    )?;
    let mut conflicts = Vec::new();
    if index.has_conflicts() {
        let entries = index.conflicts()?.collect::<Result<Vec<_>, _>>()?;
        for c in entries {
            let Some(path) = [&c.their, &c.our, &c.ancestor]
                .into_iter()
                .flatten()
                .map(|e| e.path.clone())
                .next()
            else {
                continue;
            };
            index.conflict_remove(std::path::Path::new(
                &String::from_utf8_lossy(&path).into_owned(),
            ))?;
            if let Some(mut theirs) = c.their {
                // Stage 0 marks a resolved entry.
                theirs.flags &= !INDEX_STAGE_MASK;
                index.add(&theirs)?;
            }
            conflicts.push(String::from_utf8_lossy(&path).into_owned());
        }
    }
    conflicts.sort();
    conflicts.dedup();
    let tree = repo.find_tree(index.write_tree_to(repo)?)?;
    Ok((tree, conflicts))
}

fn tree_of(repo: &Repository, commit: Oid) -> Result<Tree<'_>> {
    Ok(repo.find_commit(commit)?.tree()?)
}

/// The git2 diff of two trees, 3 lines of context, renames detected.
pub fn tree_diff<'r>(repo: &'r Repository, old: &Tree, new: &Tree) -> Result<git2::Diff<'r>> {
    let mut opts = DiffOptions::new();
    opts.context_lines(3);
    let mut diff = repo.diff_tree_to_tree(Some(old), Some(new), Some(&mut opts))?;
    diff.find_similar(Some(DiffFindOptions::new().renames(true)))?;
    Ok(diff)
}

/// Diffs two trees (renames detected) into text and a file summary.
pub fn diff_trees(repo: &Repository, old: &Tree, new: &Tree) -> Result<TreeDiff> {
    let diff = tree_diff(repo, old, new)?;
    let mut files = Vec::new();
    for (i, delta) in diff.deltas().enumerate() {
        let path = |f: git2::DiffFile| f.path().map(|p| p.to_string_lossy().into_owned());
        let (old_path, new_path) = (path(delta.old_file()), path(delta.new_file()));
        let (additions, deletions) = match git2::Patch::from_diff(&diff, i)? {
            Some(p) => {
                let (_, add, del) = p.line_stats()?;
                (add, del)
            }
            None => (0, 0),
        };
        use git2::Delta;
        let status = match delta.status() {
            Delta::Added => "added",
            Delta::Deleted => "deleted",
            Delta::Renamed => "renamed",
            Delta::Copied => "copied",
            Delta::Typechange => "type_change",
            _ => "modified",
        };
        let moved = matches!(delta.status(), Delta::Renamed | Delta::Copied);
        files.push(FileChange {
            path: new_path.clone().or(old_path.clone()).unwrap_or_default(),
            old_path: if moved { old_path } else { None },
            status,
            additions,
            deletions,
        });
    }
    let mut text = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            text.push(line.origin() as u8);
        }
        text.extend_from_slice(line.content());
        true
    })?;
    Ok(TreeDiff {
        files,
        text: String::from_utf8_lossy(&text).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use git2::Signature;

    /// Commits `files` (path, content) on top of `parent` without touching
    /// any ref.
    fn commit(repo: &Repository, parent: Option<Oid>, files: &[(&str, &str)]) -> Oid {
        let mut builder = match parent {
            Some(p) => repo
                .treebuilder(Some(&repo.find_commit(p).unwrap().tree().unwrap()))
                .unwrap(),
            None => repo.treebuilder(None).unwrap(),
        };
        for (path, content) in files {
            builder
                .insert(path, repo.blob(content.as_bytes()).unwrap(), 0o100644)
                .unwrap();
        }
        let tree = repo.find_tree(builder.write().unwrap()).unwrap();
        let sig = Signature::now("t", "t@example.com").unwrap();
        let parents: Vec<git2::Commit> = parent
            .map(|p| repo.find_commit(p).unwrap())
            .into_iter()
            .collect();
        let refs: Vec<&git2::Commit> = parents.iter().collect();
        repo.commit(None, &sig, &sig, "c", &tree, &refs).unwrap()
    }

    #[test]
    fn replaying_onto_a_new_base_leaves_the_base_change_out() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let base1 = commit(&repo, None, &[("lib.txt", "one\n"), ("app.txt", "a\n")]);
        let rev1 = commit(&repo, Some(base1), &[("app.txt", "a\nfeature v1\n")]);
        let base2 = commit(&repo, Some(base1), &[("lib.txt", "one\nupstream\n")]);
        let rev2 = commit(&repo, Some(base2), &[("app.txt", "a\nfeature v2\n")]);
        let (rebased, conflicts) = replay_onto(&repo, base1, rev1, base2).unwrap();
        assert!(conflicts.is_empty());
        let d = diff_trees(&repo, &rebased, &tree_of(&repo, rev2).unwrap()).unwrap();
        assert_eq!(d.files.len(), 1, "{d:?}");
        assert_eq!(d.files[0].path, "app.txt");
        assert!(d.text.contains("-feature v1\n+feature v2\n"), "{}", d.text);
        // The plain tree diff would show the upstream change too.
        let plain = diff_trees(
            &repo,
            &tree_of(&repo, rev1).unwrap(),
            &tree_of(&repo, rev2).unwrap(),
        )
        .unwrap();
        assert_eq!(plain.files.len(), 2);
    }

    #[test]
    fn conflicting_replays_compare_the_file_as_the_older_revision_has_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let base1 = commit(&repo, None, &[("f", "x\n")]);
        let rev1 = commit(&repo, Some(base1), &[("f", "mine\n")]);
        let base2 = commit(&repo, Some(base1), &[("f", "theirs\n")]);
        let rev2 = commit(&repo, Some(base2), &[("f", "resolved\n")]);
        let (rebased, conflicts) = replay_onto(&repo, base1, rev1, base2).unwrap();
        assert_eq!(conflicts, vec!["f"]);
        let d = diff_trees(&repo, &rebased, &tree_of(&repo, rev2).unwrap()).unwrap();
        assert!(d.text.contains("-mine\n+resolved\n"), "{}", d.text);
        assert_eq!((d.files[0].additions, d.files[0].deletions), (1, 1));
    }
}
