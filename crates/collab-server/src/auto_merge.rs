//! The driver of queued merges (`collab-patch merge --when-green`): the
//! server merges a queued patch as soon as its merge rule allows it, with
//! no client connected.
//!
//! The intents live in `collab.db` (`collab_store::merge_intents`), so they survive
//! a restart and every node sees them. The driver looks at every intent
//! when the event log moves (a check set, a vote, a push: this node's
//! writes and other nodes' as the event poller publishes them), at the
//! pace of [`crate::paced`] (at least every second: a lease that expired,
//! a policy edited by a push). For each intent it decides, from the patch,
//! its latest revision's checks and the repository's rule read now:
//!
//! - the patch is no longer open, a newer revision was pushed, a required
//!   check finished without passing, or the requester may no longer write:
//!   drop the intent, with `patch.merge_dequeued` naming the reason;
//! - the rule allows the merge: claim the intent (one node merges it; a
//!   claim lapses after [`CLAIM_SECS`] if the node dies) and merge as the
//!   principal that asked, with its `--lease-token` checked now
//!   ([`crate::patch_merge::run`], exactly as the verb does). A refusal that
//!   waiting cannot mend (a conflict, fencing) drops the intent with that
//!   reason; a base branch that moved, or a rule that stopped allowing it
//!   in between, leaves it queued;
//! - otherwise (a check pending or missing, approvals missing): wait.
//!
//! Intents on a repository whose merge rule has `queue = true` are the
//! entries of its branches' merge queues: `crate::merge_queue` drives
//! them, this driver leaves them alone.

use std::sync::Arc;

use crate::app::App;
use crate::patch_merge::{self, MergeError, RunError};
use collab_store::merge_intents::{self as store, Intent};
use collab_store::patches::{self, PatchError, PatchStatus};

/// How long a node's claim on an intent lasts (a merge takes far less).
const CLAIM_SECS: i64 = 120;

/// The most intents one look decides (the verb bounds them per repository).
const PER_LOOK: i64 = 10_000;

/// What one look decided for an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Decision {
    Wait,
    Merge,
    Drop(String),
}

/// Run the driver until `stopping` fires, at [`crate::paced`]'s pace.
pub async fn run(app: Arc<App>, stopping: crate::shutdown::Stop) {
    crate::paced::run(app, stopping, "queued merges", |app, node| async move {
        look(&app, &node).await
    })
    .await
}

/// Decide every intent once.
async fn look(app: &Arc<App>, node: &str) -> anyhow::Result<()> {
    let intents = app
        .reads
        .read(|conn| Ok(store::all(conn, PER_LOOK)?))
        .await?;
    for intent in intents {
        if let Err(e) = drive(app, node, &intent).await {
            tracing::warn!(
                repo = intent.repo,
                patch = intent.patch,
                "queued merge: {e:#}"
            );
        }
    }
    Ok(())
}

/// Decide one intent and act on it.
async fn drive(app: &Arc<App>, node: &str, intent: &Intent) -> anyhow::Result<()> {
    let Some(entry) = crate::repos::find_repo(&app.config.repos_dir, &intent.repo) else {
        // Deleting a repository deletes its rows; a rename moves them. A
        // row whose name resolves to nothing is left for that.
        return Ok(());
    };
    let decision = {
        let (app2, entry2, intent2) = (app.clone(), entry.clone(), intent.clone());
        let rule = tokio::task::spawn_blocking(move || {
            let rule = crate::authz::merge_rule(&app2, &entry2);
            let may =
                crate::authz::principal_may_write(&app2, &intent2.requester.principal, &entry2);
            (rule, may)
        })
        .await?;
        // A branch with a merge queue: `crate::merge_queue` drives it.
        if rule.0.queue {
            return Ok(());
        }
        let (repo, id) = (intent.repo.clone(), intent.patch.clone());
        let read = app
            .reads
            .read(move |conn| {
                Ok(patches::show(conn, &repo, &id).and_then(|d| {
                    let checks = patches::head_checks(conn, &d)?;
                    Ok((d, checks))
                }))
            })
            .await?;
        match read {
            Err(PatchError::NotFound(_)) => Decision::Drop("the patch is gone".into()),
            Err(e) => return Err(anyhow::anyhow!("reading the patch: {e}")),
            Ok((detail, checks)) => decide(intent, &detail, &rule.0, rule.1, &checks),
        }
    };
    match decision {
        Decision::Wait => Ok(()),
        Decision::Drop(reason) => drop_intent(app, intent, &reason).await,
        Decision::Merge => merge(app, node, &entry, intent).await,
    }
}

/// Whether a queued merge `intent` still stands, whatever its checks and
/// votes: the patch is open, its latest revision is the one queued, and
/// the requester may still write. `Ok` is that revision's number; `Err` why
/// the intent is dropped. Shared with the merge queue's entries.
pub(crate) fn still_queued(
    intent: &Intent,
    detail: &patches::PatchDetail,
    may_write: bool,
) -> Result<i64, String> {
    if detail.patch.status != PatchStatus::Open {
        return Err(format!("the patch is {}", detail.patch.status.as_str()));
    }
    let Some(latest) = detail.latest() else {
        return Err("the patch has no revision".into());
    };
    if latest.n != intent.revision {
        return Err(format!(
            "revision {} was pushed; the merge was queued for revision {}",
            latest.n, intent.revision
        ));
    }
    if !may_write {
        return Err(format!(
            "{} may no longer write the repository (or is limited by from= and cannot act unattended)",
            intent.requester.name
        ));
    }
    Ok(latest.n)
}

/// The decision for `intent`, from what was read now.
fn decide(
    intent: &Intent,
    detail: &patches::PatchDetail,
    rule: &patches::MergeRule,
    may_write: bool,
    checks: &[collab_store::checks::Check],
) -> Decision {
    let revision = match still_queued(intent, detail, may_write) {
        Ok(n) => n,
        Err(reason) => return Decision::Drop(reason),
    };
    let failed = patches::failed_checks(detail, rule, checks);
    if !failed.is_empty() {
        return Decision::Drop(format!(
            "required checks failed on revision {revision}: {}",
            failed.join(", ")
        ));
    }
    match patches::verdict(detail, rule, checks) {
        Ok(()) => Decision::Merge,
        Err(_) => Decision::Wait,
    }
}

async fn drop_intent(app: &Arc<App>, intent: &Intent, reason: &str) -> anyhow::Result<()> {
    let (repo, patch, why) = (
        intent.repo.clone(),
        intent.patch.clone(),
        reason.to_string(),
    );
    let dropped = app
        .writer
        .write("drop a queued merge", move |conn, now| {
            Ok(store::dequeue(conn, &repo, &patch, None, &why, now)?)
        })
        .await?;
    if dropped.is_some() {
        tracing::info!(
            repo = intent.repo,
            patch = intent.patch,
            "queued merge dropped: {reason}"
        );
    }
    Ok(())
}

/// Claim `intent` and merge it; a refusal that waiting cannot mend drops it.
async fn merge(
    app: &Arc<App>,
    node: &str,
    entry: &crate::repos::RepoEntry,
    intent: &Intent,
) -> anyhow::Result<()> {
    let (repo, patch, me) = (intent.repo.clone(), intent.patch.clone(), node.to_string());
    let claimed = app
        .writer
        .write("claim a queued merge", move |conn, now| {
            Ok(store::claim(
                conn,
                &repo,
                &patch,
                &me,
                now,
                now + CLAIM_SECS,
            )?)
        })
        .await?;
    // Another node is merging it, or it was dropped meanwhile.
    let Some(intent) = claimed else {
        return Ok(());
    };
    let request = patch_merge::Request {
        app,
        entry,
        patch: intent.patch.clone(),
        merger: intent.requester.clone(),
        token: intent.lease_token,
        revision: Some(intent.revision),
    };
    let outcome = patch_merge::run(request).await;
    let drop_reason = match &outcome {
        Ok(merged) => {
            tracing::info!(
                repo = intent.repo,
                patch = intent.patch,
                commit = %merged.prepared.commit,
                merger = intent.requester.principal,
                "queued merge merged"
            );
            return Ok(());
        }
        // Waiting may mend these: look again.
        Err(RunError::Refused(MergeError::Moved))
        | Err(RunError::KeptMoving)
        | Err(RunError::Refused(MergeError::Patch(PatchError::Rule(_))))
        | Err(RunError::Internal(_)) => None,
        Err(RunError::Refused(MergeError::Fenced { message, .. })) => Some(message.clone()),
        Err(RunError::Refused(e)) => Some(e.to_string()),
    };
    if let Err(RunError::Internal(e)) = &outcome {
        tracing::warn!(
            repo = intent.repo,
            patch = intent.patch,
            "queued merge failed, retrying: {e:#}"
        );
    }
    match drop_reason {
        Some(reason) => drop_intent(app, &intent, &reason).await,
        None => {
            let (repo, patch, me) = (intent.repo.clone(), intent.patch.clone(), node.to_string());
            app.writer
                .write("release a queued merge", move |conn, _now| {
                    Ok(store::unclaim(conn, &repo, &patch, &me)?)
                })
                .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collab_store::checks::Check;
    use collab_store::issues::Person;
    use collab_store::patches::{Patch, PatchDetail, Revision};

    fn person(p: &str) -> Person {
        Person {
            principal: p.into(),
            name: p.into(),
            key: None,
        }
    }

    fn detail(revisions: i64) -> PatchDetail {
        let revs = (1..=revisions)
            .map(|n| Revision {
                n,
                head: format!("{n:040}"),
                base_commit: "b".repeat(40),
                base_tip: None,
                author: person("alice"),
                at_ms: 0,
                lease_holders: Vec::new(),
            })
            .collect();
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
            revisions: revs,
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

    fn check(rev: i64, name: &str, state: &str) -> Check {
        Check {
            commit: format!("{rev:040}"),
            name: name.into(),
            state: state.into(),
            url: None,
            description: None,
            updated_by: "ci".into(),
            updated_at: 0,
        }
    }

    /// Pending or missing waits; success merges; a finished failure, a new
    /// revision, a closed patch or a lost write right drops.
    #[test]
    fn decisions() {
        let rule = patches::MergeRule {
            required_checks: vec!["ci/test".into()],
            ..Default::default()
        };
        let d = detail(1);
        assert_eq!(decide(&intent(1), &d, &rule, true, &[]), Decision::Wait);
        let pending = [check(1, "ci/test", "pending")];
        assert_eq!(
            decide(&intent(1), &d, &rule, true, &pending),
            Decision::Wait
        );
        let green = [check(1, "ci/test", "success")];
        assert_eq!(decide(&intent(1), &d, &rule, true, &green), Decision::Merge);
        let red = [check(1, "ci/test", "failure")];
        assert!(matches!(
            decide(&intent(1), &d, &rule, true, &red),
            Decision::Drop(r) if r.contains("ci/test is failure")
        ));
        // A green check on revision 1 does not count for revision 2, and
        // the intent for revision 1 is dropped.
        let d2 = detail(2);
        assert!(matches!(
            decide(&intent(1), &d2, &rule, true, &green),
            Decision::Drop(r) if r.contains("revision 2 was pushed")
        ));
        assert_eq!(decide(&intent(2), &d2, &rule, true, &green), Decision::Wait);
        assert!(matches!(
            decide(&intent(1), &d, &rule, false, &green),
            Decision::Drop(r) if r.contains("may no longer write")
        ));
        let mut closed = detail(1);
        closed.patch.status = PatchStatus::Closed;
        assert!(matches!(
            decide(&intent(1), &closed, &rule, true, &green),
            Decision::Drop(r) if r == "the patch is closed"
        ));
    }
}
