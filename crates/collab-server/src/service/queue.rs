//! `collab-queue show '<repo>' '<branch>'`: a branch's merge queue (a merge
//! rule with `queue = true`; docs/checks.md): its entries in queue order
//! and its merge groups: every one under test (several while a round of
//! exclusion groups searches a failure), then the latest. Needs read.

use collab_proto::replies::queue as wire;

use super::context::{authorize_repo, Context};
use super::reply::reply_line;
use crate::authz::Access;
use crate::repos::RepoEntry;
use collab_proto::verbs::Invocation;
use collab_store::merge_queue::{self as store, Group};

/// How many of a branch's latest groups `show` lists.
pub const GROUPS_SHOWN: i64 = 10;

/// A parsed `collab-queue` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueCmd {
    Show { repo: String, branch: String },
}

impl QueueCmd {
    pub fn repo(&self) -> &str {
        match self {
            QueueCmd::Show { repo, .. } => repo,
        }
    }

    pub fn verb(&self) -> &'static str {
        match self {
            QueueCmd::Show { .. } => "collab-queue show",
        }
    }

    /// `None` for a row of the family this has no arm for.
    pub fn from_invocation(inv: &Invocation<'_>) -> Option<QueueCmd> {
        match inv.verb.action {
            "show" => Some(QueueCmd::Show {
                repo: inv.arg("repo").to_string(),
                branch: inv.arg("branch").to_string(),
            }),
            _ => None,
        }
    }

    /// The level its row asks on the repository.
    pub fn needed_access(&self) -> Access {
        collab_proto::verbs::level(self.verb(), |_| None)
    }
}

/// A group as `collab-queue show` shows it.
pub fn group_shown(g: &Group) -> wire::GroupShown {
    wire::GroupShown {
        group: g.n,
        reference: collab_record::refs::queue_group_ref(&g.branch, g.n),
        commit: g.commit.clone(),
        base: g.base.clone(),
        state: g.state.clone(),
        reason: g.reason.clone(),
        patches: g
            .members
            .iter()
            .map(|m| wire::GroupMember {
                patch: m.patch.clone(),
                revision: m.revision,
                commit: m.commit.clone(),
            })
            .collect(),
        excluded: g.excluded.clone(),
        built_on: g.built_on,
        created_at: crate::events::rfc3339(g.created_at),
        finished_at: g.finished_at.map(crate::events::rfc3339),
    }
}

/// Run one `collab-queue` command.
pub async fn reply(ctx: &Context, cmd: QueueCmd) -> (String, u32) {
    let needed = cmd.needed_access();
    let entry = match authorize_repo(ctx, cmd.repo(), needed, "reading a merge queue needs") {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    match cmd {
        QueueCmd::Show { branch, .. } => show(ctx, &entry, branch).await,
    }
}

async fn show(ctx: &Context, entry: &RepoEntry, branch: String) -> (String, u32) {
    if !git2::Reference::is_valid_name(&collab_record::refs::branch_ref(&branch)) {
        return (
            format!("error: invalid branch name '{}'", branch.escape_default()),
            1,
        );
    }
    let rule = {
        let (app, e) = (ctx.app.clone(), entry.clone());
        tokio::task::spawn_blocking(move || crate::authz::merge_rule(&app, &e))
            .await
            .unwrap_or_default()
    };
    let (r, b) = (entry.name.clone(), branch.clone());
    let read = ctx
        .app
        .reads
        .read(move |conn| {
            Ok((
                store::entries(conn, &r, &b, collab_store::merge_intents::MAX_PER_REPO)?,
                store::recent(conn, &r, &b, GROUPS_SHOWN)?,
                store::live(conn, &r, &b)?,
                store::search(conn, &r, &b)?,
                store::driver(conn, &r, &b)?,
                store::counts(conn, &r, &b)?,
            ))
        })
        .await;
    let (entries, groups, live, search, driver, counts) = match read {
        Ok(read) => read,
        Err(e) => {
            tracing::error!("collab-queue show: {e:#}");
            return ("error: internal error".to_string(), 1);
        }
    };
    let current = live.first();
    let holding = |patch: &str| {
        live.iter()
            .filter(|g| g.members.iter().any(|m| m.patch == patch))
            .map(|g| g.n)
            .collect::<Vec<_>>()
    };
    let reply = wire::QueueShown {
        repo: entry.name.clone(),
        queue: rule.queue,
        max_batch: rule.max_batch,
        max_parallel: rule.max_parallel,
        queue_method: rule.queue_method.as_str().to_string(),
        speculate: rule.speculate,
        train: rule.train,
        min_batch: rule.min_batch,
        batch_wait: rule.batch_wait,
        required_checks: rule.required_checks.clone(),
        entries: entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let in_groups = holding(&e.patch);
                wire::QueueEntry {
                    position: i as u64 + 1,
                    patch: e.patch.clone(),
                    revision: e.revision,
                    requested_by: e.requester.principal.clone(),
                    queued_at: crate::events::rfc3339(e.created_at),
                    in_group: in_groups.first().copied(),
                    in_groups,
                }
            })
            .collect(),
        current_group: current.map(group_shown),
        live_groups: live.iter().map(group_shown).collect(),
        groups: groups.iter().map(group_shown).collect(),
        bisecting: search.suspects,
        search: (search.how != store::How::None).then(|| search.how.as_str().to_string()),
        driven_by: driver.map(|(node, _)| node),
        counts: wire::GroupCounts {
            built: counts.built,
            testing: counts.testing,
            merged: counts.merged,
            failed: counts.failed,
            stale: counts.stale,
        },
        branch,
    };
    (reply_line(&reply), 0)
}
