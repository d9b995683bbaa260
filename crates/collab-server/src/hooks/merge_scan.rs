//! The push-time merge scan, run by `post-receive` after the refs moved.
//!
//! For every branch a push moved (`refs/heads/<b>`):
//!
//! - each open server-held patch targeting `<b>` whose latest revision's
//!   head is one of the commits the push brought to the branch (now
//!   reachable from it, and not before) is merged, in the oldest commit of
//!   the push's first-parent history that contains the head (the merge
//!   commit of a `git merge`, the head itself after a fast-forward). The
//!   test is a set lookup per open patch, so a branch with many open
//!   patches costs a push little; a head that was already in the branch
//!   before the push (a closed patch reopened later) is recorded by
//!   `collab-patch merge` instead;
//! - else, a pushed commit with a `Patch: <id>` trailer (8 to 40 hex digits
//!   of the id) merges that patch in that commit (squash, cherry-pick);
//! - when `<b>` is the repository's default branch (what `HEAD` names),
//!   each pushed commit's `Fixes: <issue>` / `Closes: <issue>` trailers
//!   (8 to 40 hex digits) close those open issues, which ends their leases.
//!
//! Everything one push finds is written in one IMMEDIATE transaction of the
//! hook's own connection (`patch.merged` with the push's ref and new tip,
//! `issue.closed`, `lease.released`). The refs have already moved: a
//! failure is a warning, never a refusal. Only the commits the push brought
//! are read, at most [`MAX_COMMITS`] per branch.

use std::collections::{BTreeMap, HashSet};

use collab_store::sql::TransactionBehavior;
use git2::{Oid, Repository};

use super::context::HookContext;
use super::updates::RefUpdate;
use collab_store::{issues, patches};

/// Most commits of one pushed branch the scan reads.
pub const MAX_COMMITS: usize = 10_000;

/// What the scan did, for the pusher.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    /// `(patch, commit, how)`.
    pub merged: Vec<(String, String, &'static str)>,
    /// `(issue, commit)`.
    pub closed: Vec<(String, String)>,
    /// What no longer applied, one line each.
    pub warnings: Vec<String>,
}

/// The trailer values under `keys` (case-insensitive) of a commit message
/// that look like ids: 8 to 40 hex digits, lowercased.
fn id_trailers(message: &str, keys: &[&str]) -> Vec<String> {
    let Ok(trailers) = git2::message_trailers_strs(message) else {
        return Vec::new();
    };
    trailers
        .iter()
        .filter(|(key, _)| keys.iter().any(|k| key.eq_ignore_ascii_case(k)))
        .map(|(_, value)| value.trim().to_ascii_lowercase())
        .filter(|v| (8..=40).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect()
}

/// The commits a branch update brought, oldest first along first parents,
/// and all of them (any parent) for the trailer search.
fn pushed_commits(repo: &Repository, old: Option<Oid>, new: Oid) -> Result<Vec<Oid>, git2::Error> {
    let mut walk = repo.revwalk()?;
    walk.push(new)?;
    if let Some(old) = old {
        walk.hide(old)?;
    }
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)?;
    walk.take(MAX_COMMITS).collect()
}

fn first_parent_chain(repo: &Repository, old: Option<Oid>, new: Oid) -> Vec<Oid> {
    let mut chain = Vec::new();
    let mut at = Some(new);
    while let Some(oid) = at {
        if Some(oid) == old || chain.len() == MAX_COMMITS {
            break;
        }
        chain.push(oid);
        at = repo
            .find_commit(oid)
            .ok()
            .and_then(|c| c.parent_ids().next());
    }
    chain.reverse();
    chain
}

fn contains(repo: &Repository, commit: Oid, head: Oid) -> bool {
    commit == head || repo.graph_descendant_of(commit, head).unwrap_or(false)
}

/// The branch `HEAD` names, if it names one.
fn default_branch(repo: &Repository) -> Option<String> {
    let head = repo.find_reference("HEAD").ok()?;
    let target = head.symbolic_target().ok()??;
    target.strip_prefix("refs/heads/").map(str::to_string)
}

/// What a branch update merged and fixed, found by reading git and the
/// database, not yet written.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    /// patch -> (commit, how, refname, new tip)
    merges: BTreeMap<String, (Oid, &'static str, String, Oid)>,
    /// issue id prefix -> the commit that fixes it
    closes: BTreeMap<String, Oid>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.merges.is_empty() && self.closes.is_empty()
    }

    /// Leave patch `id` out (the caller records its merge itself).
    pub fn without_patch(mut self, id: &str) -> Plan {
        self.merges.remove(id);
        self
    }
}

/// Find what `updates` merged and fixed in repository `repo_name`
/// (`conn` may be a read-only connection; nothing is written).
pub fn plan(
    repo: &Repository,
    conn: &collab_store::sql::Connection,
    repo_name: &str,
    updates: &[RefUpdate],
) -> Result<Plan, String> {
    let branches: Vec<(&str, &RefUpdate, Oid)> = updates
        .iter()
        .filter_map(|u| Some((u.refname.strip_prefix("refs/heads/")?, u, u.new?)))
        .collect();
    let mut plan = Plan::default();
    if branches.is_empty() {
        return Ok(plan);
    }
    let default = default_branch(repo);
    for (branch, update, new) in branches {
        let open = patches::open_on_base(conn, repo_name, branch)
            .map_err(|e| format!("reading patches: {e}"))?;
        let fixes_here = default.as_deref() == Some(branch);
        if open.is_empty() && !fixes_here {
            continue;
        }
        let pushed = pushed_commits(repo, update.old, new)
            .map_err(|e| format!("reading the pushed commits: {e}"))?;
        let chain = if open.is_empty() {
            Vec::new()
        } else {
            first_parent_chain(repo, update.old, new)
        };
        // A head the push made reachable is one of the commits it brought.
        // Set lookups, not a graph walk per open patch; only when the
        // push brought more commits than the scan reads does each open
        // head get a reachability check.
        let brought: HashSet<Oid> = pushed.iter().copied().collect();
        let truncated = pushed.len() >= MAX_COMMITS;
        for (id, head) in &open {
            let Ok(head) = Oid::from_str(head) else {
                continue;
            };
            let reached = brought.contains(&head) || (truncated && contains(repo, new, head));
            if !reached {
                continue;
            }
            let at = chain
                .iter()
                .copied()
                .find(|c| contains(repo, *c, head))
                .unwrap_or(new);
            plan.merges
                .entry(id.clone())
                .or_insert((at, "reachable", update.refname.clone(), new));
        }
        for oid in &pushed {
            let Ok(commit) = repo.find_commit(*oid) else {
                continue;
            };
            let message = commit.message().unwrap_or("");
            for prefix in id_trailers(message, &["Patch"]) {
                if let Some((id, _)) = open.iter().find(|(id, _)| id.starts_with(&prefix)) {
                    plan.merges.entry(id.clone()).or_insert((
                        *oid,
                        "trailer",
                        update.refname.clone(),
                        new,
                    ));
                }
            }
            if fixes_here {
                for prefix in id_trailers(message, &["Fixes", "Closes"]) {
                    plan.closes.entry(prefix).or_insert(*oid);
                }
            }
        }
    }
    Ok(plan)
}

/// Write what `plan` found, inside the caller's transaction: `patch.merged`
/// with the update's ref and new tip, `issue.closed` (which ends leases).
/// A patch or issue that no longer applies (merged or closed meanwhile, an
/// unknown or ambiguous prefix) is a warning in the result, not an error.
pub fn apply(
    conn: &collab_store::sql::Connection,
    plan: &Plan,
    repo_name: &str,
    actor: &issues::Person,
    max_body: usize,
    now: i64,
) -> Found {
    let mut found = Found::default();
    let w = patches::WriteCtx {
        repo: repo_name,
        actor,
        max_body,
        now,
    };
    for (id, (commit, how, refname, new)) in &plan.merges {
        let by = patches::MergedBy::Push {
            refname: refname.clone(),
            new: new.to_string(),
            how,
        };
        match patches::mark_merged(conn, &w, id, &commit.to_string(), &by) {
            Ok(_) => found.merged.push((id.clone(), commit.to_string(), how)),
            Err(e) => found.warnings.push(format!("patch {}: {e}", &id[..8])),
        }
    }
    let iw = issues::WriteCtx {
        repo: repo_name,
        actor,
        fence: None,
        max_body,
        now,
    };
    for (prefix, commit) in &plan.closes {
        let short = commit.to_string()[..8].to_string();
        let reason = format!("fixed by {short}");
        match issues::close(conn, &iw, prefix, Some(&reason)) {
            Ok(closed) => found
                .closed
                .push((closed.written.issue, commit.to_string())),
            // An unknown, ambiguous or already closed issue: said, not fatal.
            Err(e) => found.warnings.push(format!("{short}: {e}")),
        }
    }
    found
}

/// Scan the push and record what it merged and closed, in one write
/// transaction of the hook's own connection, under the repository's lock.
pub fn scan(ctx: &HookContext, updates: &[RefUpdate]) -> Result<Found, String> {
    if !updates
        .iter()
        .any(|u| u.new.is_some() && u.refname.starts_with("refs/heads/"))
    {
        return Ok(Found::default());
    }
    let conn = collab_store::open(&ctx.collab_db)
        .map_err(|e| format!("opening the collab database: {e}"))?;
    let repo = ctx.open_repo()?;
    let plan = plan(&repo, &conn, &ctx.repo, updates)?;
    if plan.is_empty() {
        return Ok(Found::default());
    }
    // The push's records are this repository's: its lock, not the key of
    // the writes that may touch several (docs/postgres.md).
    let tx = collab_store::sql::Transaction::new_unchecked(&conn, TransactionBehavior::Repository)
        .and_then(|tx| tx.lock_repository(&ctx.repo).map(|_| tx))
        .map_err(|e| format!("collab database: {e}"))?;
    let actor = issues::Person {
        principal: ctx.principal.clone(),
        name: ctx.principal.clone(),
        key: None,
    };
    let now = chrono::Utc::now().timestamp();
    let found = apply(&tx, &plan, &ctx.repo, &actor, ctx.max_body, now);
    tx.commit().map_err(|e| format!("collab database: {e}"))?;
    Ok(found)
}

/// `post-receive`'s part: scan, and tell the pusher what happened.
pub fn run(ctx: &HookContext, updates: &[RefUpdate]) -> Result<(), String> {
    let found = scan(ctx, updates)?;
    for (patch, commit, how) in &found.merged {
        let how = if *how == "trailer" {
            " (Patch: trailer)"
        } else {
            ""
        };
        eprintln!("patch {} merged in {}{how}", &patch[..8], &commit[..8]);
    }
    for (issue, commit) in &found.closed {
        eprintln!("issue {} closed by {}", &issue[..8], &commit[..8]);
    }
    for warning in &found.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailers_name_ids() {
        let msg = "Fix\n\nbody\n\nFixes: 0123ABCD\nCloses: 89abcdef01\nPatch: 1234\nSigned-off-by: A <a@b>\n";
        assert_eq!(
            id_trailers(msg, &["Fixes", "Closes"]),
            vec!["0123abcd", "89abcdef01"]
        );
        // Too short to be an id.
        assert!(id_trailers(msg, &["Patch"]).is_empty());
        assert!(id_trailers("no trailers", &["Fixes"]).is_empty());
    }
}
