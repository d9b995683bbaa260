//! The merge queue of a branch (a merge rule with `queue = true`): queued
//! patches are tested together on a merge-group commit before the base
//! moves, and land together when the group's required checks are green.
//!
//! The entries are the branch's merge intents (`collab-patch merge`, with
//! or without `--when-green`, records one when the rule queues), in queue
//! order; the groups and the per-branch state are in `collab.db`
//! (`collab_store::merge_queue`), so a queue survives a restart and every node sees
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
//!    revision was pushed, the requester may no longer write, a lease the
//!    queue held for it was released or broken: `queue_holds::ended`). Entries
//!    whose votes are not yet sufficient wait (they are skipped, not
//!    dropped); the rest are *ready*.
//! 2. The groups under test (one, a round of several, or a train): each
//!    is stale (ended) when the base branch moved (or, in a train, the
//!    group it was built on failed or ended) or one of its patches left
//!    the queue; otherwise its required checks decide: pending or missing
//!    waits; green lands it (the base fast-forwards to the group commit and
//!    every patch in it is marked merged, in one transaction; the other
//!    groups under test end stale); a finished failure fails it and starts
//!    or continues the search for the patch that broke it.
//! 3. Nothing under test: build from the head of the ready entries either
//!    one group of `max_batch` patches (or, while bisecting, the first half
//!    of the suspects), or, while searching by exclusion, a round of
//!    groups over the suspects. With `train = true` and no search, the
//!    groups of a *merge train* instead: up to `max_parallel` under test,
//!    each built on the one before (`built_on`), more added on top while
//!    there is room; they land one by one, each only at the head (its base
//!    is the tip), and a failure is acted on only at the head, the groups
//!    built on a failed one ending stale at once. A group of fewer than
//!    `min_batch` patches waits for its oldest to have waited
//!    `batch_wait`. Each patch enters the group so far by the
//!    rule's `queue_method`: merged (fast-forward when it can) or its
//!    commits rebased; a patch that conflicts is dropped with the
//!    conflicting paths. Each group's commit goes to
//!    `refs/collab/queue/<branch>/<n>` and `merge_group.checks_requested`
//!    announces it (webhooks follow).
//!
//! The search for a breaker (docs/checks.md, "Finding the patch that
//! broke a group"). A failed group of several patches makes them the
//! suspects. With `max_parallel` >= 2, a *round* tests at once
//! `k = min(suspects, max_parallel)` exclusion groups: the suspects split
//! into `k` chunks in queue order ([`store::chunks`]), group `i` holds
//! every suspect but chunk `i`. With one breaker among them, exactly the
//! group without its chunk is green: it lands (when several are green,
//! the one leaving out the latest chunk) and that chunk becomes the
//! suspects of the next round; a chunk of one patch is the breaker and is
//! dropped, naming the group that failed with it and the one that passed
//! without it. A round in which every group failed holds two or more
//! breakers: the suspects are bisected instead (as with
//! `max_parallel = 1`): the next group holds the first half; a passing
//! half lands and leaves the rest suspect; a failing half is halved
//! again; a single patch that fails alone is the breaker and is dropped.
//! The queue then goes on with full batches. A breaker, or a patch that
//! conflicts with its group, is *evicted* (`merge_intents::evict`): the
//! issue whose lease it held goes back to its author for
//! `leases.eviction_grace` (`queue_holds`).

use std::sync::Arc;

use git2::{Oid, Repository};

use crate::app::App;
use crate::events::Recorded;
use crate::hooks::merge_scan;
use crate::hooks::RefUpdate;
use crate::patch_merge;
use crate::repos::RepoEntry;
use collab_record::refs;
use collab_store::issues::Person;
use collab_store::merge_intents::{self, Intent};
use collab_store::merge_queue::{self as store, Group, GroupVerdict, How, Member, Search};
use collab_store::patches::{
    self, MergeRule, MergedBy, PatchDetail, PatchError, PatchStatus, QueueMethod,
};

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
            .read(move |conn| Ok(store::live(conn, &r, &b)?))
            .await?;
        if left.is_empty() {
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
        // A group that landed or failed: land the next groups of a train
        // and build the next groups in the same look rather than at the
        // next one (a train of `max_parallel` groups lands one by one).
        let mut steps = 0;
        loop {
            match step(app, &entry, &rule, branch).await {
                Ok(true) if steps <= rule.max_parallel => steps += 1,
                other => break other.map(|_| ()),
            }
        }
    } else {
        // The rule stopped queueing: the groups under test are void (the
        // intents go on as plain queued merges, `auto_merge`).
        let (r, b) = (repo.to_string(), branch.to_string());
        app.writer
            .write("end a merge group", move |conn, now| {
                for g in store::live(conn, &r, &b)? {
                    store::finish(
                        conn,
                        &r,
                        &b,
                        g.n,
                        "stale",
                        Some("the merge rule no longer queues"),
                        now,
                    )?;
                    crate::metrics::merge_group("stale");
                }
                store::set_search(conn, &r, &b, Search::NONE)?;
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
    if let Err(reason) = crate::auto_merge::still_queued(intent, detail, may_write) {
        return Entry::Drop(reason);
    }
    match patches::rule_allows(detail, rule) {
        Ok(()) => Entry::Ready,
        Err(_) => Entry::Wait,
    }
}

/// One step of `branch`'s queue (see the module doc); whether a group
/// landed or failed (the next groups can be built at once).
async fn step(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    branch: &str,
) -> anyhow::Result<bool> {
    let repo = entry.name.clone();
    let (r, b) = (repo.clone(), branch.to_string());
    type Read = (
        Vec<(Intent, Result<PatchDetail, PatchError>, Option<String>)>,
        Vec<Group>,
        Search,
    );
    let (entries, live, search): Read = app
        .reads
        .read(move |conn| {
            let now = chrono::Utc::now().timestamp();
            let entries = store::entries(conn, &r, &b, ENTRIES_PER_LOOK)?
                .into_iter()
                .map(|i| {
                    let d = patches::show(conn, &r, &i.patch);
                    // A tenure the queue held for it ended (released,
                    // broken): the patch leaves the queue.
                    let ended = collab_store::queue_holds::ended(conn, &r, &i.patch, now);
                    ended.map(|e| (i, d, e))
                })
                .collect::<Result<_, _>>()?;
            Ok((
                entries,
                store::live(conn, &r, &b)?,
                store::search(conn, &r, &b)?,
            ))
        })
        .await?;

    // 1. The entries.
    let mut ready: Vec<(Intent, PatchDetail)> = Vec::new();
    for (intent, detail, ended) in entries {
        if let Some(reason) = ended {
            drop_entry(app, &intent, &reason).await?;
            continue;
        }
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

    // 2. The groups under test (several during a round).
    let tip = if live.is_empty() {
        None
    } else {
        branch_tip(entry, branch).await?
    };
    let (mut waiting, mut greens) = (false, Vec::new());
    // A batch tested beside the speculative round over its own patches
    // (`speculate`): while it waits, a green of that round must not land
    // (with nothing broken the batch lands whole).
    let mut batch_waiting = false;
    // The groups still under test after this look's checks, in order: a
    // merge train's groups are each built on the one before.
    let mut standing: Vec<Standing> = Vec::new();
    for g in live {
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
        } else {
            off_base(&g, tip.as_deref(), &standing, branch)
        };
        if let Some(why) = stale {
            finish(app, &g, "stale", &why).await?;
            continue;
        }
        let (r, c) = (repo.clone(), g.commit.clone());
        let checks = app
            .reads
            .read(move |conn| Ok(collab_store::checks::list(conn, &r, &c)?))
            .await?;
        let speculated = g.excluded.is_none() && store::speculated_over(search, g.n);
        let verdict = store::verdict(rule, &checks);
        // A group of a train behind another still under test: it lands
        // after the groups before it, and its failure is acted on once
        // they have landed (its patches are then the head of the queue);
        // the groups built on it end stale at once.
        let behind = tip.as_deref() != Some(g.base.as_str());
        standing.push(Standing {
            n: g.n,
            commit: g.commit.clone(),
            patches: g.members.iter().map(|m| m.patch.clone()).collect(),
            plain: g.excluded.is_none() && !speculated,
            failed: matches!(verdict, GroupVerdict::Failed(_)),
        });
        match verdict {
            GroupVerdict::Waiting(_) => {
                waiting = true;
                batch_waiting |= speculated;
            }
            GroupVerdict::Green | GroupVerdict::Failed(_) if behind => waiting = true,
            GroupVerdict::Green => greens.push(g),
            GroupVerdict::Failed(why) if g.excluded.is_some() || speculated => {
                // One group of a round (or the batch a speculative round
                // searches already): the round decides (below).
                finish(app, &g, "failed", &failure(&g, &why)).await?;
            }
            GroupVerdict::Failed(why) => {
                return fail(app, &g, &why, search, rule.max_parallel)
                    .await
                    .map(|()| true)
            }
        }
    }
    // A green batch lands whole; of a round's green groups, the one leaving
    // out the latest suspects: the earliest patches of the queue land. Not
    // while the batch of a speculative round may still pass.
    let batch_green = greens.iter().find(|g| g.excluded.is_none());
    if let Some(g) = batch_green.or(greens.last().filter(|_| !batch_waiting)) {
        return land(app, entry, rule, g, search).await;
    }
    // A merge train grows while nothing failed: groups on top of the last
    // one under test, up to `max_parallel` at once.
    let train = rule.train
        && !rule.speculate
        && rule.max_parallel >= 2
        && search.how == How::None
        && standing.iter().all(|s| s.plain && !s.failed);
    if waiting && !(train && standing.len() < usize::try_from(rule.max_parallel)?) {
        return Ok(false);
    }
    // Nothing under test: a round that ended without a green group
    // decides how the search goes on.
    let mut search = search;
    if search.how == How::Exclude && search.round_from > 0 {
        let (r, b) = (repo.clone(), branch.to_string());
        if let Some(next) = app
            .writer
            .write("end a round of merge groups", move |conn, _now| {
                Ok(store::end_round(conn, &r, &b)?)
            })
            .await?
        {
            tracing::info!(
                repo,
                branch,
                "merge queue round ended without a green group: {}",
                next.how.as_str()
            );
            search = next;
        }
    }

    // 3. New groups.
    if ready.is_empty() {
        return Ok(false);
    }
    let now = chrono::Utc::now().timestamp();
    if train {
        // The train's next groups take the patches no group under test
        // holds, in queue order, each group on top of the one before.
        ready.retain(|(i, _)| !standing.iter().any(|s| s.patches.contains(&i.patch)));
        let slots = usize::try_from(rule.max_parallel)?.saturating_sub(standing.len());
        let batches = due_batches(rule, ready, slots, now);
        if batches.is_empty() {
            return Ok(false);
        }
        let tail = standing.last().map(|s| (s.n, s.commit.clone()));
        return build_train(app, entry, rule, branch, tail, batches)
            .await
            .map(|()| false);
    }
    let queued: Vec<(Intent, ())> = ready.iter().map(|(i, _)| (i.clone(), ())).collect();
    if search.how == How::None && due_batches(rule, queued, 1, now).is_empty() {
        return Ok(false);
    }
    let suspects = usize::try_from(search.suspects)
        .unwrap_or(0)
        .min(ready.len());
    if search.how == How::Exclude && rule.max_parallel >= 2 && suspects >= 2 {
        ready.truncate(suspects);
        return build_round(app, entry, rule, branch, ready, search)
            .await
            .map(|()| false);
    }
    let size = store::batch_size(rule.max_batch, search.suspects);
    ready.truncate(size);
    let fresh = search.how == How::None;
    let Some(batch) = build(app, entry, rule, branch, ready.clone()).await? else {
        return Ok(false);
    };
    // `speculate`: the round that would search this batch if it failed is
    // built beside it, so a failure costs one round less (and `k` runs of
    // CI that are thrown away when the batch passes).
    if fresh && rule.speculate && rule.max_parallel >= 2 && batch.members.len() >= 2 {
        ready.retain(|(i, _)| batch.members.iter().any(|m| m.patch == i.patch));
        let search = Search::of(i64::try_from(ready.len())?, How::Exclude);
        build_round(app, entry, rule, branch, ready, search).await?;
    }
    Ok(false)
}

/// A group still under test in this look (see `step`).
struct Standing {
    n: i64,
    commit: String,
    patches: Vec<String>,
    /// A plain group (not one of a round of exclusion groups).
    plain: bool,
    /// Its required checks failed (acted on when it is the head).
    failed: bool,
}

/// Why group `g` no longer stands on what it was built on, if so: a group
/// stands on the base branch's tip, or, in a merge train, on the group it
/// was built on while that one is still under test and has not failed.
fn off_base(g: &Group, tip: Option<&str>, standing: &[Standing], branch: &str) -> Option<String> {
    if tip == Some(g.base.as_str()) {
        return None;
    }
    let Some(on) = g.built_on else {
        return Some(format!("the base branch '{branch}' moved"));
    };
    match standing.iter().find(|s| s.n == on) {
        Some(s) if s.failed => Some(format!("built on failed merge group {on}")),
        Some(s) if s.commit == g.base => None,
        _ => Some(format!(
            "merge group {on}, which it was built on, ended without landing, or the base \
             branch '{branch}' moved"
        )),
    }
}

/// The next groups to build from `ready` (queue order), at most `slots`
/// of at most `max_batch` patches each: a group of fewer than `min_batch`
/// is built only once its oldest entry has waited `batch_wait` seconds
/// (with `batch_wait = 0` at once: a queue never stalls on `min_batch`).
fn due_batches<T>(
    rule: &MergeRule,
    ready: Vec<(Intent, T)>,
    slots: usize,
    now: i64,
) -> Vec<Vec<(Intent, T)>> {
    let max = usize::try_from(rule.max_batch.max(1)).unwrap_or(1);
    let min = usize::try_from(rule.min_batch).unwrap_or(1);
    let mut rest = ready.into_iter();
    let mut due = Vec::new();
    while due.len() < slots {
        let batch: Vec<(Intent, T)> = rest.by_ref().take(max).collect();
        let Some(oldest) = batch.iter().map(|(i, _)| i.created_at).min() else {
            break;
        };
        if batch.len() < min && now - oldest < i64::from(rule.batch_wait) {
            break;
        }
        due.push(batch);
    }
    due
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
    let ended = app
        .writer
        .write("end a merge group", move |conn, now| {
            Ok(store::finish(conn, &r, &b, n, state, Some(&why), now)?)
        })
        .await?;
    if ended.is_some() {
        crate::metrics::merge_group(state);
    }
    Ok(())
}

/// What building a group made in git.
struct Built {
    base: Oid,
    commit: Oid,
    members: Vec<Member>,
    /// Patches that conflict with the group so far: (patch, reason).
    conflicts: Vec<(String, String)>,
    /// A group built on another group under test (`onto`) stopped before a
    /// patch that conflicts with it: that patch is not dropped (the group
    /// it conflicts with may fail) but waits for a group on the tip.
    blocked: bool,
}

/// Bring each of `ready` onto the branch's tip, one after another, by
/// `method` (objects only).
fn build_in_git(
    git: &Repository,
    branch: &str,
    ready: &[&(Intent, PatchDetail)],
    method: QueueMethod,
) -> anyhow::Result<Option<Built>> {
    build_onto(git, branch, None, ready, method)
}

/// [`build_in_git`] onto `onto` (the commit of the train's group before)
/// instead of the tip, when given.
fn build_onto(
    git: &Repository,
    branch: &str,
    onto: Option<Oid>,
    ready: &[&(Intent, PatchDetail)],
    method: QueueMethod,
) -> anyhow::Result<Option<Built>> {
    let base = match onto {
        Some(commit) => commit,
        None => match git
            .find_reference(&refs::branch_ref(branch))
            .and_then(|r| r.peel_to_commit())
        {
            Ok(c) => c.id(),
            Err(_) => return Ok(None),
        },
    };
    let mut blocked = false;
    let mut tip = base;
    let (mut members, mut conflicts) = (Vec::new(), Vec::new());
    for (intent, detail) in ready.iter().copied() {
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
            let added = match method {
                QueueMethod::Merge => merge_onto(git, branch, tip, head, intent, detail)?,
                QueueMethod::Rebase => rebase_onto(git, branch, tip, head, intent)?,
            };
            match added {
                Ok(commit) => {
                    tip = commit;
                    commit
                }
                Err(_) if onto.is_some() => {
                    blocked = true;
                    break;
                }
                Err(reason) => {
                    conflicts.push((intent.patch.clone(), reason));
                    continue;
                }
            }
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
        blocked,
    }))
}

fn conflict_reason(branch: &str, paths: &str) -> String {
    format!(
        "conflicts with the merge group of '{branch}' (its base and the patches queued before \
         it) in {paths}; push a revision rebased onto {branch}"
    )
}

/// A merge commit of `head` onto `tip` (`queue_method = "merge"`), or why
/// the patch cannot enter the group.
fn merge_onto(
    git: &Repository,
    branch: &str,
    tip: Oid,
    head: Oid,
    intent: &Intent,
    detail: &PatchDetail,
) -> anyhow::Result<Result<Oid, String>> {
    let ours = git.find_commit(tip)?;
    let theirs = git.find_commit(head)?;
    let mut index = git.merge_commits(&ours, &theirs, None)?;
    if index.has_conflicts() {
        let paths = patch_merge::conflict_paths(&index)?;
        return Ok(Err(conflict_reason(branch, &paths)));
    }
    let tree = git.find_tree(index.write_tree_to(git)?)?;
    let sig = patch_merge::signature(&intent.requester)
        .map_err(|e| anyhow::anyhow!("merge commit author: {e}"))?;
    let message = format!(
        "Merge patch {}: {}\n\nRevision {} of the patch onto {branch}, in its merge queue.\n\nPatch: {}\n",
        short(&detail.patch.id),
        detail.patch.title,
        intent.revision,
        detail.patch.id
    );
    Ok(Ok(git.commit(
        None,
        &sig,
        &sig,
        &message,
        &tree,
        &[&ours, &theirs],
    )?))
}

/// The patch's commits not yet in `tip`, cherry-picked in order onto it
/// (`queue_method = "rebase"`): the last one, or why the patch cannot
/// enter the group. Each keeps its author and message; the committer is
/// the requester. A commit whose change is already in adds nothing.
fn rebase_onto(
    git: &Repository,
    branch: &str,
    tip: Oid,
    head: Oid,
    intent: &Intent,
) -> anyhow::Result<Result<Oid, String>> {
    let committer = patch_merge::signature(&intent.requester)
        .map_err(|e| anyhow::anyhow!("rebased commit committer: {e}"))?;
    let mut walk = git.revwalk()?;
    walk.push(head)?;
    walk.hide(tip)?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)?;
    let mut onto = git.find_commit(tip)?;
    for oid in walk {
        let commit = git.find_commit(oid?)?;
        if commit.parent_count() > 1 {
            return Ok(Err(format!(
                "holds merge commit {} and the merge rule of '{branch}' rebases \
                 (queue_method = \"rebase\"); push a revision without merges",
                short(&commit.id().to_string())
            )));
        }
        let mut index = git.cherrypick_commit(&commit, &onto, 0, None)?;
        if index.has_conflicts() {
            let paths = patch_merge::conflict_paths(&index)?;
            return Ok(Err(conflict_reason(branch, &paths)));
        }
        let tree_id = index.write_tree_to(git)?;
        if tree_id == onto.tree_id() {
            continue;
        }
        let tree = git.find_tree(tree_id)?;
        let message = String::from_utf8_lossy(commit.message_bytes()).into_owned();
        let new = git.commit(
            None,
            &commit.author(),
            &committer,
            &message,
            &tree,
            &[&onto],
        )?;
        onto = git.find_commit(new)?;
    }
    Ok(Ok(onto.id()))
}

/// Write group `n`'s ref (before the transaction recording it commits, so
/// a recorded group always has it).
fn write_group_ref(
    path: &std::path::Path,
    branch: &str,
    n: i64,
    commit: Oid,
) -> anyhow::Result<()> {
    let git = Repository::open_bare(path)?;
    git.reference(
        &refs::queue_group_ref(branch, n),
        commit,
        true,
        &format!("git-collab: merge group {n}"),
    )?;
    Ok(())
}

/// Record the group `built` made (its exclusions in a round, the group it
/// is built on in a train) and write its ref, inside the writer's
/// transaction: the ref is written before the transaction commits, so a
/// recorded group always has it.
#[allow(clippy::too_many_arguments)]
fn record_group(
    conn: &collab_store::sql::Connection,
    repo: &str,
    branch: &str,
    path: &std::path::Path,
    built: &Built,
    excluded: Option<&[String]>,
    built_on: Option<i64>,
    now: i64,
) -> anyhow::Result<Group> {
    let (group, _seq) = store::open(
        conn,
        repo,
        branch,
        &built.commit.to_string(),
        &built.base.to_string(),
        &built.members,
        excluded,
        built_on,
        now,
    )?;
    write_group_ref(path, branch, group.n, built.commit)?;
    Ok(group)
}

/// Build the next group of `branch` from `ready`, drop the patches that
/// conflict with it, record it and write its ref.
async fn build(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    branch: &str,
    ready: Vec<(Intent, PatchDetail)>,
) -> anyhow::Result<Option<Group>> {
    let (path, b, method) = (entry.path.clone(), branch.to_string(), rule.queue_method);
    let built = tokio::task::spawn_blocking(move || {
        let git = Repository::open_bare(&path)?;
        build_in_git(&git, &b, &ready.iter().collect::<Vec<_>>(), method)
    })
    .await??;
    let Some(built) = built else {
        return Ok(None);
    };
    let (repo, b, path) = (entry.name.clone(), branch.to_string(), entry.path.clone());
    let opened = app
        .writer
        .write_with_policy("build a merge group", move |conn, now, policy| {
            for (patch, reason) in &built.conflicts {
                merge_intents::evict(conn, &repo, patch, reason, policy, now)?;
            }
            if built.members.is_empty() {
                return Ok(None);
            }
            let group = record_group(conn, &repo, &b, &path, &built, None, None, now)?;
            Ok(Some(group))
        })
        .await?;
    if let Some(g) = &opened {
        crate::metrics::merge_group("built");
        tracing::info!(
            repo = g.repo,
            branch = g.branch,
            group = g.n,
            commit = g.commit,
            patches = g.members.len(),
            "merge group built"
        );
    }
    Ok(opened)
}

/// Build the next groups of `branch`'s merge train from `batches`: the
/// first on `tail` (the last group under test: its number and commit), or
/// on the tip when none, each next one on the one before; record them all
/// in one transaction (announced together, each with `built_on`) and write
/// their refs. A patch that conflicts with a group built on another one
/// under test is not dropped: the train stops before it (see [`Built`]).
async fn build_train(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    branch: &str,
    tail: Option<(i64, String)>,
    batches: Vec<Vec<(Intent, PatchDetail)>>,
) -> anyhow::Result<()> {
    let (path, b, method) = (entry.path.clone(), branch.to_string(), rule.queue_method);
    let onto = tail.as_ref().map(|(_, c)| Oid::from_str(c)).transpose()?;
    let built = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<Built>> {
        let git = Repository::open_bare(&path)?;
        let (mut onto, mut train) = (onto, Vec::new());
        for batch in &batches {
            let Some(built) =
                build_onto(&git, &b, onto, &batch.iter().collect::<Vec<_>>(), method)?
            else {
                break;
            };
            let blocked = built.blocked;
            if built.members.is_empty() && built.conflicts.is_empty() {
                break;
            }
            onto = Some(built.commit);
            train.push(built);
            if blocked {
                break;
            }
        }
        Ok(train)
    })
    .await??;
    if built.is_empty() {
        return Ok(());
    }
    let (repo, b, path) = (entry.name.clone(), branch.to_string(), entry.path.clone());
    let mut on = tail.map(|(n, _)| n);
    let opened = app
        .writer
        .write("build a merge train", move |conn, now| {
            let mut opened = Vec::new();
            for built in &built {
                // Only a group built on the tip drops a conflicting patch.
                for (patch, reason) in &built.conflicts {
                    merge_intents::dequeue(conn, &repo, patch, None, reason, now)?;
                }
                if built.members.is_empty() {
                    break;
                }
                let group = record_group(conn, &repo, &b, &path, built, None, on, now)?;
                on = Some(group.n);
                opened.push(group);
            }
            Ok(opened)
        })
        .await?;
    for g in &opened {
        crate::metrics::merge_group("built");
        tracing::info!(
            repo = g.repo,
            branch = g.branch,
            group = g.n,
            built_on = g.built_on,
            commit = g.commit,
            patches = g.members.len(),
            "merge group of a train built"
        );
    }
    Ok(())
}

/// Build a round of exclusion groups over `suspects` (the head of the
/// ready entries, at least two): one group per chunk
/// ([`store::chunks`]), each every suspect but that chunk, all on the
/// same base and announced at once. When a patch conflicts in any of
/// them it is dropped and the round is left to the next look.
async fn build_round(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    branch: &str,
    suspects: Vec<(Intent, PatchDetail)>,
    search: Search,
) -> anyhow::Result<()> {
    let chunks = store::chunks(suspects.len(), rule.max_parallel);
    let (path, b, method) = (entry.path.clone(), branch.to_string(), rule.queue_method);
    let built = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let git = Repository::open_bare(&path)?;
        let mut round = Vec::new();
        for chunk in &chunks {
            let kept: Vec<&(Intent, PatchDetail)> = suspects
                .iter()
                .enumerate()
                .filter(|(i, _)| !chunk.contains(i))
                .map(|(_, s)| s)
                .collect();
            let excluded: Vec<String> = suspects[chunk.clone()]
                .iter()
                .map(|(i, _)| i.patch.clone())
                .collect();
            if let Some(built) = build_in_git(&git, &b, &kept, method)? {
                round.push((built, excluded));
            }
        }
        Ok(round)
    })
    .await??;
    if built.is_empty() {
        return Ok(());
    }
    let (repo, b, path) = (entry.name.clone(), branch.to_string(), entry.path.clone());
    let opened = app
        .writer
        .write_with_policy("build a round of merge groups", move |conn, now, policy| {
            let mut conflicts: Vec<&(String, String)> =
                built.iter().flat_map(|(b, _)| &b.conflicts).collect();
            conflicts.sort();
            conflicts.dedup_by(|a, b| a.0 == b.0);
            for (patch, reason) in &conflicts {
                merge_intents::evict(conn, &repo, patch, reason, policy, now)?;
            }
            if !conflicts.is_empty() {
                return Ok(Vec::new());
            }
            let mut opened = Vec::new();
            for (built, excluded) in &built {
                if built.members.is_empty() {
                    continue;
                }
                let group = record_group(conn, &repo, &b, &path, built, Some(excluded), None, now)?;
                opened.push(group);
            }
            if let Some(first) = opened.first() {
                store::set_search(
                    conn,
                    &repo,
                    &b,
                    Search {
                        round_from: first.n,
                        ..search
                    },
                )?;
            }
            Ok(opened)
        })
        .await?;
    for _ in &opened {
        crate::metrics::merge_group("built");
    }
    if let (Some(first), Some(last)) = (opened.first(), opened.last()) {
        tracing::info!(
            repo = first.repo,
            branch = first.branch,
            groups = opened.len(),
            from = first.n,
            to = last.n,
            suspects = search.suspects,
            "merge group round built"
        );
    }
    Ok(())
}

/// The reason a group failed: its failing checks.
fn failure(g: &Group, why: &[String]) -> String {
    format!(
        "required checks failed on merge group {} (commit {}): {}",
        g.n,
        short(&g.commit),
        why.join(", ")
    )
}

/// A plain group's required checks failed: end it, and drop its patch when
/// it held only one (the breaker), else search its patches for the
/// breaker (a round of exclusion groups, or bisection).
async fn fail(
    app: &Arc<App>,
    g: &Group,
    why: &[String],
    search: Search,
    max_parallel: u32,
) -> anyhow::Result<()> {
    let reason = failure(g, why);
    let (after, breaker) = store::after_failure(search, g.members.len(), max_parallel);
    let group = g.clone();
    tracing::info!(repo = g.repo, branch = g.branch, group = g.n, "{reason}");
    let thrown = app
        .writer
        .write_with_policy("fail a merge group", move |conn, now, policy| {
            let g = &group;
            if store::finish(conn, &g.repo, &g.branch, g.n, "failed", Some(&reason), now)?.is_none()
            {
                return Ok(None);
            }
            // The groups of a train built on it: their patches go back to
            // waiting, to be grouped again once the breaker is handled.
            let why = format!("built on failed merge group {}", g.n);
            let mut thrown = 0;
            for other in store::live(conn, &g.repo, &g.branch)? {
                if other.built_on.is_some() && other.n > g.n {
                    store::finish(conn, &g.repo, &g.branch, other.n, "stale", Some(&why), now)?;
                    thrown += 1;
                }
            }
            store::set_search(conn, &g.repo, &g.branch, after)?;
            if breaker {
                for m in &g.members {
                    merge_intents::evict(conn, &g.repo, &m.patch, &reason, policy, now)?;
                }
            }
            Ok(Some(thrown))
        })
        .await?;
    if let Some(thrown) = thrown {
        crate::metrics::merge_group("failed");
        for _ in 0..thrown {
            crate::metrics::merge_group("stale");
        }
    }
    Ok(())
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
    conn: &collab_store::sql::Connection,
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
/// merged, in one transaction (see the module doc). The other groups under
/// test end stale; an exclusion group's excluded suspects are searched
/// next, or, when one patch, it is the breaker and dropped.
async fn land(
    app: &Arc<App>,
    entry: &RepoEntry,
    rule: &MergeRule,
    g: &Group,
    search: Search,
) -> anyhow::Result<bool> {
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
    let (after, breaker) = match &g.excluded {
        None => (store::after_pass(search, g.members.len()), None),
        Some(ex) if ex.len() == 1 => (Search::NONE, ex.first().cloned()),
        Some(ex) => (
            Search::of(i64::try_from(ex.len()).unwrap_or(i64::MAX), How::Exclude),
            None,
        ),
    };
    let done = app
        .writer
        .write_with_policy("land a merge group", move |conn, now, policy| {
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
                let why = format!("merge group {} landed before it", g.n);
                // The groups of a train built on this one stand on its
                // commit, the new tip: they go on.
                let mut train = vec![g.n];
                for other in store::live(conn, &g.repo, &g.branch)? {
                    if other.built_on.is_some_and(|on| train.contains(&on)) {
                        train.push(other.n);
                        continue;
                    }
                    store::finish(conn, &g.repo, &g.branch, other.n, "stale", Some(&why), now)?;
                    crate::metrics::merge_group("stale");
                }
                store::set_search(conn, &g.repo, &g.branch, after)?;
                if let Some(patch) = &breaker {
                    // The group that held it with these failed; this one,
                    // the same without it, passed.
                    let failed = store::last_failed_with(conn, &g.repo, &g.branch, patch)?
                        .and_then(|f| f.reason)
                        .unwrap_or_else(|| "required checks failed on a merge group".into());
                    let reason = format!("{failed}; merge group {} without it passed", g.n);
                    merge_intents::evict(conn, &g.repo, patch, &reason, policy, now)?;
                }
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
            crate::metrics::merge_group("merged");
            tracing::info!(
                repo = g.repo,
                branch = g.branch,
                group = g.n,
                commit = g.commit,
                patches = g.members.len(),
                "merge group merged"
            );
            Ok(true)
        }
        Ok(false) => {
            // Ended stale inside the transaction (a member changed, the
            // base moved).
            crate::metrics::merge_group("stale");
            Ok(false)
        }
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
    use collab_store::patches::{Patch, Revision};

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
                change_id: None,
                depends_on: None,
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
            linked_lease_holders: Vec::new(),
            depends_on_status: None,
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

    fn queued_at(created_at: i64) -> (Intent, ()) {
        (
            Intent {
                created_at,
                ..intent(1)
            },
            (),
        )
    }

    /// Full groups are due at once; a group short of `min_batch` only once
    /// its oldest entry waited `batch_wait`; `batch_wait = 0` never holds
    /// one back; at most `slots` groups.
    #[test]
    fn groups_due_under_min_batch_and_batch_wait() {
        let rule = MergeRule {
            max_batch: 2,
            min_batch: 2,
            batch_wait: 10,
            ..Default::default()
        };
        let sizes = |ready: Vec<(Intent, ())>, slots: usize, now: i64| {
            due_batches(&rule, ready, slots, now)
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>()
        };
        let five = || (0..5).map(|_| queued_at(100)).collect::<Vec<_>>();
        assert_eq!(sizes(five(), 3, 105), [2, 2], "the fifth waits");
        assert_eq!(sizes(five(), 3, 110), [2, 2, 1], "waited batch_wait");
        assert_eq!(sizes(five(), 1, 110), [2]);
        assert_eq!(sizes(vec![queued_at(100)], 3, 109), Vec::<usize>::new());
        assert_eq!(sizes(Vec::new(), 3, 200), Vec::<usize>::new());
        let no_wait = MergeRule {
            batch_wait: 0,
            ..rule.clone()
        };
        assert_eq!(due_batches(&no_wait, vec![queued_at(100)], 3, 100).len(), 1);
    }

    fn group(n: i64, base: &str, built_on: Option<i64>) -> Group {
        Group {
            repo: "r.git".into(),
            branch: "main".into(),
            n,
            commit: format!("c{n}"),
            base: base.into(),
            members: Vec::new(),
            state: "testing".into(),
            excluded: None,
            reason: None,
            created_at: 0,
            finished_at: None,
            built_on,
        }
    }

    fn standing(n: i64, failed: bool) -> Standing {
        Standing {
            n,
            commit: format!("c{n}"),
            patches: Vec::new(),
            plain: true,
            failed,
        }
    }

    /// A group stands on the tip, or on the train's group it was built on
    /// while that one stands and has not failed.
    #[test]
    fn a_train_group_stands_on_the_group_before_it() {
        assert_eq!(
            off_base(&group(1, "tip", None), Some("tip"), &[], "main"),
            None
        );
        assert!(off_base(&group(1, "old", None), Some("tip"), &[], "main")
            .is_some_and(|w| w.contains("moved")));
        let g2 = group(2, "c1", Some(1));
        assert_eq!(
            off_base(&g2, Some("tip"), &[standing(1, false)], "main"),
            None
        );
        assert_eq!(
            off_base(&g2, Some("tip"), &[standing(1, true)], "main").as_deref(),
            Some("built on failed merge group 1")
        );
        assert!(off_base(&g2, Some("tip"), &[], "main").is_some_and(|w| w.contains("group 1")));
        // Group 1 landed: group 2 stands on the tip.
        assert_eq!(off_base(&g2, Some("c1"), &[], "main"), None);
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
