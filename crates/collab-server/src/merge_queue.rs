//! The merge queue of a branch (a merge rule with `queue = true`): queued
//! patches are tested together on a merge-group commit before the base
//! moves, and land together when the group's required checks are green.
//!
//! The entries are the branch's merge intents (`collab-patch merge`, with
//! or without `--when-green`, records one when the rule queues), in queue
//! order; the groups and the per-branch state are in `collab.db`
//! (`db::merge_queue`), so a queue survives a restart and every node sees
//! it. One node drives a branch's queue at a time: each look claims the
//! branch (`merge_queue_branches.claimed_by`, with a deadline of
//! [`CLAIM_SECS`] so a dead node's claim lapses), acts, and releases it;
//! the landing itself also holds this node's merge lock of the repository
//! (`patch_merge::merge_lock`), so a direct merge never races it here, and
//! moves the base by compare-and-swap, so nothing else can be lost.
//!
//! Each look at a branch (when the event log moves, at least every
//! [`crate::paced::TICK`]):
//!
//! 1. Entries that cannot merge any more are dropped with
//!    `patch.merge_dequeued` and the reason (the patch is not open, a newer
//!    revision was pushed, the requester may no longer write). Entries
//!    whose votes are not yet sufficient wait (they are skipped, not
//!    dropped); the rest are *ready*.
//! 2. The group under test, if any: stale (and rebuilt) when the base
//!    branch moved or one of its patches left the queue; otherwise its
//!    required checks decide: pending or missing waits; green lands it
//!    (the base fast-forwards to the group commit and every patch in it is
//!    marked merged, in one transaction); a finished failure fails it and
//!    starts or continues a bisection.
//! 3. No group under test: build one from the head of the ready entries,
//!    `max_batch` patches (or, while bisecting, the first half of the
//!    suspects), each merged onto the one before (fast-forward when it
//!    can); a patch that conflicts with the group so far is dropped with the
//!    conflicting paths. The commit goes to `refs/collab/queue/<branch>/<n>`
//!    and `merge_group.checks_requested` announces it (webhooks follow).
//!
//! Bisection: a failed group of several patches makes them the suspects;
//! the next group holds the first half of them. A passing half lands and
//! leaves the rest suspect; a failing half is halved again; a single patch
//! that fails alone is the breaker: it is dropped, naming the failing
//! checks, and the queue goes on with full batches.

use std::sync::Arc;

use git2::{Oid, Repository};

use crate::app::App;
use crate::db::issues::Person;
use crate::db::merge_intents::{self, Intent};
use crate::db::merge_queue::{self as store, Group, GroupVerdict, Member};
use crate::db::patches::{self, MergeRule, MergedBy, PatchDetail, PatchError, PatchStatus};
use crate::events::Recorded;
use crate::hooks::merge_scan;
use crate::hooks::RefUpdate;
use crate::patch_merge;
use crate::repos::RepoEntry;
use collab_record::refs;

/// How long a node's claim on a branch's queue lasts (one look takes far
/// less; it is released at the end of the look).
pub const CLAIM_SECS: i64 = 60;

/// The most branches one look drives.
const BRANCHES_PER_LOOK: i64 = 10_000;

/// The most entries of one queue read at a look (the verb bounds intents
/// per repository to `merge_intents::MAX_PER_REPO`).
const ENTRIES_PER_LOOK: i64 = merge_intents::MAX_PER_REPO;

/// Run the driver until `stopping` fires, at [`crate::paced`]'s pace.
pub async fn run(app: Arc<App>, stopping: crate::shutdown::Stop) {
    crate::paced::run(app, stopping, "merge queue", |app, node| async move {
        look(&app, &node).await
    })
    .await
}

/// Drive every branch with a queue once.
async fn look(app: &Arc<App>, node: &str) -> anyhow::Result<()> {
    let branches = app
        .reads
        .read(|conn| Ok(store::branches(conn, BRANCHES_PER_LOOK)?))
        .await?;
    for (repo, branch) in branches {
        if let Err(e) = drive(app, node, &repo, &branch).await {
            tracing::warn!(repo, branch, "merge queue: {e:#}");
        }
    }
    Ok(())
}

/// Claim `branch`'s queue, take one step, release it.
async fn drive(app: &Arc<App>, node: &str, repo: &str, branch: &str) -> anyhow::Result<()> {
    let Some(entry) = crate::repos::find_repo(&app.config.repos_dir, repo) else {
        return Ok(());
    };
    let rule = {
        let (app2, entry2) = (app.clone(), entry.clone());
        tokio::task::spawn_blocking(move || crate::authz::merge_rule(&app2, &entry2)).await?
    };
    if !rule.queue {
        // Plain queued merges (`auto_merge`'s): nothing to do here unless a
        // group is left from when the rule queued.
        let (r, b) = (repo.to_string(), branch.to_string());
        let left = app
            .reads
            .read(move |conn| Ok(store::current(conn, &r, &b)?))
            .await?;
        if left.is_none() {
            return Ok(());
        }
    }
    let (r, b, me) = (repo.to_string(), branch.to_string(), node.to_string());
    let claimed = app
        .writer
        .write("claim a merge queue", move |conn, now| {
            Ok(store::claim(conn, &r, &b, &me, now, now + CLAIM_SECS)?)
        })
        .await?;
    if !claimed {
        return Ok(());
    }
    let stepped = if rule.queue {
        step(app, &entry, &rule, branch).await
    } else {
        // The rule stopped queueing: a group under test is void (the
        // intents go on as plain queued merges, `auto_merge`).
        let (r, b) = (repo.to_string(), branch.to_string());
        app.writer
            .write("end a merge group", move |conn, now| {
                if let Some(g) = store::current(conn, &r, &b)? {
                    store::finish(
                        conn,
                        &r,
                        &b,
                        g.n,
                        "stale",
                        Some("the merge rule no longer queues"),
                        now,
                    )?;
                }
                Ok(())
            })
            .await
    };
    let (r, b, me) = (repo.to_string(), branch.to_string(), node.to_string());
    app.writer
        .write("release a merge queue", move |conn, _now| {
            Ok(store::release(conn, &r, &b, &me)?)
        })
        .await?;
    stepped
}

/// What one look decided for a queue entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    /// Ready for a group.
    Ready,
    /// Not yet (votes missing): stays queued, skipped.
    Wait,
    Drop(String),
}

/// The decision for the entry `intent`, from what was read now. The
/// required checks are not the patch's: they are the group's.
fn decide(intent: &Intent, detail: &PatchDetail, rule: &MergeRule, may_write: bool) -> Entry {
    if detail.patch.status != PatchStatus::Open {
        return Entry::Drop(format!("the patch is {}", detail.patch.status.as_str()));
    }
    let Some(latest) = detail.latest() else {
        return Entry::Drop("the patch has no revision".into());
    };
    if latest.n != intent.revision {
        return Entry::Drop(format!(
            "revision {} was pushed; the merge was queued for revision {}",
            latest.n, intent.revision
        ));
    }
    if !may_write {
        return Entry::Drop(format!(
            "{} may no longer write the repository",
            intent.requester.name
        ));
    }
    match patches::rule_allows(detail, rule) {
        Ok(()) => Entry::Ready,
        Err(_) => Entry::Wait,
    }
}

/// One step of `branch`'s queue (see the module doc).
async fn step(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    branch: &str,
) -> anyhow::Result<()> {
    let repo = entry.name.clone();
    let (r, b) = (repo.clone(), branch.to_string());
    type Read = (
        Vec<(Intent, Result<PatchDetail, PatchError>)>,
        Option<Group>,
        i64,
    );
    let (entries, group, suspects): Read = app
        .reads
        .read(move |conn| {
            let entries = store::entries(conn, &r, &b, ENTRIES_PER_LOOK)?
                .into_iter()
                .map(|i| {
                    let d = patches::show(conn, &r, &i.patch);
                    (i, d)
                })
                .collect();
            Ok((
                entries,
                store::current(conn, &r, &b)?,
                store::suspects(conn, &r, &b)?,
            ))
        })
        .await?;

    // 1. The entries.
    let mut ready: Vec<(Intent, PatchDetail)> = Vec::new();
    for (intent, detail) in entries {
        let detail = match detail {
            Ok(d) => d,
            Err(PatchError::NotFound(_)) => {
                drop_entry(app, &intent, "the patch is gone").await?;
                continue;
            }
            Err(e) => return Err(anyhow::anyhow!("reading the patch: {e}")),
        };
        let may_write = {
            let (app2, entry2, who) = (
                app.clone(),
                entry.clone(),
                intent.requester.principal.clone(),
            );
            tokio::task::spawn_blocking(move || {
                crate::authz::principal_may_write(&app2, &who, &entry2)
            })
            .await?
        };
        match decide(&intent, &detail, rule, may_write) {
            Entry::Ready => ready.push((intent, detail)),
            Entry::Wait => {}
            Entry::Drop(reason) => drop_entry(app, &intent, &reason).await?,
        }
    }

    // 2. The group under test.
    if let Some(g) = group {
        let tip = branch_tip(entry, branch).await?;
        let left = g.members.iter().find(|m| {
            !ready
                .iter()
                .any(|(i, _)| i.patch == m.patch && i.revision == m.revision)
        });
        let stale = if let Some(m) = left {
            Some(format!(
                "patch {} left the queue or is not ready",
                short(&m.patch)
            ))
        } else if tip.as_deref() != Some(g.base.as_str()) {
            Some(format!("the base branch '{branch}' moved"))
        } else {
            None
        };
        match stale {
            Some(why) => finish(app, &g, "stale", &why).await?,
            None => {
                let (r, c) = (repo.clone(), g.commit.clone());
                let checks = app
                    .reads
                    .read(move |conn| Ok(crate::db::checks::list(conn, &r, &c)?))
                    .await?;
                return match store::verdict(rule, &checks) {
                    GroupVerdict::Waiting(_) => Ok(()),
                    GroupVerdict::Green => land(app, entry, rule, &g, suspects).await,
                    GroupVerdict::Failed(why) => fail(app, &g, &why, suspects).await,
                };
            }
        }
    }

    // 3. A new group.
    if ready.is_empty() {
        return Ok(());
    }
    let size = store::batch_size(rule.max_batch, suspects);
    ready.truncate(size);
    build(app, entry, branch, ready).await
}

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// The tip of `branch` in the repository, `None` when it does not exist.
async fn branch_tip(entry: &RepoEntry, branch: &str) -> anyhow::Result<Option<String>> {
    let (path, name) = (entry.path.clone(), refs::branch_ref(branch));
    Ok(tokio::task::spawn_blocking(move || {
        let git = Repository::open_bare(&path).ok()?;
        let tip = git.find_reference(&name).ok()?.peel_to_commit().ok()?.id();
        Some(tip.to_string())
    })
    .await?)
}

async fn drop_entry(app: &Arc<App>, intent: &Intent, reason: &str) -> anyhow::Result<()> {
    let (repo, patch, why) = (
        intent.repo.clone(),
        intent.patch.clone(),
        reason.to_string(),
    );
    let dropped = app
        .writer
        .write("drop a merge queue entry", move |conn, now| {
            Ok(merge_intents::dequeue(
                conn, &repo, &patch, None, &why, now,
            )?)
        })
        .await?;
    if dropped.is_some() {
        tracing::info!(
            repo = intent.repo,
            patch = intent.patch,
            "merge queue entry dropped: {reason}"
        );
    }
    Ok(())
}

async fn finish(app: &Arc<App>, g: &Group, state: &'static str, why: &str) -> anyhow::Result<()> {
    let (r, b, n, why) = (g.repo.clone(), g.branch.clone(), g.n, why.to_string());
    tracing::info!(
        repo = g.repo,
        branch = g.branch,
        group = g.n,
        "merge group {state}: {why}"
    );
    app.writer
        .write("end a merge group", move |conn, now| {
            store::finish(conn, &r, &b, n, state, Some(&why), now)?;
            Ok(())
        })
        .await
}

/// What building a group made in git.
struct Built {
    base: Oid,
    commit: Oid,
    members: Vec<Member>,
    /// Patches that conflict with the group so far: (patch, reason).
    conflicts: Vec<(String, String)>,
}

/// Merge `ready` onto the branch's tip, one after another (objects only).
fn build_in_git(
    git: &Repository,
    branch: &str,
    ready: &[(Intent, PatchDetail)],
) -> anyhow::Result<Option<Built>> {
    let Ok(base) = git
        .find_reference(&refs::branch_ref(branch))
        .and_then(|r| r.peel_to_commit())
        .map(|c| c.id())
    else {
        return Ok(None);
    };
    let mut tip = base;
    let (mut members, mut conflicts) = (Vec::new(), Vec::new());
    for (intent, detail) in ready {
        let Some(latest) = detail.latest() else {
            continue;
        };
        let Some(head) = Oid::from_str(&latest.head)
            .ok()
            .filter(|oid| git.find_commit(*oid).is_ok())
        else {
            conflicts.push((
                intent.patch.clone(),
                format!("revision {} is missing from the repository", latest.n),
            ));
            continue;
        };
        let commit = if head == tip || git.graph_descendant_of(tip, head)? {
            // Already in: nothing to add.
            head
        } else if git.graph_descendant_of(head, tip)? {
            tip = head;
            head
        } else {
            let ours = git.find_commit(tip)?;
            let theirs = git.find_commit(head)?;
            let mut index = git.merge_commits(&ours, &theirs, None)?;
            if index.has_conflicts() {
                let paths = patch_merge::conflict_paths(&index)?;
                conflicts.push((
                    intent.patch.clone(),
                    format!(
                        "conflicts with the merge group of '{branch}' (its base and the patches \
                         queued before it) in {paths}; push a revision rebased onto {branch}"
                    ),
                ));
                continue;
            }
            let tree = git.find_tree(index.write_tree_to(git)?)?;
            let sig = patch_merge::signature(&intent.requester)
                .map_err(|e| anyhow::anyhow!("merge commit author: {e}"))?;
            let message = format!(
                "Merge patch {}: {}\n\nRevision {} of the patch onto {branch}, in its merge queue.\n\nPatch: {}\n",
                short(&detail.patch.id),
                detail.patch.title,
                latest.n,
                detail.patch.id
            );
            tip = git.commit(None, &sig, &sig, &message, &tree, &[&ours, &theirs])?;
            tip
        };
        members.push(Member {
            patch: intent.patch.clone(),
            revision: latest.n,
            commit: commit.to_string(),
        });
    }
    Ok(Some(Built {
        base,
        commit: tip,
        members,
        conflicts,
    }))
}

/// Build the next group of `branch` from `ready`, drop the patches that
/// conflict with it, record it and write its ref.
async fn build(
    app: &Arc<App>,
    entry: &RepoEntry,
    branch: &str,
    ready: Vec<(Intent, PatchDetail)>,
) -> anyhow::Result<()> {
    let (path, b) = (entry.path.clone(), branch.to_string());
    let built = tokio::task::spawn_blocking(move || {
        let git = Repository::open_bare(&path)?;
        build_in_git(&git, &b, &ready)
    })
    .await??;
    let Some(built) = built else {
        return Ok(());
    };
    let (repo, b, path) = (entry.name.clone(), branch.to_string(), entry.path.clone());
    let opened = app
        .writer
        .write("build a merge group", move |conn, now| {
            for (patch, reason) in &built.conflicts {
                merge_intents::dequeue(conn, &repo, patch, None, reason, now)?;
            }
            if built.members.is_empty() {
                return Ok(None);
            }
            let (group, _seq) = store::open(
                conn,
                &repo,
                &b,
                &built.commit.to_string(),
                &built.base.to_string(),
                &built.members,
                now,
            )?;
            // The ref CI fetches; written before the transaction commits,
            // so a recorded group always has it.
            let git = Repository::open_bare(&path)?;
            git.reference(
                &refs::queue_group_ref(&b, group.n),
                built.commit,
                true,
                &format!("git-collab: merge group {}", group.n),
            )?;
            Ok(Some(group))
        })
        .await?;
    if let Some(g) = opened {
        tracing::info!(
            repo = g.repo,
            branch = g.branch,
            group = g.n,
            commit = g.commit,
            patches = g.members.len(),
            "merge group built"
        );
    }
    Ok(())
}

/// A group's required checks failed: end it, and drop its patch when it
/// held only one (the breaker), else bisect.
async fn fail(app: &Arc<App>, g: &Group, why: &[String], suspects: i64) -> anyhow::Result<()> {
    let reason = format!(
        "required checks failed on merge group {} (commit {}): {}",
        g.n,
        short(&g.commit),
        why.join(", ")
    );
    let (after, breaker) = store::after_group(suspects, g.members.len(), false);
    let group = g.clone();
    tracing::info!(repo = g.repo, branch = g.branch, group = g.n, "{reason}");
    app.writer
        .write("fail a merge group", move |conn, now| {
            let g = &group;
            if store::finish(conn, &g.repo, &g.branch, g.n, "failed", Some(&reason), now)?.is_none()
            {
                return Ok(());
            }
            store::set_suspects(conn, &g.repo, &g.branch, after)?;
            if breaker {
                for m in &g.members {
                    merge_intents::dequeue(conn, &g.repo, &m.patch, None, &reason, now)?;
                }
            }
            Ok(())
        })
        .await
}

/// Why a member of a green group may not land now.
enum Hold {
    /// Waiting may mend it (votes): the group is stale, the entry stays.
    Wait(String),
    /// It cannot merge (fencing): the entry is dropped with the reason.
    Drop(String),
}

/// Check a member again inside the landing transaction.
fn recheck(
    conn: &crate::db::sql::Connection,
    w: &patches::WriteCtx<'_>,
    m: &Member,
    intent: Option<&Intent>,
    rule: &MergeRule,
    base_fenced: bool,
) -> Result<(), Hold> {
    let Some(intent) = intent.filter(|i| i.revision == m.revision) else {
        return Err(Hold::Wait(format!(
            "patch {} left the queue",
            short(&m.patch)
        )));
    };
    let detail = patches::show(conn, w.repo, &m.patch).map_err(|e| Hold::Wait(e.to_string()))?;
    if detail.patch.status != PatchStatus::Open || detail.latest().map(|r| r.n) != Some(m.revision)
    {
        return Err(Hold::Wait(format!(
            "patch {} changed while its group was tested",
            short(&m.patch)
        )));
    }
    patches::rule_allows(&detail, rule).map_err(Hold::Wait)?;
    let mc = patch_merge::MergeCtx {
        w,
        rule: rule.clone(),
        base_fenced,
        token: intent.lease_token,
    };
    match patch_merge::check_fence(conn, w, &detail, &mc) {
        Ok(()) => Ok(()),
        Err(patch_merge::MergeError::Fenced { message, .. }) => Err(Hold::Drop(message)),
        Err(e) => Err(Hold::Wait(e.to_string())),
    }
}

/// A green group: fast-forward the base to it and mark every patch in it
/// merged, in one transaction (see the module doc).
async fn land(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    g: &Group,
    suspects: i64,
) -> anyhow::Result<()> {
    let lock = patch_merge::merge_lock(&entry.name);
    let _turn = lock.lock().await;
    let base_ref = refs::branch_ref(&g.branch);
    let (old, new) = (Oid::from_str(&g.base)?, Oid::from_str(&g.commit)?);
    // What the move merges or fixes besides the group's patches, exactly
    // as a push of it would.
    let plan = {
        let (path, name, update) = (
            entry.path.clone(),
            entry.name.clone(),
            RefUpdate {
                old: Some(old),
                new: Some(new),
                refname: base_ref.clone(),
            },
        );
        let members = g.members.clone();
        app.reads
            .read(move |reader| {
                let git = Repository::open_bare(&path)?;
                let plan = merge_scan::plan(&git, reader, &name, std::slice::from_ref(&update))
                    .map_err(|e| anyhow::anyhow!(e))?;
                Ok(members.iter().fold(plan, |p, m| p.without_patch(&m.patch)))
            })
            .await?
    };
    let base_fenced = crate::authz::base_is_fenced(app, entry, &g.branch);
    let max_body = usize::try_from(app.config.max_issue_body).unwrap_or(usize::MAX);
    let (path, group, rule2, ref2) = (
        entry.path.clone(),
        g.clone(),
        rule.clone(),
        base_ref.clone(),
    );
    let (after, _) = store::after_group(suspects, g.members.len(), true);
    let done = app
        .writer
        .write("land a merge group", move |conn, now| {
            let g = &group;
            let server = Person {
                principal: "git-collab".into(),
                name: "git-collab".into(),
                key: None,
            };
            let mut requesters = Vec::new();
            for m in &g.members {
                let intent = merge_intents::get(conn, &g.repo, &m.patch)?;
                let actor = intent
                    .as_ref()
                    .map_or_else(|| server.clone(), |i| i.requester.clone());
                let w = patches::WriteCtx {
                    repo: &g.repo,
                    actor: &actor,
                    max_body,
                    now,
                };
                match recheck(conn, &w, m, intent.as_ref(), &rule2, base_fenced) {
                    Ok(()) => requesters.push(actor.clone()),
                    Err(Hold::Wait(why)) => {
                        store::finish(conn, &g.repo, &g.branch, g.n, "stale", Some(&why), now)?;
                        return Ok(false);
                    }
                    Err(Hold::Drop(why)) => {
                        merge_intents::dequeue(conn, &g.repo, &m.patch, None, &why, now)?;
                        let why = format!("patch {} was dropped: {why}", short(&m.patch));
                        store::finish(conn, &g.repo, &g.branch, g.n, "stale", Some(&why), now)?;
                        return Ok(false);
                    }
                }
            }
            let git = Repository::open_bare(&path)?;
            let message = format!("git-collab: merge group {} of {}", g.n, g.branch);
            if git
                .reference_matching(&ref2, new, true, old, &message)
                .is_err()
            {
                let why = format!("the base branch '{}' moved", g.branch);
                store::finish(conn, &g.repo, &g.branch, g.n, "stale", Some(&why), now)?;
                return Ok(false);
            }
            let recorded = (|| -> anyhow::Result<()> {
                for (m, actor) in g.members.iter().zip(&requesters) {
                    let w = patches::WriteCtx {
                        repo: &g.repo,
                        actor,
                        max_body,
                        now,
                    };
                    let by = MergedBy::Queue {
                        branch: g.branch.clone(),
                        group: g.n,
                        group_commit: g.commit.clone(),
                    };
                    patches::mark_merged(conn, &w, &m.patch, &m.commit, &by)
                        .map_err(|e| anyhow::anyhow!("marking {} merged: {e}", short(&m.patch)))?;
                }
                let first = requesters.first().unwrap_or(&server);
                Recorded::ref_updated(&g.repo, &ref2, &g.base, &g.commit, &first.principal)
                    .append_in(conn, now)?;
                merge_scan::apply(conn, &plan, &g.repo, first, max_body, now);
                store::finish(conn, &g.repo, &g.branch, g.n, "merged", None, now)?;
                store::set_suspects(conn, &g.repo, &g.branch, after)?;
                Ok(())
            })();
            if let Err(e) = recorded {
                undo(&git, &ref2, old, new);
                return Err(e);
            }
            Ok(true)
        })
        .await;
    match done {
        Ok(true) => {
            tracing::info!(
                repo = g.repo,
                branch = g.branch,
                group = g.n,
                commit = g.commit,
                patches = g.members.len(),
                "merge group merged"
            );
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e) => {
            // The transaction did not commit: put the branch back if this
            // landing moved it.
            let path = entry.path.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Ok(git) = Repository::open_bare(&path) {
                    undo(&git, &base_ref, old, new);
                }
            })
            .await;
            Err(e)
        }
    }
}

/// Put `base_ref` back at `old` if it is still at `new`.
fn undo(git: &Repository, base_ref: &str, old: Oid, new: Oid) {
    let at_new = git
        .find_reference(base_ref)
        .ok()
        .and_then(|r| r.target())
        .is_some_and(|t| t == new);
    if at_new {
        if let Err(e) =
            git.reference_matching(base_ref, old, true, new, "git-collab: undo a merge group")
        {
            tracing::error!("could not put {base_ref} back after a failed merge group: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::patches::{Patch, Revision};

    fn person(p: &str) -> Person {
        Person {
            principal: p.into(),
            name: p.into(),
            key: None,
        }
    }

    fn detail(revisions: i64) -> PatchDetail {
        PatchDetail {
            patch: Patch {
                repo: "r.git".into(),
                id: "p".repeat(40),
                title: "t".into(),
                body: String::new(),
                base: "main".into(),
                author: person("alice"),
                created_ms: 0,
                updated_ms: 0,
                status: PatchStatus::Open,
                merge: None,
                imported: false,
                revision_count: revisions,
                comment_count: 0,
            },
            revisions: (1..=revisions)
                .map(|n| Revision {
                    n,
                    head: format!("{n:040}"),
                    base_commit: "b".repeat(40),
                    base_tip: None,
                    author: person("alice"),
                    at_ms: 0,
                    lease_holders: Vec::new(),
                })
                .collect(),
            reviews: Vec::new(),
            comments: Vec::new(),
            issues: Vec::new(),
        }
    }

    fn intent(revision: i64) -> Intent {
        Intent {
            repo: "r.git".into(),
            patch: "p".repeat(40),
            revision,
            requester: person("alice"),
            lease_token: None,
            created_at: 0,
        }
    }

    /// A queue entry is ready on its votes alone (the checks are the
    /// group's); missing votes wait; a new revision, a closed patch or a
    /// lost write right drops it.
    #[test]
    fn entry_decisions() {
        let rule = MergeRule {
            required_checks: vec!["ci/test".into()],
            queue: true,
            ..Default::default()
        };
        assert_eq!(decide(&intent(1), &detail(1), &rule, true), Entry::Ready);
        let voted = MergeRule {
            approvals: 1,
            ..rule.clone()
        };
        assert_eq!(decide(&intent(1), &detail(1), &voted, true), Entry::Wait);
        assert!(matches!(
            decide(&intent(1), &detail(2), &rule, true),
            Entry::Drop(r) if r.contains("revision 2 was pushed")
        ));
        assert!(matches!(
            decide(&intent(1), &detail(1), &rule, false),
            Entry::Drop(r) if r.contains("may no longer write")
        ));
        let mut closed = detail(1);
        closed.patch.status = PatchStatus::Closed;
        assert!(matches!(
            decide(&intent(1), &closed, &rule, true),
            Entry::Drop(r) if r == "the patch is closed"
        ));
    }
}
