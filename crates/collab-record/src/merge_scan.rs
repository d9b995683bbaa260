//! The merge scan: finds open patches that landed on their base branch by
//! plain git (a `git merge` and push, a squash, a cherry-pick) and records
//! them as merged. Sync runs it after integrating the remote's refs.
//!
//! A patch counts as merged on a branch when its latest revision's head is
//! reachable from the branch tip (the merging commit is then the oldest
//! commit of the branch's first-parent history that contains the head), or
//! when a commit of the branch carries the trailer `Patch: <id>` (8 to 40
//! hex digits of the patch id; that commit is the merging commit). The
//! branches looked at are the remote's tracking branch
//! `refs/remotes/<remote>/<base>` and the local `refs/heads/<base>`.
//! Closed patches are not scanned. [`scan`] only reads; [`record`] writes
//! the `patch.merge` events.

use std::collections::BTreeMap;

use git2::{Oid, Repository, Sort};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::issue::Identity;
use crate::patch::{self, PatchState, PatchStatus};
use crate::refs;
use crate::store;
use crate::trust::TrustList;

/// How many commits of one branch the trailer search reads at most.
const TRAILER_WALK_LIMIT: usize = 10_000;
/// The trailer naming a patch in a commit message.
const TRAILER_KEY: &str = "Patch";

/// Why the scan considers a patch merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// The latest revision's head is reachable from the branch.
    Reachable,
    /// A commit of the branch has a `Patch: <id>` trailer.
    Trailer,
}

/// A patch the scan found merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundMerge {
    /// The patch's full id.
    pub patch: String,
    /// The merging commit.
    pub commit: String,
    /// The branch ref it was found on.
    pub branch: String,
    pub evidence: Evidence,
}

/// Finds the open patches that are merged into their base branch, looking
/// at `refs/remotes/<remote>/<base>` (when `remote` is given) and then
/// `refs/heads/<base>`. Writes nothing.
pub fn scan(repo: &Repository, remote: Option<&str>) -> Result<Vec<FoundMerge>> {
    let mut by_base: BTreeMap<String, Vec<PatchState>> = BTreeMap::new();
    for p in patch::list_patches(repo)? {
        if p.status == PatchStatus::Open {
            by_base.entry(p.base.clone()).or_default().push(p);
        }
    }
    let mut found = Vec::new();
    for (base, mut pending) in by_base {
        pending.sort_by(|a, b| a.id.cmp(&b.id));
        let mut branches: Vec<String> = remote
            .map(|r| refs::remote_branch_ref(r, &base))
            .into_iter()
            .collect();
        branches.push(refs::branch_ref(&base));
        for branch in branches {
            if pending.is_empty() {
                break;
            }
            let Some(tip) = store::ref_tip(repo, &branch)? else {
                continue;
            };
            let mut still = Vec::new();
            for p in pending {
                match reachable_merge(repo, tip, &p)? {
                    Some(commit) => found.push(FoundMerge {
                        patch: p.id.clone(),
                        commit: commit.to_string(),
                        branch: branch.clone(),
                        evidence: Evidence::Reachable,
                    }),
                    None => still.push(p),
                }
            }
            pending = still;
            if pending.is_empty() {
                break;
            }
            let trailers = trailer_merges(repo, tip, &pending)?;
            pending.retain(|p| match trailers.get(&p.id) {
                Some(commit) => {
                    found.push(FoundMerge {
                        patch: p.id.clone(),
                        commit: commit.to_string(),
                        branch: branch.clone(),
                        evidence: Evidence::Trailer,
                    });
                    false
                }
                None => true,
            });
        }
    }
    Ok(found)
}

/// Records each found merge as a `patch.merge` event signed by `who`, and
/// returns `(recorded, unrecorded)`. Nothing is recorded without a key, or
/// with a key the allowlist does not trust (its events would be dropped,
/// and every later sync would write another). A patch that is no longer
/// open (recorded meanwhile) is skipped.
pub fn record(
    repo: &Repository,
    who: Option<&Identity>,
    found: Vec<FoundMerge>,
) -> Result<(Vec<FoundMerge>, Vec<FoundMerge>)> {
    let trusted = match (who, TrustList::load(repo)?) {
        (Some(who), Some(list)) => list.allows(&who.key.public_key_line()).then_some(who),
        (who, None) => who,
        (None, Some(_)) => None,
    };
    let Some(who) = trusted else {
        return Ok((Vec::new(), found));
    };
    let mut recorded = Vec::new();
    for f in found {
        let commit = Oid::from_str(&f.commit)?;
        match patch::record_merge(repo, who, &f.patch, commit) {
            Ok(_) => recorded.push(f),
            Err(Error::Invalid(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((recorded, Vec::new()))
}

/// The merging commit if `p`'s latest head is reachable from `tip`.
fn reachable_merge(repo: &Repository, tip: Oid, p: &PatchState) -> Result<Option<Oid>> {
    let latest = p.latest();
    let Ok(head) = patch::present_commit(repo, &latest.head, latest.n) else {
        return Ok(None);
    };
    if head != tip && !repo.graph_descendant_of(tip, head).unwrap_or(false) {
        return Ok(None);
    }
    patch::merging_commit(repo, tip, head).map(Some)
}

/// The commits of `tip`'s history (since the patches forked) that name one
/// of `pending` in a `Patch:` trailer, by patch id; the oldest such commit
/// wins.
fn trailer_merges(
    repo: &Repository,
    tip: Oid,
    pending: &[PatchState],
) -> Result<BTreeMap<String, Oid>> {
    let mut walk = repo.revwalk()?;
    walk.set_sorting(Sort::TOPOLOGICAL)?;
    walk.push(tip)?;
    // Commits older than every patch's fork point cannot name them.
    let forks: Vec<Oid> = pending
        .iter()
        .filter_map(|p| {
            let latest = p.latest();
            let head = patch::present_commit(repo, &latest.head, latest.n).ok()?;
            repo.merge_base(head, tip).ok()
        })
        .collect();
    if forks.len() == pending.len() {
        if let Ok(oldest) = repo.merge_base_many(&forks) {
            walk.hide(oldest)?;
        }
    }
    let mut out = BTreeMap::new();
    for oid in walk.take(TRAILER_WALK_LIMIT) {
        let oid = oid?;
        let commit = repo.find_commit(oid)?;
        let Ok(message) = commit.message() else {
            continue;
        };
        let Ok(trailers) = git2::message_trailers_strs(message) else {
            continue;
        };
        for (key, value) in trailers.iter() {
            if !key.eq_ignore_ascii_case(TRAILER_KEY) {
                continue;
            }
            if let Some(id) = named_patch(value, pending) {
                // Topological order lists newer commits first: keep
                // overwriting so the oldest one stays.
                out.insert(id.to_string(), oid);
            }
        }
    }
    Ok(out)
}

/// The one pending patch whose id starts with the trailer value (8 to 40
/// hex digits), if exactly one does.
fn named_patch<'a>(value: &str, pending: &'a [PatchState]) -> Option<&'a str> {
    let value = value.trim().to_ascii_lowercase();
    if value.len() < 8 || value.len() > 40 || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut matching = pending.iter().filter(|p| p.id.starts_with(&value));
    let first = matching.next()?;
    matching.next().is_none().then_some(first.id.as_str())
}
