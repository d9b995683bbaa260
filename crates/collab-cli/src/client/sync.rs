//! `git-collab sync`: exchange `refs/collab/*` with a git remote. The
//! remote's collab refs are fetched into `refs/collab-remotes/<remote>/`
//! with the `git` CLI (so the user's ssh setup and `GIT_SSH_COMMAND`
//! apply); each DAG is then fast-forwarded or joined with a structural
//! merge commit; finally `refs/collab/*` is pushed back, never forced. If
//! the remote moved in between (push rejected), the whole round is retried
//! once.
//!
//! Against a git-collab server that holds the issues (server mode, see
//! `mode.rs`), sync still fetches everything, including the server's signed
//! issue export (kept in the tracking namespace only, see `refs.rs`), but
//! pushes no `refs/collab/issues/*`: the server owns them and refuses such
//! pushes. [`fetch_export`] fetches only the export.
//!
//! Patches ride along: the fetch also updates the remote's branches
//! (`refs/remotes/<remote>/*`, as `git fetch` does); revision pins
//! (`refs/collab/revisions/...`) are create-only, so a pin that differs
//! from the remote's takes the remote's value and `patch::pin_revisions`
//! re-pins any revision head left without one; then the merge scan records
//! patches merged by plain git (when a signing key is at hand).

use std::path::Path;
use std::process::Command;

use git2::{Oid, Repository};

use collab_record::error::{Error, Result};
use collab_record::issue::Identity;
use collab_record::merge_scan::{self, FoundMerge};
use collab_record::patch;
use collab_record::refs;
use collab_record::store;

/// What one sync did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SyncReport {
    /// Local refs created from the remote.
    pub created: Vec<String>,
    /// Local refs fast-forwarded to the remote's tip.
    pub fast_forwarded: Vec<String>,
    /// Local DAGs joined with the remote's by a structural merge commit.
    pub merged: Vec<String>,
    /// Diverged refs that are not event DAGs (never merged, left as they are).
    pub diverged: Vec<String>,
    /// True if the first push was rejected because the remote moved, and
    /// the round was run again.
    pub retried: bool,
    /// Revision pins that differed from the remote's and took its value.
    pub repinned: Vec<String>,
    /// Revision pins created for revision heads that had none.
    pub pinned: Vec<String>,
    /// Patches the merge scan found merged and recorded (`patch.merge`).
    pub patches_merged: Vec<FoundMerge>,
    /// Patches found merged but not recorded: no (trusted) signing key.
    pub merges_unrecorded: Vec<FoundMerge>,
    /// Remote refs the push created or moved.
    pub pushed: Vec<String>,
}

/// Syncs the collab refs of `repo` with `remote` (a configured remote name).
/// Merges found by the merge scan are reported but not recorded; see
/// [`sync_as`].
pub fn sync(repo: &Repository, remote: &str) -> Result<SyncReport> {
    sync_as(repo, remote, None)
}

/// [`sync`], recording the merges the merge scan finds as `patch.merge`
/// events signed by `who` (when given) before pushing.
pub fn sync_as(repo: &Repository, remote: &str, who: Option<&Identity>) -> Result<SyncReport> {
    sync_with(repo, remote, who, true)
}

/// [`sync_as`]; with `push_issues` false (server mode) the records the
/// server holds (issue and patch DAGs, revision pins) are fetched and
/// joined but never pushed.
pub fn sync_with(
    repo: &Repository,
    remote: &str,
    who: Option<&Identity>,
    push_issues: bool,
) -> Result<SyncReport> {
    check_remote(repo, remote)?;
    let mut report = SyncReport::default();
    for attempt in 0..2 {
        fetch(repo.path(), remote)?;
        mark_export_fetched(repo, remote)?;
        integrate(repo, remote, &mut report)?;
        report.pinned.extend(patch::pin_revisions(repo)?);
        let found = merge_scan::scan(repo, Some(remote))?;
        let (recorded, unrecorded) = merge_scan::record(repo, who, found)?;
        report.patches_merged.extend(recorded);
        report.merges_unrecorded = unrecorded;
        if !has_refs_to_push(repo, push_issues)? {
            // Nothing to push: against a remote without any ref, `git push`
            // fails on a refspec that matches nothing.
            return Ok(report);
        }
        match push(repo.path(), remote, push_issues)? {
            Pushed::Done(refs) => {
                report.pushed = refs;
                return Ok(report);
            }
            Pushed::RemoteMoved(_) if attempt == 0 => report.retried = true,
            Pushed::RemoteMoved(detail) => {
                return Err(Error::Sync(format!(
                    "push to '{remote}' rejected twice (the remote keeps moving): {detail}; run sync again"
                )))
            }
        }
    }
    unreachable!("the loop returns on its second attempt")
}

/// Refuses a remote name git could read as something else, or that is not
/// configured.
fn check_remote(repo: &Repository, remote: &str) -> Result<()> {
    if remote.is_empty() || remote.starts_with('-') || remote.contains(['/', '\\', ' ', '*']) {
        return Err(Error::Sync(format!("invalid remote name '{remote}'")));
    }
    repo.find_remote(remote).map_err(|e| match e.code() {
        git2::ErrorCode::NotFound => Error::Sync(format!("no remote named '{remote}'")),
        _ => e.into(),
    })?;
    Ok(())
}

/// Fetches only the server's issue export of `remote` into the tracking
/// namespace (pruning issues the server no longer exports); returns how
/// many exported issues are held afterwards.
pub fn fetch_export(repo: &Repository, remote: &str) -> Result<usize> {
    check_remote(repo, remote)?;
    let out = git(repo.path())
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--end-of-options",
            remote,
        ])
        .arg(refs::export_refspec(remote))
        .output()
        .map_err(|e| Error::Sync(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Sync(format!(
            "git fetch {remote} failed: {}",
            git_error(&out.stderr)
        )));
    }
    mark_export_fetched(repo, remote)?;
    Ok(collab_record::export::export_refs(repo, remote)?.len())
}

/// The git config key that says `remote`'s export was fetched here.
fn export_fetched_key(remote: &str) -> String {
    format!("remote.{remote}.collabExportFetched")
}

/// Remember that `remote`'s export was fetched into this clone, so an
/// empty one reads as "no issues" offline, not as "never fetched".
fn mark_export_fetched(repo: &Repository, remote: &str) -> Result<()> {
    let mut config = repo.config()?.open_level(git2::ConfigLevel::Local)?;
    Ok(config.set_bool(&export_fetched_key(remote), true)?)
}

/// Whether `remote`'s export was ever fetched into this clone (by `issue
/// fetch` or `sync`), even when it held nothing.
pub fn export_fetched(repo: &Repository, remote: &str) -> Result<bool> {
    Ok(repo
        .config()?
        .get_bool(&export_fetched_key(remote))
        .unwrap_or(false))
}

fn has_refs_to_push(repo: &Repository, push_issues: bool) -> Result<bool> {
    for r in repo.references_glob(&format!("{}*", refs::COLLAB_PREFIX))? {
        let r = r?;
        let server_held = |n: &str| refs::SERVER_HELD_PREFIXES.iter().any(|p| n.starts_with(p));
        if push_issues || r.name().is_ok_and(|n| !server_held(n)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Fetches the remote's collab refs into the tracking namespace.
fn fetch(git_dir: &Path, remote: &str) -> Result<()> {
    let out = git(git_dir)
        .args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--prune",
            "--no-write-fetch-head",
            "--end-of-options",
            remote,
        ])
        .arg(refs::tracking_refspec(remote))
        .arg(refs::remote_branches_refspec(remote))
        .output()
        .map_err(|e| Error::Sync(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Sync(format!(
            "git fetch {remote} failed: {}",
            git_error(&out.stderr)
        )));
    }
    Ok(())
}

/// Brings every tracking ref of `remote` into the local collab refs.
fn integrate(repo: &Repository, remote: &str, report: &mut SyncReport) -> Result<()> {
    let prefix = refs::tracking_prefix(remote);
    let mut tracking: Vec<(String, Oid)> = Vec::new();
    for r in repo.references_glob(&format!("{prefix}*"))? {
        let r = r?;
        if let (Ok(name), Some(oid)) = (r.name(), r.target()) {
            tracking.push((name.to_string(), oid));
        }
    }
    for (name, theirs) in tracking {
        let Some(local) = refs::local_for_tracking(remote, &name) else {
            continue;
        };
        let ours = store::ref_tip(repo, &local)?;
        match ours {
            None => {
                store::compare_and_swap(repo, &local, None, theirs, "sync: create")?;
                report.created.push(local);
            }
            // Revision pins never move: the remote's stands, and a head of
            // ours left unpinned is pinned anew by `patch::pin_revisions`.
            Some(ours) if ours != theirs && refs::revision_of(&local).is_some() => {
                store::compare_and_swap(repo, &local, Some(ours), theirs, "sync: remote pin")?;
                report.repinned.push(local);
            }
            Some(ours) if ours == theirs || repo.graph_descendant_of(ours, theirs)? => {}
            Some(ours) if repo.graph_descendant_of(theirs, ours)? => {
                store::compare_and_swap(repo, &local, Some(ours), theirs, "sync: fast-forward")?;
                report.fast_forwarded.push(local);
            }
            Some(ours) if refs::is_dag_ref(&local) => {
                let merge = store::write_merge_commit(repo, &[ours, theirs])?;
                store::compare_and_swap(repo, &local, Some(ours), merge, "sync: merge")?;
                report.merged.push(local);
            }
            Some(_) => report.diverged.push(local),
        }
    }
    Ok(())
}

enum Pushed {
    /// Accepted; the remote refs that were created or moved.
    Done(Vec<String>),
    /// Rejected because the remote has commits we lack; carries git's words.
    RemoteMoved(String),
}

fn push(git_dir: &Path, remote: &str, push_issues: bool) -> Result<Pushed> {
    let mut cmd = git(git_dir);
    // Not --quiet: it silences the porcelain lines that say what moved.
    cmd.args(["push", "--porcelain", "--end-of-options", remote])
        .arg(refs::push_refspec());
    if !push_issues {
        cmd.args(refs::not_server_held_refspecs());
    }
    let out = cmd
        .output()
        .map_err(|e| Error::Sync(format!("cannot run git: {e}")))?;
    // Porcelain lines: "<flag>\t<from>:<to>\t<summary>"; "!" is rejected,
    // "=" up to date; " ", "+" and "*" moved, forced or created a ref.
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        let pushed = stdout
            .lines()
            .filter(|l| l.starts_with([' ', '+', '*']))
            .filter_map(|l| l.split('\t').nth(1)?.split(':').nth(1).map(str::to_string))
            .collect();
        return Ok(Pushed::Done(pushed));
    }
    let moved = stdout.lines().find(|l| {
        l.starts_with('!')
            && ["non-fast-forward", "fetch first", "stale info"]
                .iter()
                .any(|w| l.contains(w))
    });
    match moved {
        Some(line) => Ok(Pushed::RemoteMoved(line.replace('\t', " "))),
        None => {
            let why = stdout
                .lines()
                .find(|l| l.starts_with('!'))
                .map(|l| l.replace('\t', " "))
                .unwrap_or_else(|| git_error(&out.stderr));
            Err(Error::Sync(format!("git push {remote} failed: {why}")))
        }
    }
}

/// git-args: a builder; every caller puts `--end-of-options` before the
/// remote name and refspecs it adds.
fn git(git_dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("--git-dir").arg(git_dir);
    // A git-collab run from a hook or alias must not inherit another
    // repository's location.
    cmd.env_remove("GIT_DIR").env_remove("GIT_WORK_TREE");
    cmd
}

/// The most telling line of git's stderr: its first `fatal:` or `error:`
/// line (without the prefix), else its last line.
fn git_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("fatal: ")
                .or_else(|| l.strip_prefix("error: "))
        })
        .or(lines.last().copied())
        .unwrap_or("(no output)")
        .to_string()
}
