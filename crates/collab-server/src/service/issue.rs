//! `collab-issue open|show|list|comment|edit|label|close|reopen|link|unlink`:
//! issues held by the server, one round trip per write.
//!
//! This module parses the verb's arguments, asks `authz` for the level the
//! subcommand needs (Read for `show` and `list`, Write for the rest;
//! unknown and invisible repositories both get `error: repository not
//! found`), reads through the read pool or writes through the single writer
//! (which answers after COMMIT), and turns the outcome into one JSON line.
//! Every issue decision is `collab_store::issues`'s. Exit codes: 0 success, 1 error,
//! 4 a `--lease-token` that is not the issue's live tenure.
//!
//! ```text
//! collab-issue open    '<repo>' --title T [--body B | --body-stdin] [--label L]...
//! collab-issue show    '<repo>' '<id>'
//! collab-issue list    '<repo>' [--state open|closed|all] [--label L]... [--limit N] [--after CURSOR]
//! collab-issue comment '<repo>' '<id>' (--body B | --body-stdin)            [--lease-token N]
//! collab-issue edit    '<repo>' '<id>' [--title T] [--body B | --body-stdin] [--lease-token N]
//! collab-issue label   '<repo>' '<id>' [--add L]... [--remove L]...        [--lease-token N]
//! collab-issue close   '<repo>' '<id>' [--reason R]                         [--lease-token N]
//! collab-issue reopen  '<repo>' '<id>'                                      [--lease-token N]
//! collab-issue link    '<repo>' '<id>' blocks|relates '<other>'            [--lease-token N]
//! collab-issue unlink  '<repo>' '<id>' blocks|relates '<other>'            [--lease-token N]
//! ```
//!
//! `<other>` is an id (or prefix) in the same repository or
//! `<repo>#<id>` in another repository of this server. JSON shapes:
//! docs/ssh-verbs.md.

use crate::people::{annotate_line, DisplayNames};
use chrono::{DateTime, Utc};
use collab_proto::replies::fenced::Fenced;
use collab_proto::replies::issue as wire;
use serde::Serialize;

use super::context::Context;
use super::reply::{reply_line, NOT_FOUND};
use crate::authz::{self, Access, Caller};
use collab_proto::verbs::{self, Invocation};
use collab_store::exports;
use collab_store::issues::{
    self, Cursor, Issue, IssueDetail, IssueError, IssueKey, LinkKind, ListQuery, NewIssue, Person,
    StateFilter, WriteCtx, Written,
};
use collab_store::leases::{self, rfc3339, Lease};
use collab_store::queue::{self, NotReady, ReadyIssue};

pub use collab_proto::exit::FENCED as EXIT_FENCED;

const INTERNAL: &str = "error: internal error";

/// Where a body comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyArg {
    Text(String),
    /// `--body-stdin`: the channel's stdin, up to `max_issue_body` bytes.
    Stdin,
}

/// A parsed `collab-issue` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueCmd {
    Open {
        repo: String,
        title: String,
        body: Option<BodyArg>,
        labels: Vec<String>,
    },
    Show {
        repo: String,
        id: String,
    },
    List {
        repo: String,
        state: String,
        labels: Vec<String>,
        limit: Option<usize>,
        after: Option<String>,
    },
    Comment {
        repo: String,
        id: String,
        body: BodyArg,
        fence: Option<i64>,
    },
    Edit {
        repo: String,
        id: String,
        title: Option<String>,
        body: Option<BodyArg>,
        /// `--priority N` sets it, `--priority none` clears it.
        priority: Option<Option<i64>>,
        fence: Option<i64>,
    },
    /// The work queue's ready list, in `collab-lease next`'s order.
    Ready {
        repo: String,
        labels: Vec<String>,
        limit: Option<usize>,
    },
    Label {
        repo: String,
        id: String,
        add: Vec<String>,
        remove: Vec<String>,
        fence: Option<i64>,
    },
    Close {
        repo: String,
        id: String,
        reason: Option<String>,
        fence: Option<i64>,
    },
    Reopen {
        repo: String,
        id: String,
        fence: Option<i64>,
    },
    Link {
        repo: String,
        id: String,
        kind: String,
        other: String,
        fence: Option<i64>,
        unlink: bool,
    },
}

impl IssueCmd {
    /// The repository named first.
    pub fn repo(&self) -> &str {
        match self {
            IssueCmd::Open { repo, .. }
            | IssueCmd::Show { repo, .. }
            | IssueCmd::List { repo, .. }
            | IssueCmd::Comment { repo, .. }
            | IssueCmd::Edit { repo, .. }
            | IssueCmd::Label { repo, .. }
            | IssueCmd::Close { repo, .. }
            | IssueCmd::Reopen { repo, .. }
            | IssueCmd::Link { repo, .. }
            | IssueCmd::Ready { repo, .. } => repo,
        }
    }

    /// The verb, for logs and metrics.
    pub fn verb(&self) -> &'static str {
        match self {
            IssueCmd::Open { .. } => "collab-issue open",
            IssueCmd::Show { .. } => "collab-issue show",
            IssueCmd::List { .. } => "collab-issue list",
            IssueCmd::Comment { .. } => "collab-issue comment",
            IssueCmd::Edit { .. } => "collab-issue edit",
            IssueCmd::Label { .. } => "collab-issue label",
            IssueCmd::Close { .. } => "collab-issue close",
            IssueCmd::Reopen { .. } => "collab-issue reopen",
            IssueCmd::Link { unlink: false, .. } => "collab-issue link",
            IssueCmd::Link { unlink: true, .. } => "collab-issue unlink",
            IssueCmd::Ready { .. } => "collab-issue ready",
        }
    }

    /// The access its row of the verb table asks for (reads Read, writes
    /// Write).
    pub fn needed_access(&self) -> Access {
        collab_proto::verbs::level(self.verb(), |_| None)
    }

    pub(crate) fn reads_stdin(&self) -> bool {
        matches!(
            self,
            IssueCmd::Open {
                body: Some(BodyArg::Stdin),
                ..
            } | IssueCmd::Comment {
                body: BodyArg::Stdin,
                ..
            } | IssueCmd::Edit {
                body: Some(BodyArg::Stdin),
                ..
            }
        )
    }
}

/// `--body B` or `--body-stdin`, if either (the table allows at most one);
/// issues and patches alike.
pub(super) fn body_arg(inv: &Invocation<'_>) -> Option<BodyArg> {
    match inv.flag("--body") {
        Some(text) => Some(BodyArg::Text(text.to_string())),
        None => inv.has("--body-stdin").then_some(BodyArg::Stdin),
    }
}

impl IssueCmd {
    /// The command for a `collab-issue` row of the verb table; `None` for
    /// a value only the server checks (a cursor, a label, a priority).
    pub fn from_invocation(inv: &Invocation<'_>) -> Option<IssueCmd> {
        let s = |v: &str| v.to_string();
        let repo = s(inv.arg("repo"));
        let id = || s(inv.arg("issue"));
        let fence = || inv.int("--lease-token");
        let strings = |long| inv.flags(long).into_iter().map(s).collect::<Vec<_>>();
        let limit = || inv.int("--limit").map(|n| n as usize);
        Some(match inv.verb.action {
            "open" => IssueCmd::Open {
                repo,
                title: s(inv.flag("--title")?),
                body: body_arg(inv),
                labels: strings("--label"),
            },
            "show" => IssueCmd::Show { repo, id: id() },
            "list" => {
                let state = inv.flag("--state").unwrap_or("open").to_string();
                StateFilter::parse(&state)?;
                let after = inv.flag("--after").map(s);
                if let Some(after) = &after {
                    Cursor::parse(after)?;
                }
                IssueCmd::List {
                    repo,
                    state,
                    labels: strings("--label"),
                    limit: limit(),
                    after,
                }
            }
            "comment" => IssueCmd::Comment {
                repo,
                id: id(),
                body: body_arg(inv)?,
                fence: fence(),
            },
            "edit" => {
                let priority = match inv.flag("--priority") {
                    None => None,
                    Some("none") => Some(None),
                    Some("0") => Some(Some(0)),
                    Some(n) => Some(Some(verbs::int_in(n, 1, issues::MAX_PRIORITY)?)),
                };
                IssueCmd::Edit {
                    repo,
                    id: id(),
                    title: inv.flag("--title").map(s),
                    body: body_arg(inv),
                    priority,
                    fence: fence(),
                }
            }
            "label" => IssueCmd::Label {
                repo,
                id: id(),
                add: strings("--add"),
                remove: strings("--remove"),
                fence: fence(),
            },
            "close" => IssueCmd::Close {
                repo,
                id: id(),
                reason: inv.flag("--reason").map(s),
                fence: fence(),
            },
            "reopen" => IssueCmd::Reopen {
                repo,
                id: id(),
                fence: fence(),
            },
            "ready" => {
                let labels = strings("--label");
                if labels.len() > queue::MAX_LABELS {
                    return None;
                }
                IssueCmd::Ready {
                    repo,
                    labels,
                    limit: limit(),
                }
            }
            action @ ("link" | "unlink") => {
                let kind = inv.arg("kind");
                LinkKind::parse(kind)?;
                IssueCmd::Link {
                    repo,
                    id: id(),
                    kind: s(kind),
                    other: s(inv.arg("other")),
                    fence: fence(),
                    unlink: action == "unlink",
                }
            }
            _ => return None,
        })
    }
}

/// One reply: the line to send and the exit status.
pub type Reply = (String, u32);

fn error(message: impl std::fmt::Display) -> Reply {
    (format!("error: {message}"), 1)
}

fn ok(reply: &impl Serialize) -> Reply {
    (reply_line(reply), 0)
}

/// The reply to one `collab-issue` command: authorized, then its work;
/// `stdin` is the body of a `--body-stdin` (the service authorizes such
/// a command before its door reads the body, and calls
/// [`authorized_reply`]).
pub async fn reply(ctx: &Context, cmd: IssueCmd, stdin: Option<String>) -> Reply {
    let needed = cmd.needed_access();
    let repo = match authorized_repo(ctx, cmd.repo().to_string(), needed).await {
        Ok(repo) => repo,
        Err(reply) => return reply,
    };
    authorized_reply(ctx, repo, cmd, stdin).await
}

/// The work of an authorized command, the log line and export of a write,
/// and the reply with its display names.
pub(crate) async fn authorized_reply(
    ctx: &Context,
    repo: String,
    cmd: IssueCmd,
    body: Option<String>,
) -> Reply {
    let needed = cmd.needed_access();
    let verb = cmd.verb();
    let (message, code) = answer(ctx, repo.clone(), cmd, body).await;
    if code == 0 && needed == Access::Write {
        tracing::info!(
            principal = ctx.caller.principal(),
            repo,
            verb,
            "issue written"
        );
        ctx.app.export.touch(&repo);
    }
    (annotate_line(message, &DisplayNames::of(&ctx.app)), code)
}

/// Authorize `requested` at `needed` and make sure its collab records are
/// imported (on first use of a repository the server has not seen yet);
/// the repository's canonical name, or the reply to send.
async fn authorized_repo(
    ctx: &Context,
    requested: String,
    needed: Access,
) -> Result<String, Reply> {
    authorized_entry(ctx, requested, needed)
        .await
        .map(|entry| entry.name)
}

/// [`authorized_repo`], returning the whole repository entry (its path and
/// policy), for verbs that read git too.
pub(super) async fn authorized_entry(
    ctx: &Context,
    requested: String,
    needed: Access,
) -> Result<crate::repos::RepoEntry, Reply> {
    let (app, caller) = (ctx.app.clone(), ctx.caller.clone());
    let runtime = tokio::runtime::Handle::current();
    // Authorization reads policy files, the import reads git: blocking I/O.
    let found = tokio::task::spawn_blocking(move || {
        let (entry, _) = authz::authorize(&app, &caller, &requested, needed).ok()?;
        Some(
            app.imports
                .ensure(&app.reads, &app.writer, &app.export, &entry, &runtime)
                .map(|()| entry),
        )
    })
    .await;
    let failed = |e: &dyn std::fmt::Display| {
        tracing::error!("importing the repository's collab records: {e:#}");
        Err((INTERNAL.to_string(), 1))
    };
    match found {
        Ok(Some(Ok(entry))) => Ok(entry),
        Ok(None) => Err((NOT_FOUND.to_string(), 1)),
        Ok(Some(Err(e))) => failed(&format!("{e:#}")),
        Err(e) => failed(&e),
    }
}

/// The author of this caller's writes.
pub(super) fn actor(caller: &Caller) -> Person {
    let mut key = caller.identity.key.clone();
    key.set_comment("");
    Person {
        principal: caller.principal().to_string(),
        name: caller.name().unwrap_or(caller.principal()).to_string(),
        key: key.to_openssh().ok(),
    }
}

/// A link's other end: `<id>` in `repo`, or `<repo>#<id>` in a repository
/// the caller can read (else the same `repository not found`).
async fn other_end(ctx: &Context, repo: &str, other: &str) -> Result<(String, String), Reply> {
    let Some((other_repo, id)) = other.rsplit_once('#') else {
        return Ok((repo.to_string(), other.to_string()));
    };
    let name = authorized_repo(ctx, other_repo.to_string(), Access::Read).await?;
    Ok((name, id.to_string()))
}

async fn answer(ctx: &Context, repo: String, cmd: IssueCmd, stdin: Option<String>) -> Reply {
    let body_of = |arg: Option<BodyArg>| -> Option<String> {
        match arg {
            Some(BodyArg::Text(t)) => Some(t),
            Some(BodyArg::Stdin) => stdin.clone(),
            None => None,
        }
    };
    let actor = actor(&ctx.caller);
    let max_body = usize::try_from(ctx.app.config.max_issue_body).unwrap_or(usize::MAX);
    match cmd {
        IssueCmd::Show { id, .. } => show(ctx, repo, id).await,
        IssueCmd::List {
            state,
            labels,
            limit,
            after,
            ..
        } => {
            let query = ListQuery {
                state: StateFilter::parse(&state).unwrap_or(StateFilter::Open),
                labels,
                limit: limit.unwrap_or(issues::DEFAULT_PAGE),
                after: after.as_deref().and_then(Cursor::parse),
                offset: 0,
            };
            let r = repo.clone();
            let page = ctx
                .app
                .reads
                .read(move |conn| {
                    // In the same read: what the export lacks of this state.
                    let behind = exports::pending_count(conn, exports::Kind::Issue, &r)?;
                    Ok(issues::list(conn, &r, &query).map(|page| (page, behind)))
                })
                .await;
            match page {
                Ok(Ok((page, behind))) => ok(&wire::IssueList {
                    issues: page.issues.iter().map(summary).collect(),
                    next: page.next.map(|c| c.text()),
                    repo,
                    export_behind: Some(u64::try_from(behind).unwrap_or(0)),
                }),
                Ok(Err(e)) => issue_error(&repo, e),
                Err(e) => internal(&repo, e),
            }
        }
        IssueCmd::Open {
            title,
            body,
            labels,
            ..
        } => {
            let new = NewIssue {
                title,
                body: body_of(body).unwrap_or_default(),
                labels,
            };
            write(
                ctx,
                (&repo, Scope::Repository),
                "opened",
                actor,
                None,
                max_body,
                move |c, w| issues::open(c, w, &new).map(|w| (w, Extra::default())),
            )
            .await
        }
        IssueCmd::Comment {
            id, body, fence, ..
        } => {
            let body = body_of(Some(body)).unwrap_or_default();
            write(
                ctx,
                (&repo, Scope::Repository),
                "commented",
                actor,
                fence,
                max_body,
                move |c, w| issues::comment(c, w, &id, &body).map(|w| (w, Extra::default())),
            )
            .await
        }
        IssueCmd::Edit {
            id,
            title,
            body,
            priority,
            fence,
            ..
        } => {
            let body = body_of(body);
            write(
                ctx,
                (&repo, Scope::Repository),
                "edited",
                actor,
                fence,
                max_body,
                move |c, w| {
                    let mut written = None;
                    if title.is_some() || body.is_some() {
                        written = Some(issues::edit(c, w, &id, title.as_deref(), body.as_deref())?);
                    }
                    if let Some(priority) = priority {
                        written = Some(issues::set_priority(c, w, &id, priority)?);
                    }
                    let written = written.expect("the parser wants at least one change");
                    Ok((written, Extra::default()))
                },
            )
            .await
        }
        IssueCmd::Ready { labels, limit, .. } => {
            let (r, principal) = (repo.clone(), ctx.caller.principal().to_string());
            let now = chrono::Utc::now().timestamp();
            let limit = limit.unwrap_or(issues::DEFAULT_PAGE);
            let ready = ctx
                .app
                .reads
                .read(move |conn| Ok(queue::ready_in(conn, &r, &labels, &principal, now, limit)?))
                .await;
            match ready {
                Ok(ready) => ok(&wire::ReadyList {
                    issues: ready.iter().map(ready_row).collect(),
                    repo,
                }),
                Err(e) => internal(&repo, e),
            }
        }
        IssueCmd::Label {
            id,
            add,
            remove,
            fence,
            ..
        } => {
            write(
                ctx,
                (&repo, Scope::Repository),
                "labeled",
                actor,
                fence,
                max_body,
                move |c, w| issues::label(c, w, &id, &add, &remove).map(|w| (w, Extra::default())),
            )
            .await
        }
        IssueCmd::Close {
            id, reason, fence, ..
        } => {
            write(
                ctx,
                (&repo, Scope::Repository),
                "closed",
                actor,
                fence,
                max_body,
                move |c, w| {
                    issues::close(c, w, &id, reason.as_deref())
                        .map(|closed| (closed.written, ended(closed.ended_lease.as_ref())))
                },
            )
            .await
        }
        IssueCmd::Reopen { id, fence, .. } => {
            write(
                ctx,
                (&repo, Scope::Repository),
                "reopened",
                actor,
                fence,
                max_body,
                move |c, w| issues::reopen(c, w, &id).map(|w| (w, Extra::default())),
            )
            .await
        }
        IssueCmd::Link {
            id,
            kind,
            other,
            fence,
            unlink,
            ..
        } => {
            let (other_repo, other_id) = match other_end(ctx, &repo, &other).await {
                Ok(found) => found,
                Err(reply) => return reply,
            };
            let kind = LinkKind::parse(&kind).unwrap_or(LinkKind::Relates);
            let status = if unlink { "unlinked" } else { "linked" };
            let scope = if other_repo == repo {
                Scope::Repository
            } else {
                Scope::Several
            };
            write(
                ctx,
                (&repo, scope),
                status,
                actor,
                fence,
                max_body,
                move |c, w| {
                    let done = if unlink {
                        issues::unlink(c, w, &id, kind, &other_repo, &other_id)
                    } else {
                        issues::link(c, w, &id, kind, &other_repo, &other_id)
                    };
                    done.map(|w| {
                        let target = IssueKey {
                            repo: other_repo.clone(),
                            id: issues::resolve(c, &other_repo, &other_id).unwrap_or_default(),
                        };
                        let link = wire::LinkChange {
                            kind: kind.as_str().to_string(),
                            target: key_ref(&target),
                        };
                        (
                            w,
                            Extra {
                                link: Some(link),
                                ..Extra::default()
                            },
                        )
                    })
                },
            )
            .await
        }
    }
}

/// Which repositories a write reads and writes: the writer locks that
/// repository only (`Writer::write_in`), or takes the key of the writes
/// that may touch several.
#[derive(Clone, Copy)]
enum Scope {
    Repository,
    /// A link or unlink across repositories: whether the pair is linked
    /// already is read from both sides.
    Several,
}

/// What a write adds to `{"status", "repo", "issue", "event", "seq"}`.
#[derive(Default)]
struct Extra {
    lease_ended: Option<Option<wire::EndedLease>>,
    link: Option<wire::LinkChange>,
}

/// `{"lease_ended": {...} | null}` of a close.
fn ended(lease: Option<&Lease>) -> Extra {
    Extra {
        lease_ended: Some(lease.map(|l| wire::EndedLease {
            holder: l.holder.clone(),
            token: l.token,
            holder_name: None,
        })),
        link: None,
    }
}

/// Run one write through the writer and reply with
/// `{"status", "repo", "issue", "event", "seq", ...extra}`.
async fn write<F>(
    ctx: &Context,
    (repo, scope): (&str, Scope),
    status: &'static str,
    actor: Person,
    fence: Option<i64>,
    max_body: usize,
    f: F,
) -> Reply
where
    F: Fn(&collab_store::sql::Connection, &WriteCtx<'_>) -> Result<(Written, Extra), IssueError>
        + Send
        + 'static,
{
    let owned_repo = repo.to_string();
    let label = format!("collab-issue {status}");
    let run = move |conn: &collab_store::sql::Connection, now| {
        let w = WriteCtx {
            repo: &owned_repo,
            actor: &actor,
            fence,
            max_body,
            now,
        };
        // An error rolls the write back (the writer's SAVEPOINT).
        Ok(f(conn, &w)?)
    };
    let writer = &ctx.app.writer;
    let done = match scope {
        Scope::Repository => writer.write_in(repo, label, run).await,
        Scope::Several => writer.write(label, run).await,
    };
    match done {
        Ok((written, extra)) => ok(&wire::IssueWritten {
            status: status.to_string(),
            repo: repo.to_string(),
            issue: written.issue,
            event: written.event,
            seq: ctx.app.writer.final_seq(written.seq),
            lease_ended: extra.lease_ended,
            link: extra.link,
        }),
        Err(e) => match e.downcast::<IssueError>() {
            Ok(e) => issue_error(repo, e),
            Err(e) => internal(repo, e),
        },
    }
}

fn issue_error(repo: &str, e: IssueError) -> Reply {
    match e {
        IssueError::Fenced {
            issue,
            holder,
            token,
            closed,
        } => {
            // Why, in words: a token whose lease the issue's close ended
            // (`holder: null`) is told the issue is closed.
            let why = issues::fenced_reason(holder.as_deref(), token, closed);
            (
                reply_line(&Fenced::new(repo, Some(issue), holder, token, Some(why))),
                EXIT_FENCED,
            )
        }
        IssueError::Sql(e) => internal(repo, e.into()),
        other => error(other),
    }
}

fn internal(repo: &str, e: anyhow::Error) -> Reply {
    tracing::error!(repo, "collab-issue: collab database: {e:#}");
    super::reply::internal_reply(&e)
}

async fn show(ctx: &Context, repo: String, id: String) -> Reply {
    let (r, principal) = (repo.clone(), ctx.caller.principal().to_string());
    let now = chrono::Utc::now().timestamp();
    let read = ctx
        .app
        .reads
        .read(move |conn| {
            let detail = match issues::show(conn, &r, &id) {
                Ok(d) => d,
                Err(e) => return Ok(Err(e)),
            };
            let lease = leases::current_in(conn, &r, &detail.issue.id, now)?;
            let not_ready = queue::not_ready_in(conn, &r, &detail.issue.id, &principal, now)?;
            Ok(Ok((detail, lease, not_ready)))
        })
        .await;
    let (mut detail, lease, not_ready) = match read {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return issue_error(&repo, e),
        Err(e) => return internal(&repo, e),
    };
    // Links and blockers in repositories the caller cannot read are not
    // shown (a hidden blocker still counts, without naming it).
    let (app, caller, here) = (ctx.app.clone(), ctx.caller.clone(), repo.clone());
    let names = DisplayNames::of(&ctx.app);
    let links = std::mem::take(&mut detail.links);
    let (links, not_ready) = tokio::task::spawn_blocking(move || {
        let visible = |k: &IssueKey| {
            k.repo == here || authz::authorize(&app, &caller, &k.repo, Access::Read).is_ok()
        };
        let mut links = links;
        links.retain(visible);
        let reasons: Vec<String> = not_ready
            .iter()
            .map(|reason| match reason {
                NotReady::BlockedBy { repo, id } => {
                    let key = IssueKey {
                        repo: repo.clone(),
                        id: id.clone(),
                    };
                    if visible(&key) {
                        format!("blocked by {}", issues::link_text(&key))
                    } else {
                        "blocked by an issue in a repository you cannot read".to_string()
                    }
                }
                other => reason_text(other, &names),
            })
            .collect();
        (links, reasons)
    })
    .await
    .unwrap_or_default();
    detail.links = links;
    let lease = lease.map(|l| wire::ShownLease {
        holder: l.holder,
        token: l.token,
        acquired_at: second_text(Some(l.acquired_at)),
        expires_at: second_text(l.expires_at),
        note: l.note,
        holder_name: None,
    });
    ok(&shown(&detail, lease, not_ready))
}

/// Seconds as lease times are written (`2026-12-03T07:55:58Z`).
fn second_text(secs: Option<i64>) -> Option<String> {
    rfc3339(secs).as_str().map(str::to_string)
}

/// Why an issue is not ready, in words (`collab-issue show`); holders by
/// their display names, as every other text names people.
fn reason_text(reason: &NotReady, names: &DisplayNames) -> String {
    let at = |secs: i64| rfc3339(Some(secs)).as_str().unwrap_or_default().to_string();
    match reason {
        NotReady::Closed => "closed".to_string(),
        NotReady::Held {
            holder,
            expires_at: Some(until),
        } => format!("held by {} until {}", names.name(holder), at(*until)),
        NotReady::Held {
            holder,
            expires_at: None,
        } => format!("held by {} (no expiry)", names.name(holder)),
        NotReady::Locked { holder, until } => format!(
            "in lock delay until {} after {}'s lease expired",
            at(*until),
            names.name(holder)
        ),
        NotReady::BlockedBy { repo, id } => format!(
            "blocked by {}",
            issues::link_text(&IssueKey {
                repo: repo.clone(),
                id: id.clone()
            })
        ),
    }
}

/// One row of `ready`.
fn ready_row(i: &ReadyIssue) -> wire::ReadyIssue {
    wire::ReadyIssue {
        id: i.id.clone(),
        title: i.title.clone(),
        labels: i.labels.clone(),
        priority: i.priority,
        created_at: time_text(i.created_ms),
    }
}

// ---------------------------------------------------------------- reply shapes

/// Milliseconds as the CLI prints times (`2026-12-03T07:55:58.114Z`),
/// `None` for one out of range.
pub fn time_text(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_string))
}

pub(super) fn person(p: &Person) -> wire::Person {
    wire::Person {
        name: p.name.clone(),
        key: p.key.clone(),
        principal: p.principal.clone(),
        display_name: None,
    }
}

/// An issue's body and its links as `show` gives them to this caller
/// (links into repositories the caller cannot read left out): what
/// `collab-lease next` adds to a claim, so an agent needs no `show` to
/// start. Empty when the read fails (logged): the claim is made and must
/// still reach its caller.
pub(super) async fn body_and_links(ctx: &Context, repo: &str, id: &str) -> (String, wire::Links) {
    let (r, i) = (repo.to_string(), id.to_string());
    let read = ctx
        .app
        .reads
        .read(move |conn| Ok(issues::show(conn, &r, &i)))
        .await;
    let detail = match read {
        Ok(Ok(detail)) => detail,
        Ok(Err(e)) => {
            tracing::warn!(repo, issue = id, "reading a claimed issue: {e}");
            return Default::default();
        }
        Err(e) => {
            tracing::warn!(repo, issue = id, "reading a claimed issue: {e:#}");
            return Default::default();
        }
    };
    let (app, caller, here) = (ctx.app.clone(), ctx.caller.clone(), repo.to_string());
    let mut links = detail.links;
    let links = tokio::task::spawn_blocking(move || {
        links.retain(|k| {
            k.repo == here || authz::authorize(&app, &caller, &k.repo, Access::Read).is_ok()
        });
        links
    })
    .await
    .unwrap_or_default();
    let keys = |v: &[IssueKey]| v.iter().map(key_ref).collect::<Vec<_>>();
    let links = wire::Links {
        blocks: keys(&links.blocks),
        blocked_by: keys(&links.blocked_by),
        relates: keys(&links.relates),
    };
    (detail.issue.body, links)
}

fn key_ref(k: &IssueKey) -> wire::IssueRef {
    wire::IssueRef {
        repo: k.repo.clone(),
        id: k.id.clone(),
        text: issues::link_text(k),
    }
}

/// One row of `list` (the CLI's `issue list --json` row, plus `priority`).
pub fn summary(i: &Issue) -> wire::IssueSummary {
    wire::IssueSummary {
        id: i.id.clone(),
        title: i.title.clone(),
        status: i.status.to_string(),
        author: person(&i.author),
        created_at: time_text(i.created_ms),
        updated_at: time_text(i.updated_ms),
        labels: i.labels.clone(),
        comments: i.comment_count,
        priority: i.priority,
    }
}

/// `show` (the CLI's `issue show --json` object, plus repo, priority,
/// imported, links, the live lease and readiness).
pub fn shown(
    d: &IssueDetail,
    lease: Option<wire::ShownLease>,
    not_ready: Vec<String>,
) -> wire::IssueShown {
    let i = &d.issue;
    let keys = |v: &[IssueKey]| v.iter().map(key_ref).collect::<Vec<_>>();
    wire::IssueShown {
        id: i.id.clone(),
        repo: i.repo.clone(),
        title: i.title.clone(),
        body: i.body.clone(),
        author: person(&i.author),
        created_at: time_text(i.created_ms),
        updated_at: time_text(i.updated_ms),
        status: i.status.to_string(),
        closed_reason: i.closed_reason.clone(),
        labels: i.labels.clone(),
        priority: i.priority,
        imported: i.imported,
        comments: d
            .comments
            .iter()
            .map(|c| wire::Comment {
                id: c.id.clone(),
                author: person(&c.author),
                at: time_text(c.at_ms),
                body: c.body.clone(),
            })
            .collect(),
        links: wire::Links {
            blocks: keys(&d.links.blocks),
            blocked_by: keys(&d.links.blocked_by),
            relates: keys(&d.links.relates),
        },
        ready: not_ready.is_empty(),
        not_ready,
        lease,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_render_like_the_cli() {
        assert_eq!(
            time_text(1_788_609_600_114).as_deref(),
            Some("2026-09-05T12:00:00.114Z")
        );
        assert_eq!(
            time_text(1_788_609_600_000).as_deref(),
            Some("2026-09-05T12:00:00Z")
        );
    }
}
