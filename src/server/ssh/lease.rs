//! `collab-lease acquire|renew|release|list`: work claims on issues over SSH.
//!
//! This module turns a parsed `LeaseCmd` into one reply. Access is
//! `authz`'s (Read lists, Write mutates; unknown and unauthorized
//! repositories both get `error: repository not found`), every lease
//! decision is `leases`'s, run through the `LeaseService` writer, which
//! answers only once the write is durable; the reply is sent after that.
//! What is left here: naming the holder (the caller's principal), resolving
//! the issue id in the bare repository (git2, on a blocking thread: an
//! acquire needs an existing, open issue), and the JSON and exit codes:
//! 0 success, 1 error, 4 lease conflict.
//!
//! ```text
//! {"status":"acquired","repo":"r.git","issue":"<full id>","holder":"<principal>","token":1,"expires_at":null}
//! {"status":"held","repo":"r.git","issue":"<full id>","holder":"<other>","expires_at":"2026-09-05T12:00:00Z"}  exit 4
//! {"status":"renewed", …same fields as acquired…}
//! {"status":"released","repo":"r.git","issue":"<full id>"}
//! {"leases":[{"issue":"<full id>","holder":"…","token":2,"acquired_at":"…","expires_at":null}]}
//! ```

use chrono::{DateTime, SecondsFormat};
use russh::server::Msg;
use russh::Channel;
use serde_json::{json, Value};

use super::session::{json_line, reply_and_close, ExecContext, LeaseCmd, NOT_FOUND};
use crate::authz::{self, Access};
use crate::db::issues::{self, IssueError};
use crate::db::leases::{Acquire, Lease, Release, Renew};
use crate::db::reads::ReadPool;
use crate::repos::RepoEntry;
use git_collab::record::state::{self, IssueState, IssueStatus};

/// Exit status of a lease conflict: held by someone else, or not yours.
pub const EXIT_CONFLICT: u32 = 4;

const ISSUE_NOT_FOUND: &str = "error: issue not found";
const ISSUE_CLOSED: &str = "error: issue is closed";
const INTERNAL: &str = "error: internal error";

/// One reply: the line to send and the exit status.
type Reply = (String, u32);

fn error(message: &str) -> Reply {
    (message.to_string(), 1)
}

fn ok(value: Value) -> Reply {
    (json_line(&value), 0)
}

/// Serve one `collab-lease` command on `channel`.
pub async fn run(ctx: &ExecContext, channel: Channel<Msg>, cmd: LeaseCmd) {
    let op = match cmd {
        LeaseCmd::Acquire { .. } => "acquire",
        LeaseCmd::Renew { .. } => "renew",
        LeaseCmd::Release { .. } => "release",
        LeaseCmd::List { .. } => "list",
    };
    let (message, code) = answer(ctx, cmd).await;
    crate::metrics::lease_op(op, crate::metrics::outcome_of_exit(code));
    reply_and_close(channel, &message, code).await
}

async fn answer(ctx: &ExecContext, cmd: LeaseCmd) -> Reply {
    let needed = match cmd {
        LeaseCmd::List { .. } => Access::Read,
        _ => Access::Write,
    };
    let requested = match &cmd {
        LeaseCmd::Acquire { repo, .. }
        | LeaseCmd::Renew { repo, .. }
        | LeaseCmd::Release { repo, .. }
        | LeaseCmd::List { repo } => repo.clone(),
    };
    // Authorization reads policy files and the issue lives in git: both
    // are blocking I/O, so they run off the async runtime.
    let app = ctx.app.clone();
    let caller = ctx.caller.clone();
    let lookup = match &cmd {
        LeaseCmd::Acquire { issue, .. } => Lookup::OpenIssue(issue.clone()),
        LeaseCmd::Renew { issue, .. } | LeaseCmd::Release { issue, .. } => {
            Lookup::AnyIssue(issue.clone())
        }
        LeaseCmd::List { .. } => Lookup::Nothing,
    };
    let checked = tokio::task::spawn_blocking(move || {
        let (entry, _) = authz::authorize(&app, &caller, &requested, needed).ok()?;
        let issue = lookup.resolve(&entry, &app.reads);
        Some((entry, issue))
    })
    .await;
    let (entry, issue) = match checked {
        Ok(Some(found)) => found,
        Ok(None) => return error(NOT_FOUND),
        Err(e) => {
            tracing::error!("collab-lease lookup task failed: {e}");
            return error(INTERNAL);
        }
    };
    let repo = entry.name.as_str();
    let holder = ctx.caller.principal();
    let leases = &ctx.app.leases;
    let issue = match issue {
        Resolved::Issue(id) => id,
        Resolved::ClosedIssue(_) if matches!(cmd, LeaseCmd::Acquire { .. }) => {
            return error(ISSUE_CLOSED)
        }
        Resolved::ClosedIssue(id) => id,
        Resolved::NotInGit(prefix) => match lease_by_prefix(ctx, repo, &prefix).await {
            Ok(id) => id,
            Err(reply) => return reply,
        },
        Resolved::NoIssue => String::new(),
        Resolved::Refused(message) => return error(&message),
        Resolved::Failed(e) => {
            tracing::error!(repo, "collab-lease: reading the issue: {e}");
            return error(INTERNAL);
        }
    };
    let result = match cmd {
        LeaseCmd::Acquire { ttl_secs, .. } => leases
            .acquire(repo, &issue, holder, ttl_secs)
            .await
            .map(|outcome| match outcome {
                Acquire::Acquired { token, expires_at } => {
                    tracing::info!(repo, issue, holder, token, "lease acquired");
                    ok(tenure("acquired", repo, &issue, holder, token, expires_at))
                }
                Acquire::Held {
                    holder: other,
                    expires_at,
                } => held(repo, &issue, Some(&other), expires_at),
            }),
        LeaseCmd::Renew { ttl_secs, .. } => {
            match leases.renew(repo, &issue, holder, ttl_secs).await {
                Ok(Renew::Renewed { token, expires_at }) => Ok(ok(tenure(
                    "renewed", repo, &issue, holder, token, expires_at,
                ))),
                Ok(Renew::NotHolder { holder: other }) => {
                    not_holder(ctx, repo, &issue, other.as_deref()).await
                }
                Err(e) => Err(e),
            }
        }
        LeaseCmd::Release { .. } => match leases.release(repo, &issue, holder).await {
            Ok(Release::Released) => {
                tracing::info!(repo, issue, holder, "lease released");
                Ok(ok(
                    json!({ "status": "released", "repo": repo, "issue": issue }),
                ))
            }
            Ok(Release::NotHolder { holder: other }) => {
                not_holder(ctx, repo, &issue, Some(&other)).await
            }
            Err(e) => Err(e),
        },
        LeaseCmd::List { .. } => leases.list(repo).await.map(|live| {
            let rows: Vec<Value> = live.iter().map(list_row).collect();
            ok(json!({ "leases": rows }))
        }),
    };
    result.unwrap_or_else(|e| {
        tracing::error!(repo, issue, "collab-lease: lease store: {e:#}");
        error(INTERNAL)
    })
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
    /// A well-formed id that no issue in git matches (renew and release
    /// then look among the repository's leases).
    NotInGit(String),
    NoIssue,
    /// A one-line `error: …` for the caller.
    Refused(String),
    /// An internal failure, logged, never shown.
    Failed(String),
}

impl Lookup {
    fn resolve(self, entry: &RepoEntry, reads: &ReadPool) -> Resolved {
        let (id, must_be_open) = match self {
            Lookup::Nothing => return Resolved::NoIssue,
            Lookup::OpenIssue(id) => (id, true),
            Lookup::AnyIssue(id) => (id, false),
        };
        // Issues held by the server come first (`collab-issue`).
        match reads.read_blocking(|conn| held_issue(conn, &entry.name, &id)) {
            Ok(Some(resolved)) => return resolved,
            Ok(None) => {}
            Err(e) => return Resolved::Failed(format!("{e:#}")),
        }
        let repo = match git2::Repository::open_bare(&entry.path) {
            Ok(repo) => repo,
            Err(e) => return Resolved::Failed(format!("{}: {e}", entry.path.display())),
        };
        let (ref_name, full_id) = match state::resolve_issue_ref(&repo, &id) {
            Ok(found) => found,
            Err(git_collab::Error::IssueNotFound(_)) if !must_be_open => {
                return Resolved::NotInGit(id.trim().to_ascii_lowercase())
            }
            Err(git_collab::Error::IssueNotFound(_)) => {
                return Resolved::Refused(ISSUE_NOT_FOUND.into())
            }
            Err(e @ git_collab::Error::InvalidIssueId(_))
            | Err(e @ git_collab::Error::AmbiguousIssue { .. }) => {
                return Resolved::Refused(format!("error: {e}"))
            }
            Err(e) => return Resolved::Failed(e.to_string()),
        };
        if !must_be_open {
            return Resolved::Issue(full_id);
        }
        match IssueState::from_ref(&repo, &ref_name, &full_id) {
            Ok(issue) if issue.status == IssueStatus::Open => Resolved::Issue(full_id),
            Ok(_) => Resolved::Refused(ISSUE_CLOSED.into()),
            // Its opening event was dropped (bad or untrusted signature):
            // as far as anyone can see, there is no such issue.
            Err(git_collab::Error::InvalidIssue { .. }) => {
                Resolved::Refused(ISSUE_NOT_FOUND.into())
            }
            Err(e) => Resolved::Failed(e.to_string()),
        }
    }
}

/// The issue as the collab database holds it; `None` when the database
/// has no issue of that id (it may still be an issue DAG in git).
fn held_issue(
    conn: &rusqlite::Connection,
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

/// A renew or release of an id that is no longer in git: match it against
/// the repository's live leases (a full id is taken as it is).
async fn lease_by_prefix(ctx: &ExecContext, repo: &str, prefix: &str) -> Result<String, Reply> {
    if prefix.len() == 40 {
        return Ok(prefix.to_string());
    }
    let live = ctx.app.leases.list(repo).await.map_err(|e| {
        tracing::error!(repo, "collab-lease: lease store: {e:#}");
        error(INTERNAL)
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
    ctx: &ExecContext,
    repo: &str,
    issue: &str,
    other: Option<&str>,
) -> anyhow::Result<Reply> {
    let expires_at = match other {
        // The decision is made; this read only adds the holder's expiry.
        Some(other) => ctx
            .app
            .leases
            .current(repo, issue)
            .await?
            .filter(|l| l.holder == other)
            .and_then(|l| l.expires_at),
        None => None,
    };
    Ok(held(repo, issue, other, expires_at))
}

fn held(repo: &str, issue: &str, holder: Option<&str>, expires_at: Option<i64>) -> Reply {
    let reply = json!({
        "status": "held",
        "repo": repo,
        "issue": issue,
        "holder": holder,
        "expires_at": rfc3339(expires_at),
    });
    (json_line(&reply), EXIT_CONFLICT)
}

fn tenure(
    status: &str,
    repo: &str,
    issue: &str,
    holder: &str,
    token: i64,
    expires_at: Option<i64>,
) -> Value {
    json!({
        "status": status,
        "repo": repo,
        "issue": issue,
        "holder": holder,
        "token": token,
        "expires_at": rfc3339(expires_at),
    })
}

fn list_row(lease: &Lease) -> Value {
    json!({
        "issue": lease.issue_id,
        "holder": lease.holder,
        "token": lease.token,
        "acquired_at": rfc3339(Some(lease.acquired_at)),
        "expires_at": rfc3339(lease.expires_at),
    })
}

/// Unix seconds as RFC3339 UTC (`2026-09-05T12:00:00Z`); `None` is `null`.
fn rfc3339(secs: Option<i64>) -> Value {
    secs.and_then(|s| DateTime::from_timestamp(s, 0))
        .map(|t| Value::String(t.to_rfc3339_opts(SecondsFormat::Secs, true)))
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_as_rfc3339_utc() {
        assert_eq!(rfc3339(Some(0)), json!("1970-01-01T00:00:00Z"));
        assert_eq!(rfc3339(Some(1_788_609_600)), json!("2026-09-05T12:00:00Z"));
        assert_eq!(rfc3339(None), Value::Null);
    }

    #[test]
    fn held_reply_is_json_with_exit_4() {
        let (line, code) = held("r.git", "ab", Some("alice"), None);
        assert_eq!(code, EXIT_CONFLICT);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["status"], "held");
        assert_eq!(v["holder"], "alice");
        assert_eq!(v["expires_at"], Value::Null);
    }
}
