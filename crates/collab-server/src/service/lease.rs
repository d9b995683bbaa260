//! `collab-lease acquire|renew|release|break|list|show|next`: work claims
//! on issues over SSH, and the work queue's `next`.
//!
//! This module turns a parsed `LeaseCmd` into one reply. Access is
//! `authz`'s (Read lists and shows, Write acquires, renews and releases,
//! Rewind breaks; unknown and unauthorized repositories both get
//! `error: repository not found`), every lease decision is `leases`'s, run
//! through the `Writer` writer, which answers only once the write is
//! durable; the reply is sent after that. A waiting acquire (`--wait`)
//! queues in `leasing::waiters`. What is left here: naming the holder (the
//! caller's principal), resolving the issue id among the issues the server holds
//! (`collab_store::issues`, through the read pool: an acquire needs an existing, open
//! issue),
//! the `leases.max_ttl` check, and the JSON and exit codes: 0 success,
//! 1 error, 3 nothing ready (`next`), 4 lease conflict.
//!
//! ```text
//! {"status":"acquired","repo":"r.git","issue":"<full id>","holder":"<principal>","token":1,
//!  "acquired_at":"…","renewed_at":null,"expires_at":null,"note":null}
//! {"status":"held","repo":"r.git","issue":"<full id>","holder":"<other>","expires_at":"2026-09-05T12:00:00Z"}  exit 4
//! {"status":"locked","repo":"r.git","issue":"<full id>","holder":"<last holder>","locked_until":"…"}  exit 4
//! {"status":"renewed", …same fields as acquired…}
//! {"status":"released","repo":"r.git","issue":"<full id>"}
//! {"status":"broken","repo":"r.git","issue":"<full id>","holder":"…","token":3,"reason":"…","by":"…"}
//! {"status":"free","repo":"r.git","issue":"<full id>"}          (break: nothing was held)
//! {"leases":[{"issue":"<full id>","holder":"…","token":2,"acquired_at":"…","renewed_at":null,
//!             "expires_at":null,"note":null,"transitions":0}]}
//! {"repo":"r.git","issue":"<full id>","status":"held|free|locked","holder":…,"token":…,
//!  "acquired_at":…,"renewed_at":…,"expires_at":…,"note":…,"transitions":2,"last_token":3,
//!  "locked_until":…,"queued":{"patch":…,"branch":…}|null}        (show)
//! {…the acquired fields…,"title":"…","labels":["…"],"priority":null,"body":"…",
//!  "links":{"blocks":[…],"blocked_by":[…],"relates":[…]}}     (next)
//! {"status":"empty","repo":"r.git","labels":["…"]}               exit 3 (next: nothing ready)
//! {"status":"settled","repo":"r.git","labels":[…],"settled":[{"patch":"<id>","state":"merged|evicted",
//!  "revision":2,"commit":…,"reason":…,"seq":41}]}               exit 3 (next --wait: your queued merges settled)
//! ```

use crate::people::{annotate_line, DisplayNames};
use std::future::Future;
use std::time::Duration;

use serde::Serialize;

use super::command::LeaseCmd;
use super::context::Context;
use super::reply::{internal_reply, reply_line, Answer as ServiceAnswer, NOT_FOUND};
use crate::authz;
use crate::leasing::waiters::{Waited, Want, Won};
use crate::repos::RepoEntry;
use collab_proto::replies::lease as replies;
use collab_record::state::IssueStatus;
use collab_store::issues::{self, IssueError};
use collab_store::leases::{rfc3339, Acquire, Break, Claim, Lease, Release, Renew, Status};
use collab_store::queue::{Next, NextRequest, ReadyIssue};
use collab_store::reads::ReadPool;

pub use collab_proto::exit::{CONFLICT as EXIT_CONFLICT, EMPTY as EXIT_EMPTY};

const ISSUE_NOT_FOUND: &str = "error: issue not found";
const ISSUE_CLOSED: &str = "error: issue is closed";
const INTERNAL: &str = "error: internal error";
const STOPPING: &str = "error: the server is shutting down; the wait was cancelled, try again";
const TOO_MANY_WAITERS: &str = "error: too many callers are waiting; try again later";

/// One reply: the line to send and the exit status.
pub type Reply = (String, u32);

fn error(message: &str) -> Reply {
    (message.to_string(), 1)
}

fn ok(reply: &impl Serialize) -> Reply {
    (reply_line(reply), 0)
}

/// `{"status", "repo", "issue"}` of a release or a break of nothing.
fn ended(status: &str, repo: &str, issue: &str) -> Reply {
    ok(&replies::LeaseEnded {
        status: status.to_string(),
        repo: repo.to_string(),
        issue: issue.to_string(),
    })
}

/// The answer to one `collab-lease` command; `None` when its caller left
/// while it waited (`Context::left`): nobody to answer. A lease won by
/// waiting rides in the answer (`won`), for its door to give back if the
/// answer cannot be delivered (`service::undelivered`).
pub async fn reply(ctx: &Context, cmd: LeaseCmd) -> Option<ServiceAnswer> {
    let op = cmd.name();
    let answered = answer(ctx, cmd, ctx.caller_left()).await;
    let (message, code, won) = match answered {
        Some(Answer::Reply((message, code))) => (message, code, None),
        Some(Answer::Waited(won)) => {
            let (message, code) = match &won {
                Won::Acquired(lease) => acquired(lease),
                Won::Next { lease, issue } => next_acquired(ctx, lease, issue).await,
            };
            let lease = match won {
                Won::Acquired(lease) | Won::Next { lease, .. } => lease,
            };
            (message, code, Some(lease))
        }
        // The caller left while waiting: nobody to answer.
        None => {
            tracing::info!(op, "lease waiter left");
            crate::metrics::lease_op(op, "disconnected");
            return None;
        }
    };
    crate::metrics::lease_op(op, crate::metrics::outcome_of_exit(code));
    Some(ServiceAnswer {
        line: annotate_line(message, &DisplayNames::of(&ctx.app)),
        status: code,
        won: won.map(Box::new),
    })
}

/// What `answer` produced: a reply, or a lease won by waiting (answered
/// like an acquire or a next, and given back if that answer cannot be
/// delivered).
enum Answer {
    Reply(Reply),
    Waited(Won),
}

async fn answer(ctx: &Context, cmd: LeaseCmd, gone: impl Future<Output = ()>) -> Option<Answer> {
    // Reads need Read, claims Write, breaking another's lease Rewind: the
    // verb table's rows.
    let needed = cmd.needed_access();
    let requested = cmd.repo().to_string();
    // Authorization reads policy files and the import may read git: both
    // are blocking I/O, so they run off the async runtime.
    let app = ctx.app.clone();
    let caller = ctx.caller.clone();
    let lookup = match &cmd {
        LeaseCmd::Acquire { issue, .. } => Lookup::OpenIssue(issue.clone()),
        LeaseCmd::Renew { issue, .. }
        | LeaseCmd::Release { issue, .. }
        | LeaseCmd::Break { issue, .. }
        | LeaseCmd::Show { issue, .. } => Lookup::AnyIssue(issue.clone()),
        LeaseCmd::List { .. } | LeaseCmd::Next { .. } => Lookup::Nothing,
    };
    let runtime = tokio::runtime::Handle::current();
    let checked = tokio::task::spawn_blocking(move || {
        let (entry, _) = authz::authorize(&app, &caller, &requested, needed).ok()?;
        // Issues live in collab.db once the repository's DAGs are imported.
        if let Err(e) = app
            .imports
            .ensure(&app.reads, &app.writer, &app.export, &entry, &runtime)
        {
            return Some((entry, Resolved::Failed(e.context("importing issues"))));
        }
        let issue = lookup.resolve(&entry, &app.reads);
        Some((entry, issue))
    })
    .await;
    let (entry, issue) = match checked {
        Ok(Some(found)) => found,
        Ok(None) => return Some(Answer::Reply(error(NOT_FOUND))),
        Err(e) => {
            tracing::error!("collab-lease lookup task failed: {e}");
            return Some(Answer::Reply(error(INTERNAL)));
        }
    };
    let repo = entry.name.as_str();
    let holder = ctx.caller.principal();
    let leases = &ctx.app.writer;
    let issue = match issue {
        Resolved::Issue(id) => id,
        Resolved::ClosedIssue(_) if matches!(cmd, LeaseCmd::Acquire { .. }) => {
            return Some(Answer::Reply(error(ISSUE_CLOSED)))
        }
        Resolved::ClosedIssue(id) => id,
        Resolved::NotInDb(prefix) => match lease_by_prefix(ctx, repo, &prefix).await {
            Ok(id) => id,
            Err(reply) => return Some(Answer::Reply(reply)),
        },
        Resolved::NoIssue => String::new(),
        Resolved::Refused(message) => return Some(Answer::Reply(error(&message))),
        Resolved::Failed(e) => {
            tracing::error!(repo, "collab-lease: reading the issue: {e:#}");
            return Some(Answer::Reply(internal_reply(&e)));
        }
    };
    if let LeaseCmd::Acquire {
        ttl_secs: Some(ttl),
        ..
    }
    | LeaseCmd::Renew { ttl_secs: ttl, .. } = &cmd
    {
        let max = leases.policy().max_ttl;
        if *ttl > max {
            return Some(Answer::Reply(error(&format!(
                "error: --ttl {ttl} is longer than this server allows (leases.max_ttl = {max})"
            ))));
        }
    }
    let claim = |ttl_secs, note| Claim {
        repo: repo.to_string(),
        issue_id: issue.clone(),
        holder: holder.to_string(),
        ttl_secs,
        note,
    };
    let result = match cmd {
        LeaseCmd::Acquire {
            ttl_secs,
            note,
            wait_secs,
            ..
        } => {
            let claim = claim(ttl_secs, note);
            match leases.acquire_claim(claim.clone()).await {
                Ok(Acquire::Acquired { lease, .. }) => Ok(acquired(&lease)),
                Ok(refused) => match wait_secs {
                    Some(secs) if secs > 0 => {
                        let want = Want::Acquire(claim);
                        return wait_for(ctx, want, Duration::from_secs(secs), gone).await;
                    }
                    _ => Ok(conflict(repo, &issue, refused)),
                },
                Err(e) => Err(e),
            }
        }
        LeaseCmd::Renew { ttl_secs, note, .. } => {
            match leases.renew_claim(claim(Some(ttl_secs), note)).await {
                Ok(Renew::Renewed(lease)) => Ok(ok(&tenure("renewed", &lease))),
                Ok(Renew::NotHolder { holder: other }) => {
                    not_holder(ctx, repo, &issue, other.as_deref()).await
                }
                Err(e) => Err(e),
            }
        }
        LeaseCmd::Release { .. } => match leases.release(repo, &issue, holder).await {
            Ok(Release::Released) => {
                tracing::info!(repo, issue, holder, "lease released");
                Ok(ended("released", repo, &issue))
            }
            Ok(Release::NotHolder { holder: other }) => {
                not_holder(ctx, repo, &issue, Some(&other)).await
            }
            Err(e) => Err(e),
        },
        LeaseCmd::Break { reason, .. } => leases
            .break_lease(repo, &issue, holder, &reason)
            .await
            .map(|outcome| match outcome {
                Break::Broken(lease) => {
                    tracing::warn!(
                        repo,
                        issue,
                        by = holder,
                        holder = lease.holder,
                        reason,
                        "lease broken"
                    );
                    ok(&replies::Broken {
                        status: "broken".to_string(),
                        repo: repo.to_string(),
                        issue: issue.clone(),
                        holder: lease.holder,
                        token: lease.token,
                        reason: reason.clone(),
                        by: holder.to_string(),
                        // Added to the whole reply by `annotate_line`.
                        holder_name: None,
                        by_name: None,
                    })
                }
                Break::NotHeld => ended("free", repo, &issue),
            }),
        LeaseCmd::List { .. } => leases.list(repo).await.map(|live| {
            let list = replies::LeaseList {
                leases: live.iter().map(list_row).collect(),
            };
            ok(&list)
        }),
        LeaseCmd::Show { .. } => leases
            .status(repo, &issue)
            .await
            .map(|status| ok(&show(repo, &issue, &status))),
        LeaseCmd::Next {
            labels,
            ttl_secs,
            note,
            wait_secs,
            ..
        } => {
            let req = NextRequest {
                repo: repo.to_string(),
                labels,
                holder: holder.to_string(),
                ttl_secs,
                note,
            };
            // A wait also ends when a merge the caller had queued settles
            // after this point (`leasing::settled`).
            let since = match wait_secs {
                Some(secs) if secs > 0 => {
                    match crate::leasing::settled::start(&ctx.app.reads, repo, holder).await {
                        Ok(since) => since,
                        Err(e) => return Some(Answer::Reply(internal_reply(&e))),
                    }
                }
                _ => None,
            };
            match leases.next(req.clone()).await {
                Ok(Next::Acquired { lease, issue }) => Ok(next_acquired(ctx, &lease, &issue).await),
                Ok(Next::Empty) => match wait_secs {
                    Some(secs) if secs > 0 => {
                        let limit = Duration::from_secs(secs);
                        return wait_for_next(ctx, req, since, limit, gone).await;
                    }
                    _ => Ok(empty(repo, &req.labels)),
                },
                Err(e) => Err(e),
            }
        }
    };
    Some(Answer::Reply(result.unwrap_or_else(|e| {
        tracing::error!(repo, issue, "collab-lease: lease store: {e:#}");
        internal_reply(&e)
    })))
}

/// `next --wait`: [`wait_for`] an issue, or, when the caller had merges
/// queued in the repository at `since` (the event log's head when the
/// call began), until one settles: then an exit-3 `settled` reply naming
/// them, and no claim (a lease won in the same instant is given back by
/// the waiters' guard, as for a caller that left).
async fn wait_for_next(
    ctx: &Context,
    req: NextRequest,
    since: Option<i64>,
    limit: Duration,
    gone: impl Future<Output = ()>,
) -> Option<Answer> {
    let Some(since) = since else {
        return wait_for(ctx, Want::Next(req), limit, gone).await;
    };
    let (repo, labels, holder) = (req.repo.clone(), req.labels.clone(), req.holder.clone());
    let settled =
        crate::leasing::settled::settled(&ctx.app.reads, &ctx.app.writer, &repo, &holder, since);
    tokio::select! {
        biased;
        answer = wait_for(ctx, Want::Next(req), limit, gone) => answer,
        settled = settled => {
            tracing::info!(repo, holder, n = settled.len(), "next --wait: queued merges settled");
            let reply = replies::Settled {
                status: "settled".to_string(),
                repo,
                labels,
                settled,
            };
            Some(Answer::Reply((reply_line(&reply), EXIT_EMPTY)))
        }
    }
}

/// `acquire --wait` / `next --wait`: queue behind earlier waiters until
/// the issue (or some ready issue) is ours, the time runs out (exit 4
/// naming the holder, or exit 3 for `next`), or the caller leaves (`None`:
/// no reply).
async fn wait_for(
    ctx: &Context,
    want: Want,
    limit: Duration,
    gone: impl Future<Output = ()>,
) -> Option<Answer> {
    // The key's share of waiters, so one key cannot fill the queue.
    let share_key = ctx.caller.identity.share_key();
    let shares = &ctx.app.limits.waiters_per_principal;
    let _share = match shares.take("lease_wait", &share_key, |most| {
        format!("{most} callers waiting with this key")
    }) {
        Ok(share) => share,
        Err(most) => {
            return Some(Answer::Reply(error(&format!(
            "error: too many lease waits with this key ({most} waiting); try again when one ends"
        ))))
        }
    };
    let on_timeout = want.clone();
    let waited = ctx
        .app
        .waiters
        .wait(want, limit, gone, ctx.app.stopping.clone())
        .await;
    Some(Answer::Reply(match waited {
        Waited::Won(won) => return Some(Answer::Waited(won)),
        Waited::TimedOut => match on_timeout {
            Want::Next(req) => empty(&req.repo, &req.labels),
            Want::Acquire(claim) => {
                let (repo, issue) = (claim.repo, claim.issue_id);
                match ctx.app.writer.status(&repo, &issue).await {
                    Ok(status) => conflict_from_status(&repo, &issue, &status),
                    Err(e) => {
                        tracing::error!(repo, issue, "collab-lease: lease store: {e:#}");
                        internal_reply(&e)
                    }
                }
            }
        },
        Waited::Gone => return None,
        Waited::Stopped => error(STOPPING),
        Waited::Full => {
            let max = ctx.app.config.leases.max_waiters;
            crate::limits::note_refusal("lease_wait", "max_waiters", || {
                format!("{max} callers waiting")
            });
            error(TOO_MANY_WAITERS)
        }
    }))
}

fn acquired(lease: &Lease) -> Reply {
    tracing::info!(
        repo = lease.repo,
        issue = lease.issue_id,
        holder = lease.holder,
        token = lease.token,
        "lease acquired"
    );
    ok(&tenure("acquired", lease))
}

/// The reply of a `next` that got an issue: the acquire fields plus the
/// issue's title, labels, priority, body and links.
async fn next_acquired(ctx: &Context, lease: &Lease, issue: &ReadyIssue) -> Reply {
    let (body, links) = super::issue::body_and_links(ctx, &lease.repo, &lease.issue_id).await;
    tracing::info!(
        repo = lease.repo,
        issue = lease.issue_id,
        holder = lease.holder,
        token = lease.token,
        "lease acquired by next"
    );
    ok(&replies::NextTenure {
        tenure: tenure("acquired", lease),
        title: issue.title.clone(),
        labels: issue.labels.clone(),
        priority: issue.priority,
        body,
        links,
    })
}

/// The exit-3 reply of a `next` with nothing ready.
fn empty(repo: &str, labels: &[String]) -> Reply {
    let reply = replies::Empty {
        status: "empty".to_string(),
        repo: repo.to_string(),
        labels: labels.to_vec(),
    };
    (reply_line(&reply), EXIT_EMPTY)
}

/// The exit-4 reply of a refused acquire.
fn conflict(repo: &str, issue: &str, refused: Acquire) -> Reply {
    match refused {
        Acquire::Held { holder, expires_at } => held(repo, issue, Some(&holder), expires_at),
        Acquire::Locked { holder, until } => locked(repo, issue, &holder, until),
        Acquire::Acquired { lease, .. } => acquired(&lease),
    }
}

/// The exit-4 reply after a wait ran out, from the issue's state then.
fn conflict_from_status(repo: &str, issue: &str, status: &Status) -> Reply {
    match (&status.live, &status.locked) {
        (Some(live), _) => held(repo, issue, Some(&live.holder), live.expires_at),
        (None, Some((holder, until))) => locked(repo, issue, holder, *until),
        // Free at the very end, but not in time for this caller.
        (None, None) => held(repo, issue, None, None),
    }
}

/// What the command needs to know about its issue argument.
enum Lookup {
    /// Acquire: the issue must exist and be open.
    OpenIssue(String),
    /// Renew and release work on the lease alone; the id only needs
    /// resolving to the full id the lease is stored under.
    AnyIssue(String),
    /// List names no issue.
    Nothing,
}

enum Resolved {
    /// The full issue id.
    Issue(String),
    /// A closed issue held by the server, by full id (acquire refuses it).
    ClosedIssue(String),
    /// A well-formed id that no issue in collab.db matches (renew and release
    /// then look among the repository's leases).
    NotInDb(String),
    NoIssue,
    /// A one-line `error: …` for the caller.
    Refused(String),
    /// An internal failure, logged, shown only as what it means for the
    /// caller (`reply::internal_line`).
    Failed(anyhow::Error),
}

impl Lookup {
    fn resolve(self, entry: &RepoEntry, reads: &ReadPool) -> Resolved {
        let (id, must_be_open) = match self {
            Lookup::Nothing => return Resolved::NoIssue,
            Lookup::OpenIssue(id) => (id, true),
            Lookup::AnyIssue(id) => (id, false),
        };
        match reads.read_blocking(|conn| held_issue(conn, &entry.name, &id)) {
            Ok(Some(resolved)) => resolved,
            // Renew and release work on the lease alone.
            Ok(None) if !must_be_open => Resolved::NotInDb(id.trim().to_ascii_lowercase()),
            Ok(None) => Resolved::Refused(ISSUE_NOT_FOUND.into()),
            Err(e) => Resolved::Failed(e),
        }
    }
}

/// The issue as the collab database holds it; `None` when it has no issue
/// of that id.
fn held_issue(
    conn: &collab_store::sql::Connection,
    repo: &str,
    id: &str,
) -> anyhow::Result<Option<Resolved>> {
    let full = match issues::resolve(conn, repo, id) {
        Ok(full) => full,
        Err(IssueError::NotFound(_)) => return Ok(None),
        Err(IssueError::Sql(e)) => return Err(e.into()),
        Err(e) => return Ok(Some(Resolved::Refused(format!("error: {e}")))),
    };
    Ok(
        issues::get(conn, repo, &full)?.map(|issue| match issue.status {
            IssueStatus::Closed => Resolved::ClosedIssue(full),
            IssueStatus::Open => Resolved::Issue(full),
        }),
    )
}

/// A renew or release of an id that is no longer an issue: match it against
/// the repository's live leases (a full id is taken as it is).
async fn lease_by_prefix(ctx: &Context, repo: &str, prefix: &str) -> Result<String, Reply> {
    if prefix.len() == 40 {
        return Ok(prefix.to_string());
    }
    let live = ctx.app.writer.list(repo).await.map_err(|e| {
        tracing::error!(repo, "collab-lease: lease store: {e:#}");
        internal_reply(&e)
    })?;
    let mut matches: Vec<String> = live
        .into_iter()
        .map(|l| l.issue_id)
        .filter(|id| id.starts_with(prefix))
        .collect();
    match matches.len() {
        0 => Err(error(ISSUE_NOT_FOUND)),
        1 => Ok(matches.remove(0)),
        _ => Err(error(&format!(
            "error: issue id '{prefix}' is ambiguous; candidates: {}",
            matches.join(", ")
        ))),
    }
}

/// The exit-4 reply of a renew or release by someone who does not hold the
/// lease, naming the live holder (and when their lease ends) if there is one.
async fn not_holder(
    ctx: &Context,
    repo: &str,
    issue: &str,
    other: Option<&str>,
) -> anyhow::Result<Reply> {
    let expires_at = match other {
        // The decision is made; this read only adds the holder's expiry.
        Some(other) => ctx
            .app
            .writer
            .current(repo, issue)
            .await?
            .filter(|l| l.holder == other)
            .and_then(|l| l.expires_at),
        None => None,
    };
    Ok(held(repo, issue, other, expires_at))
}

fn held(repo: &str, issue: &str, holder: Option<&str>, expires_at: Option<i64>) -> Reply {
    let reply = replies::Held {
        status: "held".to_string(),
        repo: repo.to_string(),
        issue: issue.to_string(),
        holder: holder.map(str::to_string),
        expires_at: time(expires_at),
        holder_name: None,
    };
    (reply_line(&reply), EXIT_CONFLICT)
}

fn locked(repo: &str, issue: &str, holder: &str, until: i64) -> Reply {
    let reply = replies::Locked {
        status: "locked".to_string(),
        repo: repo.to_string(),
        issue: issue.to_string(),
        holder: holder.to_string(),
        locked_until: time(Some(until)),
        holder_name: None,
    };
    (reply_line(&reply), EXIT_CONFLICT)
}

/// A lease time as the replies show it.
fn time(secs: Option<i64>) -> Option<String> {
    rfc3339(secs).as_str().map(str::to_string)
}

/// The reply of an acquire or renew (`collab_proto::replies::lease`).
fn tenure(status: &str, lease: &Lease) -> replies::Tenure {
    replies::Tenure {
        status: status.to_string(),
        repo: lease.repo.clone(),
        issue: lease.issue_id.clone(),
        holder: lease.holder.clone(),
        token: lease.token,
        acquired_at: time(Some(lease.acquired_at)).unwrap_or_default(),
        renewed_at: time(lease.renewed_at),
        expires_at: time(lease.expires_at),
        note: lease.note.clone(),
    }
}

fn list_row(lease: &Lease) -> replies::LeaseRow {
    replies::LeaseRow {
        issue: lease.issue_id.clone(),
        holder: lease.holder.clone(),
        token: lease.token,
        acquired_at: time(Some(lease.acquired_at)).unwrap_or_default(),
        renewed_at: time(lease.renewed_at),
        expires_at: time(lease.expires_at),
        note: lease.note.clone(),
        transitions: lease.transitions,
        // Added to the whole reply by `annotate_line`.
        holder_name: None,
    }
}

/// `show`: the issue's lease state, held or not.
fn show(repo: &str, issue: &str, status: &Status) -> replies::LeaseShown {
    let live = status.live.as_ref();
    let state = match (live, &status.locked) {
        (Some(_), _) => "held",
        (None, Some(_)) => "locked",
        (None, None) => "free",
    };
    let locked_holder = status.locked.as_ref().map(|(h, _)| h.as_str());
    replies::LeaseShown {
        repo: repo.to_string(),
        issue: issue.to_string(),
        status: state.to_string(),
        holder: live
            .map(|l| l.holder.as_str())
            .or(locked_holder)
            .map(str::to_string),
        token: live.map(|l| l.token),
        acquired_at: time(live.map(|l| l.acquired_at)),
        renewed_at: time(live.and_then(|l| l.renewed_at)),
        expires_at: time(live.and_then(|l| l.expires_at)),
        note: live.and_then(|l| l.note.clone()),
        transitions: status.transitions,
        last_token: status.last_token,
        locked_until: time(status.locked.as_ref().map(|(_, until)| *until)),
        queued: status.queued.as_ref().map(|q| replies::QueuedTenure {
            patch: q.patch.clone(),
            branch: q.branch.clone(),
        }),
        holder_name: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_as_rfc3339_utc() {
        assert_eq!(time(Some(0)).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            time(Some(1_788_609_600)).as_deref(),
            Some("2026-09-05T12:00:00Z")
        );
        assert_eq!(time(None), None);
    }

    #[test]
    fn held_reply_is_json_with_exit_4() {
        let (line, code) = held("r.git", "ab", Some("alice"), None);
        assert_eq!(code, EXIT_CONFLICT);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["status"], "held");
        assert_eq!(v["holder"], "alice");
        assert_eq!(v["expires_at"], serde_json::Value::Null);
    }
}
