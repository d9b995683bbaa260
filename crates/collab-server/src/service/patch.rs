//! `collab-patch list|show|diff|interdiff|review|comment|close|reopen|merge|link`:
//! patches held by the server (opened and revised by
//! `git push origin HEAD:refs/for/<base>`, see `hooks::review`), one round
//! trip per action.
//!
//! Like `collab-issue`: `authz` decides the level (Read for `list`, `show`,
//! `diff` and `interdiff`, Write for the rest; unknown and invisible
//! repositories both get `error: repository not found`), reads go through
//! the read pool, writes through the single writer (answered after COMMIT),
//! and every reply is one JSON line. Patch decisions are `collab_store::patches`'s;
//! the merge itself is `patch_merge`'s. Exit codes: 0 success, 1 error, 4
//! a merge refused by fencing.
//!
//! ```text
//! collab-patch list      '<repo>' [--state open|merged|closed|all] [--limit N] [--after CURSOR]
//! collab-patch show      '<repo>' '<id>'
//! collab-patch diff      '<repo>' '<id>' [--rev N]
//! collab-patch interdiff '<repo>' '<id>' A B
//! collab-patch review    '<repo>' '<id>' --approve|--request-changes|--comment [--body B|--body-stdin] [--rev N]
//! collab-patch comment   '<repo>' '<id>' (--body B|--body-stdin) [--path P [--line N]] [--rev N]
//! collab-patch close     '<repo>' '<id>'
//! collab-patch reopen    '<repo>' '<id>'
//! collab-patch merge     '<repo>' '<id>' [--lease-token N]
//! collab-patch link      '<repo>' '<id>' '<issue>'
//! ```
//!
//! JSON shapes: docs/ssh-verbs.md.

use crate::people::{annotate_line, DisplayNames};
use collab_proto::replies::fenced::Fenced;
use collab_proto::replies::patch as wire;

use serde::Serialize;

use super::context::Context;
use super::issue::{authorized_entry, body_arg, person, time_text, BodyArg, Reply};
use super::reply::reply_line;
use crate::authz::{self, Access};
use crate::patch_merge::{self, MergeError, RunError};
use crate::repos::RepoEntry;
use collab_proto::verbs::Invocation;
use collab_record::diff;
use collab_store::merge_intents;
use collab_store::patches::{
    self, Inline, ListQuery, MergeRule, Patch, PatchDetail, PatchError, StateFilter, Verdict,
    WriteCtx, Written,
};

/// Exit status of a merge refused by fencing.
pub use collab_proto::exit::FENCED as EXIT_FENCED;
/// Largest diff text one reply carries; a bigger one is refused with a
/// hint to diff locally.
pub const MAX_DIFF_BYTES: usize = 8 * 1024 * 1024;
const INTERNAL: &str = "error: internal error";

/// A parsed `collab-patch` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchCmd {
    List {
        repo: String,
        state: String,
        limit: Option<usize>,
        after: Option<String>,
    },
    Show {
        repo: String,
        id: String,
    },
    Diff {
        repo: String,
        id: String,
        rev: Option<i64>,
    },
    Interdiff {
        repo: String,
        id: String,
        from: i64,
        to: i64,
    },
    Review {
        repo: String,
        id: String,
        verdict: Verdict,
        body: Option<BodyArg>,
        rev: Option<i64>,
    },
    Comment {
        repo: String,
        id: String,
        body: BodyArg,
        path: Option<String>,
        line: Option<i64>,
        rev: Option<i64>,
    },
    Close {
        repo: String,
        id: String,
    },
    Reopen {
        repo: String,
        id: String,
    },
    Merge {
        repo: String,
        id: String,
        fence: Option<i64>,
        mode: MergeMode,
    },
    /// Link an issue of the same repository.
    Link {
        repo: String,
        id: String,
        issue: String,
    },
}

impl PatchCmd {
    pub fn repo(&self) -> &str {
        match self {
            PatchCmd::List { repo, .. }
            | PatchCmd::Show { repo, .. }
            | PatchCmd::Diff { repo, .. }
            | PatchCmd::Interdiff { repo, .. }
            | PatchCmd::Review { repo, .. }
            | PatchCmd::Comment { repo, .. }
            | PatchCmd::Close { repo, .. }
            | PatchCmd::Reopen { repo, .. }
            | PatchCmd::Merge { repo, .. }
            | PatchCmd::Link { repo, .. } => repo,
        }
    }

    pub fn verb(&self) -> &'static str {
        match self {
            PatchCmd::List { .. } => "collab-patch list",
            PatchCmd::Show { .. } => "collab-patch show",
            PatchCmd::Diff { .. } => "collab-patch diff",
            PatchCmd::Interdiff { .. } => "collab-patch interdiff",
            PatchCmd::Review { .. } => "collab-patch review",
            PatchCmd::Comment { .. } => "collab-patch comment",
            PatchCmd::Close { .. } => "collab-patch close",
            PatchCmd::Reopen { .. } => "collab-patch reopen",
            PatchCmd::Merge { .. } => "collab-patch merge",
            PatchCmd::Link { .. } => "collab-patch link",
        }
    }

    /// The level its row asks on the repository.
    pub fn needed_access(&self) -> Access {
        collab_proto::verbs::level(self.verb(), |_| None)
    }

    pub(crate) fn reads_stdin(&self) -> bool {
        matches!(
            self,
            PatchCmd::Review {
                body: Some(BodyArg::Stdin),
                ..
            } | PatchCmd::Comment {
                body: BodyArg::Stdin,
                ..
            }
        )
    }
}

/// A list cursor: `<created_ms>.<id>` of the last patch of a page.
fn parse_cursor(text: &str) -> Option<(i64, String)> {
    let (ms, id) = text.split_once('.')?;
    let ms: i64 = ms.parse().ok()?;
    (id.len() == 40 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| (ms, id.to_string()))
}

impl PatchCmd {
    /// The command for a `collab-patch` row of the verb table; `None` for
    /// a value only the server checks (a cursor).
    pub fn from_invocation(inv: &Invocation<'_>) -> Option<PatchCmd> {
        let s = |v: &str| v.to_string();
        let repo = s(inv.arg("repo"));
        let id = || s(inv.arg("patch"));
        let rev = || inv.int("--rev");
        Some(match inv.verb.action {
            "list" => {
                let state = inv.flag("--state").unwrap_or("open").to_string();
                StateFilter::parse(&state)?;
                let after = inv.flag("--after").map(s);
                if let Some(after) = &after {
                    parse_cursor(after)?;
                }
                PatchCmd::List {
                    repo,
                    state,
                    limit: inv.int("--limit").map(|n| n as usize),
                    after,
                }
            }
            "show" => PatchCmd::Show { repo, id: id() },
            "diff" => PatchCmd::Diff {
                repo,
                id: id(),
                rev: rev(),
            },
            "interdiff" => PatchCmd::Interdiff {
                repo,
                id: id(),
                from: inv.int_arg("from"),
                to: inv.int_arg("to"),
            },
            "review" => {
                let verdict = if inv.has("--approve") {
                    Verdict::Approve
                } else if inv.has("--request-changes") {
                    Verdict::RequestChanges
                } else {
                    Verdict::Comment
                };
                PatchCmd::Review {
                    repo,
                    id: id(),
                    verdict,
                    body: body_arg(inv),
                    rev: rev(),
                }
            }
            "comment" => PatchCmd::Comment {
                repo,
                id: id(),
                body: body_arg(inv)?,
                path: inv.flag("--path").map(s),
                line: inv.int("--line"),
                rev: rev(),
            },
            "close" => PatchCmd::Close { repo, id: id() },
            "reopen" => PatchCmd::Reopen { repo, id: id() },
            "link" => PatchCmd::Link {
                repo,
                id: id(),
                issue: s(inv.arg("issue")),
            },
            "merge" => PatchCmd::Merge {
                repo,
                id: id(),
                fence: inv.int("--lease-token"),
                mode: if inv.has("--when-green") {
                    MergeMode::WhenGreen
                } else if inv.has("--cancel") {
                    MergeMode::Cancel
                } else {
                    MergeMode::Now
                },
            },
            _ => return None,
        })
    }
}

fn error(message: impl std::fmt::Display) -> Reply {
    (format!("error: {message}"), 1)
}

fn ok(reply: &impl Serialize) -> Reply {
    (reply_line(reply), 0)
}

fn internal(repo: &str, e: anyhow::Error) -> Reply {
    tracing::error!(repo, "collab-patch: {e:#}");
    super::reply::internal_reply(&e)
}

fn patch_error(repo: &str, e: PatchError) -> Reply {
    match e {
        PatchError::Sql(e) => internal(repo, e.into()),
        other => error(other),
    }
}

/// The reply to one `collab-patch` command: authorized, then its work;
/// `stdin` is the body of a `--body-stdin` (the service authorizes such
/// a command before its door reads the body, and calls
/// [`authorized_reply`]).
pub async fn reply(ctx: &Context, cmd: PatchCmd, stdin: Option<String>) -> (String, u32) {
    let needed = cmd.needed_access();
    let entry = match authorized_entry(ctx, cmd.repo().to_string(), needed).await {
        Ok(entry) => entry,
        Err(reply) => return reply,
    };
    authorized_reply(ctx, &entry, cmd, stdin).await
}

/// The work of an authorized command, the log line and export of a write,
/// and the reply with its display names.
pub(crate) async fn authorized_reply(
    ctx: &Context,
    entry: &RepoEntry,
    cmd: PatchCmd,
    stdin: Option<String>,
) -> (String, u32) {
    let needed = cmd.needed_access();
    let verb = cmd.verb();
    let (message, code) = answer(ctx, entry, cmd, stdin).await;
    if code == 0 && needed == Access::Write {
        tracing::info!(
            principal = ctx.caller.principal(),
            repo = entry.name,
            verb,
            "patch written"
        );
        ctx.app.export.touch(&entry.name);
    }
    (annotate_line(message, &DisplayNames::of(&ctx.app)), code)
}

async fn answer(ctx: &Context, entry: &RepoEntry, cmd: PatchCmd, stdin: Option<String>) -> Reply {
    let repo = entry.name.clone();
    let body_of = |arg: Option<BodyArg>| -> String {
        match arg {
            Some(BodyArg::Text(t)) => t,
            Some(BodyArg::Stdin) => stdin.clone().unwrap_or_default(),
            None => String::new(),
        }
    };
    match cmd {
        PatchCmd::List {
            state,
            limit,
            after,
            ..
        } => {
            let query = ListQuery {
                state: StateFilter::parse(&state).unwrap_or(StateFilter::Open),
                limit: limit.unwrap_or(patches::DEFAULT_PAGE),
                after: after.as_deref().and_then(parse_cursor),
            };
            let r = repo.clone();
            let page = ctx
                .app
                .reads
                .read(move |conn| {
                    let page = match patches::list(conn, &r, &query) {
                        Ok(page) => page,
                        Err(e) => return Ok(Err(e)),
                    };
                    // Each row's latest head and the votes on it.
                    let mut rows = Vec::new();
                    for p in page.patches {
                        let head = patches::revisions(conn, &r, &p.id)?.pop().map(|r| r.head);
                        let votes = patches::latest_votes(conn, &r, &p.id)?;
                        rows.push(Row {
                            patch: p,
                            head,
                            votes,
                        });
                    }
                    Ok(Ok((rows, page.more)))
                })
                .await;
            match page {
                Ok(Ok((rows, more))) => {
                    let next = if more {
                        rows.last()
                            .map(|row| format!("{}.{}", row.patch.created_ms, row.patch.id))
                    } else {
                        None
                    };
                    ok(&wire::PatchList {
                        patches: rows.iter().map(summary).collect(),
                        next,
                        repo,
                    })
                }
                Ok(Err(e)) => patch_error(&repo, e),
                Err(e) => internal(&repo, e),
            }
        }
        PatchCmd::Show { id, .. } => match read_detail(ctx, &repo, id).await {
            Ok(detail) => {
                let rule = merge_rule(ctx, entry).await;
                let checks = match head_checks(ctx, &repo, &detail).await {
                    Ok(checks) => checks,
                    Err(e) => return internal(&repo, e),
                };
                let (r, pid) = (repo.clone(), detail.patch.id.clone());
                let intent = match ctx
                    .app
                    .reads
                    .read(move |conn| Ok(merge_intents::get(conn, &r, &pid)?))
                    .await
                {
                    Ok(intent) => intent,
                    Err(e) => return internal(&repo, e),
                };
                ok(&shown(&detail, &rule, &checks, intent.as_ref()))
            }
            Err(reply) => reply,
        },
        PatchCmd::Diff { id, rev, .. } => {
            let detail = match read_detail(ctx, &repo, id).await {
                Ok(d) => d,
                Err(reply) => return reply,
            };
            let path = entry.path.clone();
            let done = tokio::task::spawn_blocking(move || revision_diff(&path, &detail, rev))
                .await
                .unwrap_or_else(|e| Err(error(format!("diff task failed: {e}"))));
            done.unwrap_or_else(|reply| reply)
        }
        PatchCmd::Interdiff { id, from, to, .. } => {
            let detail = match read_detail(ctx, &repo, id).await {
                Ok(d) => d,
                Err(reply) => return reply,
            };
            let path = entry.path.clone();
            let done = tokio::task::spawn_blocking(move || interdiff(&path, &detail, from, to))
                .await
                .unwrap_or_else(|e| Err(error(format!("interdiff task failed: {e}"))));
            done.unwrap_or_else(|reply| reply)
        }
        PatchCmd::Review {
            id,
            verdict,
            body,
            rev,
            ..
        } => {
            let body = body_of(body);
            let status = match verdict {
                Verdict::Approve => "approved",
                Verdict::RequestChanges => "changes_requested",
                Verdict::Comment => "reviewed",
            };
            write(ctx, &repo, status, move |c, w| {
                patches::review(c, w, &id, rev, verdict, &body)
            })
            .await
        }
        PatchCmd::Comment {
            id,
            body,
            path,
            line,
            rev,
            ..
        } => {
            let body = body_of(Some(body));
            let inline = path.map(|path| Inline { path, line });
            if let Some(inline) = &inline {
                if let Err(reply) = check_inline(ctx, entry, &id, rev, inline).await {
                    return reply;
                }
            }
            write(ctx, &repo, "commented", move |c, w| {
                patches::comment(c, w, &id, &body, rev, inline.as_ref())
            })
            .await
        }
        PatchCmd::Close { id, .. } => {
            write(ctx, &repo, "closed", move |c, w| patches::close(c, w, &id)).await
        }
        PatchCmd::Reopen { id, .. } => {
            write(ctx, &repo, "reopened", move |c, w| {
                patches::reopen(c, w, &id)
            })
            .await
        }
        PatchCmd::Link { id, issue, .. } => {
            write(ctx, &repo, "linked", move |c, w| {
                patches::link_issue(c, w, &id, &issue)
            })
            .await
        }
        PatchCmd::Merge {
            id, fence, mode, ..
        } => merge(ctx, entry, id, fence, mode).await,
    }
}

async fn read_detail(ctx: &Context, repo: &str, id: String) -> Result<PatchDetail, Reply> {
    let r = repo.to_string();
    let read = ctx
        .app
        .reads
        .read(move |conn| Ok(patches::show(conn, &r, &id)))
        .await;
    match read {
        Ok(Ok(detail)) => Ok(detail),
        Ok(Err(e)) => Err(patch_error(repo, e)),
        Err(e) => Err(internal(repo, e)),
    }
}

/// The checks on the head of the patch's latest revision (older
/// revisions' checks are not the patch's any more).
async fn head_checks(
    ctx: &Context,
    repo: &str,
    detail: &PatchDetail,
) -> anyhow::Result<Vec<collab_store::checks::Check>> {
    let Some(head) = detail.latest().map(|r| r.head.clone()) else {
        return Ok(Vec::new());
    };
    let r = repo.to_string();
    ctx.app
        .reads
        .read(move |conn| Ok(collab_store::checks::list(conn, &r, &head)?))
        .await
}

async fn merge_rule(ctx: &Context, entry: &RepoEntry) -> MergeRule {
    let (app, entry) = (ctx.app.clone(), entry.clone());
    tokio::task::spawn_blocking(move || authz::merge_rule(&app, &entry))
        .await
        .unwrap_or_default()
}

/// Run one patch write through the writer and reply with
/// `{"status", "repo", "patch", "revision", "event", "seq"}`.
async fn write<F>(ctx: &Context, repo: &str, status: &'static str, f: F) -> Reply
where
    F: Fn(&collab_store::sql::Connection, &WriteCtx<'_>) -> Result<Written, PatchError>
        + Send
        + 'static,
{
    let actor = super::issue::actor(&ctx.caller);
    let max_body = usize::try_from(ctx.app.config.max_issue_body).unwrap_or(usize::MAX);
    let owned = repo.to_string();
    let done = ctx
        .app
        .writer
        .write_in(repo, format!("collab-patch {status}"), move |conn, now| {
            let w = WriteCtx {
                repo: &owned,
                actor: &actor,
                max_body,
                now,
            };
            Ok(f(conn, &w)?)
        })
        .await;
    match done {
        Ok(mut written) => {
            written.seq = ctx.app.writer.final_seq(written.seq);
            ok(&written_reply(status, repo, &written))
        }
        Err(e) => match e.downcast::<PatchError>() {
            Ok(e) => patch_error(repo, e),
            Err(e) => internal(repo, e),
        },
    }
}

fn written_reply(status: &str, repo: &str, w: &Written) -> wire::PatchWritten {
    wire::PatchWritten {
        status: status.to_string(),
        repo: repo.to_string(),
        patch: w.patch.clone(),
        revision: w.revision,
        event: w.event.clone(),
        seq: w.seq,
    }
}

/// An inline comment's path must exist in the revision it is on (or in
/// that revision's base, for a deleted file).
async fn check_inline(
    ctx: &Context,
    entry: &RepoEntry,
    id: &str,
    rev: Option<i64>,
    inline: &Inline,
) -> Result<(), Reply> {
    let detail = read_detail(ctx, &entry.name, id.to_string()).await?;
    let n = rev.unwrap_or(detail.patch.revision_count);
    let Some(r) = detail.revisions.iter().find(|r| r.n == n).cloned() else {
        return Err(error(format!(
            "patch {} has no revision {n} (it has {})",
            short(&detail.patch.id),
            detail.patch.revision_count
        )));
    };
    let (path, file) = (entry.path.clone(), inline.path.clone());
    let found = tokio::task::spawn_blocking(move || {
        let repo = git2::Repository::open_bare(&path).ok()?;
        let in_commit = |oid: &str| {
            git2::Oid::from_str(oid)
                .ok()
                .and_then(|oid| repo.find_commit(oid).ok())
                .and_then(|c| c.tree().ok())
                .is_some_and(|t| t.get_path(std::path::Path::new(&file)).is_ok())
        };
        Some(in_commit(&r.head) || in_commit(&r.base_commit))
    })
    .await
    .ok()
    .flatten()
    .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(error(format!(
            "revision {n} of patch {} has no file '{}'",
            short(&detail.patch.id),
            inline.path.escape_default()
        )))
    }
}

fn oid(s: &str) -> Result<git2::Oid, Reply> {
    git2::Oid::from_str(s).map_err(|_| error(format!("'{s}' is not a commit id")))
}

fn revision_of(detail: &PatchDetail, n: Option<i64>) -> Result<&patches::Revision, Reply> {
    let n = n.unwrap_or(detail.patch.revision_count);
    detail.revisions.iter().find(|r| r.n == n).ok_or_else(|| {
        error(format!(
            "patch {} has no revision {n} (it has {})",
            short(&detail.patch.id),
            detail.patch.revision_count
        ))
    })
}

fn open_repo(path: &std::path::Path) -> Result<git2::Repository, Reply> {
    git2::Repository::open_bare(path).map_err(|e| {
        tracing::error!("collab-patch: opening {}: {e}", path.display());
        (INTERNAL.to_string(), 1)
    })
}

/// Bound a diff reply.
fn bounded(reply: &impl Serialize, text_len: usize) -> Reply {
    if text_len > MAX_DIFF_BYTES {
        return error(format!(
            "the diff is larger than {MAX_DIFF_BYTES} bytes; fetch the revision (refs/collab/revisions/) and diff it locally"
        ));
    }
    ok(reply)
}

/// The files of a diff as its reply shows them.
fn files(files: &[diff::FileChange]) -> Vec<wire::FileChange> {
    files
        .iter()
        .map(|f| wire::FileChange {
            path: f.path.clone(),
            old_path: f.old_path.clone(),
            status: f.status.to_string(),
            additions: f.additions as u64,
            deletions: f.deletions as u64,
        })
        .collect()
}

fn revision_diff(
    path: &std::path::Path,
    detail: &PatchDetail,
    rev: Option<i64>,
) -> Result<Reply, Reply> {
    let repo = open_repo(path)?;
    let r = revision_of(detail, rev)?;
    let n = u32::try_from(r.n).unwrap_or(u32::MAX);
    let d = diff::commits_revision_diff(&repo, n, oid(&r.base_commit)?, oid(&r.head)?)
        .map_err(error)?;
    let len = d.diff.text.len();
    let reply = wire::RevisionDiff {
        patch: detail.patch.id.clone(),
        revision: d.revision,
        base_commit: d.base_commit,
        head: d.head,
        files: files(&d.diff.files),
        text: d.diff.text,
    };
    Ok(bounded(&reply, len))
}

fn interdiff(
    path: &std::path::Path,
    detail: &PatchDetail,
    from: i64,
    to: i64,
) -> Result<Reply, Reply> {
    let repo = open_repo(path)?;
    let (a, b) = (
        revision_of(detail, Some(from))?,
        revision_of(detail, Some(to))?,
    );
    let side = |r: &patches::Revision| -> Result<(u32, git2::Oid, git2::Oid), Reply> {
        Ok((
            u32::try_from(r.n).unwrap_or(u32::MAX),
            oid(&r.base_commit)?,
            oid(&r.head)?,
        ))
    };
    let d = diff::commits_interdiff(&repo, side(a)?, side(b)?).map_err(error)?;
    let len = d.diff.text.len();
    let reply = wire::Interdiff {
        patch: detail.patch.id.clone(),
        from: d.from,
        to: d.to,
        rebased: d.rebased,
        conflicts: d.conflicts,
        files: files(&d.diff.files),
        text: d.diff.text,
    };
    Ok(bounded(&reply, len))
}

// ---------------------------------------------------------------- merge

/// How `collab-patch merge` was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMode {
    /// Merge now, or refuse.
    Now,
    /// `--when-green`: queue it; the server merges when the rule allows.
    WhenGreen,
    /// `--cancel`: drop a queued merge.
    Cancel,
}

async fn merge(
    ctx: &Context,
    entry: &RepoEntry,
    id: String,
    fence: Option<i64>,
    mode: MergeMode,
) -> Reply {
    let repo = entry.name.clone();
    if entry.is_governance() {
        return error("the governance repository is changed by a push, not by collab-patch merge");
    }
    match mode {
        // A branch with a merge queue: a plain merge joins the queue too
        // (the required checks are those of the merge group).
        MergeMode::Now if merge_rule(ctx, entry).await.queue => {
            queue_merge(ctx, entry, id, fence).await
        }
        MergeMode::Now => merge_stack(ctx, entry, id, fence).await,
        MergeMode::WhenGreen => queue_merge(ctx, entry, id, fence).await,
        MergeMode::Cancel => cancel_merge(ctx, &repo, id).await,
    }
}

/// The open patches `id` is stacked on (`depends_on`, followed down while
/// open), bottom first; at most `MAX_STACK` of them.
async fn open_below(ctx: &Context, repo: &str, id: &str) -> Result<Vec<String>, Reply> {
    let mut below = Vec::new();
    let mut next = read_detail(ctx, repo, id.to_string())
        .await?
        .patch
        .depends_on;
    while let Some(lower) = next {
        if below.len() == crate::hooks::review::MAX_STACK || below.contains(&lower) {
            break;
        }
        let detail = read_detail(ctx, repo, lower.clone()).await?;
        if detail.patch.status != patches::PatchStatus::Open {
            break;
        }
        next = detail.patch.depends_on;
        below.push(lower);
    }
    below.reverse();
    Ok(below)
}

/// `merge` of a stacked patch takes the open patches below it first,
/// bottom up, each by its own merge rule; the first refused stops the
/// stack there (the ones merged before it stay merged) and names it.
async fn merge_stack(ctx: &Context, entry: &RepoEntry, id: String, fence: Option<i64>) -> Reply {
    let repo = entry.name.clone();
    let mut detail = match read_detail(ctx, &repo, id).await {
        Ok(detail) => detail,
        Err(reply) => return reply,
    };
    let top = detail.patch.id.clone();
    if detail.patch.status != patches::PatchStatus::Open
        || detail.depends_on_status != Some(patches::PatchStatus::Open)
    {
        return merge_now(ctx, entry, top, fence).await;
    }
    // The top's own rule first, as if the ones below had merged: a top
    // that cannot merge takes nothing with it.
    detail.depends_on_status = Some(patches::PatchStatus::Merged);
    let checks = match head_checks(ctx, &repo, &detail).await {
        Ok(checks) => checks,
        Err(e) => return internal(&repo, e),
    };
    if let Err(why) = patches::verdict(&detail, &merge_rule(ctx, entry).await, &checks) {
        return error(PatchError::Rule(why));
    }
    let below = match open_below(ctx, &repo, &top).await {
        Ok(below) => below,
        Err(reply) => return reply,
    };
    let mut taken = Vec::new();
    for lower in below {
        let request = patch_merge::Request {
            app: &ctx.app,
            entry,
            patch: lower.clone(),
            merger: super::issue::actor(&ctx.caller),
            token: fence,
            revision: None,
        };
        match patch_merge::run(request).await {
            Ok(merged) => taken.push(wire::AlsoMerged {
                patch: lower,
                commit: merged.prepared.commit.to_string(),
                how: "below it in its stack".to_string(),
            }),
            Err(RunError::Refused(MergeError::Patch(e @ PatchError::Rule(_)))) => {
                return error(format!(
                    "merging patch {} below it in its stack first: {e}",
                    short(&lower)
                ))
            }
            Err(RunError::Refused(e)) => return merge_error(&repo, e),
            Err(e @ RunError::KeptMoving) => return error(e.to_string()),
            Err(RunError::Internal(e)) => return internal(&repo, e),
        }
    }
    let (mut line, code) = merge_now(ctx, entry, top, fence).await;
    if code == 0 && !taken.is_empty() {
        if let Ok(mut merged) = serde_json::from_str::<wire::Merged>(line.trim_end()) {
            taken.append(&mut merged.also_merged);
            merged.also_merged = taken;
            line = reply_line(&merged);
        }
    }
    (line, code)
}

async fn merge_now(ctx: &Context, entry: &RepoEntry, id: String, fence: Option<i64>) -> Reply {
    let repo = entry.name.clone();
    let request = patch_merge::Request {
        app: &ctx.app,
        entry,
        patch: id,
        merger: super::issue::actor(&ctx.caller),
        token: fence,
        revision: None,
    };
    match patch_merge::run(request).await {
        Ok(merged) => {
            let (done, found) = (&merged.prepared, &merged.committed.found);
            let written = &merged.committed.written;
            let branch = done.base_ref.strip_prefix("refs/heads/");
            ok(&wire::Merged {
                status: "merged".to_string(),
                patch: written.patch.clone(),
                revision: written.revision,
                seq: ctx.app.writer.final_seq(written.seq),
                branch: branch.unwrap_or(&done.base_ref).to_string(),
                commit: done.commit.to_string(),
                kind: done.kind.as_str().to_string(),
                old: done.old_tip.to_string(),
                new: done.new_tip.to_string(),
                also_merged: found
                    .merged
                    .iter()
                    .map(|(patch, commit, how)| wire::AlsoMerged {
                        patch: patch.clone(),
                        commit: commit.clone(),
                        how: how.to_string(),
                    })
                    .collect(),
                closed_issues: found
                    .closed
                    .iter()
                    .map(|(issue, commit)| wire::ClosedIssue {
                        issue: issue.clone(),
                        commit: commit.clone(),
                    })
                    .collect(),
                warnings: found.warnings.clone(),
                repo,
            })
        }
        Err(RunError::Refused(e)) => merge_error(&repo, e),
        Err(e @ RunError::KeptMoving) => error(e.to_string()),
        Err(RunError::Internal(e)) => internal(&repo, e),
    }
}

/// `--when-green`: record the intent and answer at once. Refused now what
/// waiting cannot mend: a patch that is not open, a required check that
/// already failed, a fenced base without a live lease token.
async fn queue_merge(ctx: &Context, entry: &RepoEntry, id: String, fence: Option<i64>) -> Reply {
    let repo = entry.name.clone();
    if !authz::caller_acts_unattended(&ctx.app, &ctx.caller) {
        return error(authz::UNATTENDED_REFUSAL);
    }
    let detail = match read_detail(ctx, &repo, id).await {
        Ok(d) => d,
        Err(reply) => return reply,
    };
    if detail.patch.status != patches::PatchStatus::Open {
        return patch_error(
            &repo,
            PatchError::Invalid(format!(
                "cannot queue a merge of patch {}: it is {}",
                short(&detail.patch.id),
                detail.patch.status.as_str()
            )),
        );
    }
    let rule = merge_rule(ctx, entry).await;
    let checks = match head_checks(ctx, &repo, &detail).await {
        Ok(checks) => checks,
        Err(e) => return internal(&repo, e),
    };
    // On a queued branch the required checks are the merge group's, not
    // the patch head's.
    let failed = if rule.queue {
        Vec::new()
    } else {
        patches::failed_checks(&detail, &rule, &checks)
    };
    if !failed.is_empty() {
        return error(format!(
            "merge not queued: required checks failed on revision {}: {}; push a new revision or run them again",
            detail.latest().map_or(0, |r| r.n),
            failed.join(", ")
        ));
    }
    let actor = super::issue::actor(&ctx.caller);
    // Fencing as a merge now would check it (and again at merge time).
    let base_fenced = authz::base_is_fenced(&ctx.app, entry, &detail.patch.base);
    let fenced = {
        let (d, a, r, rule) = (detail.clone(), actor.clone(), repo.clone(), rule.clone());
        ctx.app
            .reads
            .read(move |conn| {
                let w = WriteCtx {
                    repo: &r,
                    actor: &a,
                    max_body: 0,
                    now: chrono::Utc::now().timestamp(),
                };
                let m = patch_merge::MergeCtx {
                    w: &w,
                    rule: rule.clone(),
                    base_fenced,
                    token: fence,
                };
                Ok(patch_merge::check_fence(conn, &w, &d, &m))
            })
            .await
    };
    match fenced {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return merge_error(&repo, e),
        Err(e) => return internal(&repo, e),
    }
    let waiting = if rule.queue {
        patches::rule_allows(&detail, &rule).err()
    } else {
        patches::verdict(&detail, &rule, &checks).err()
    };
    let queue = rule.queue.then(|| detail.patch.base.clone());
    let queue_branch = queue.clone();
    let (r, a, patch_id) = (repo.clone(), actor.clone(), detail.patch.id.clone());
    let written = ctx
        .app
        .writer
        .write_in(
            &repo,
            "collab-patch merge --when-green",
            move |conn, now| {
                // Read again in the transaction: the revision queued is the
                // latest one when the intent is recorded.
                let detail = match patches::show(conn, &r, &patch_id) {
                    Ok(d) => d,
                    Err(e) => return Ok(Err(e)),
                };
                let Some(latest) = detail.latest().map(|l| l.n) else {
                    return Ok(Err(PatchError::Invalid("the patch has no revision".into())));
                };
                if detail.patch.status != patches::PatchStatus::Open {
                    return Ok(Err(PatchError::Invalid(format!(
                        "cannot queue a merge of patch {}: it is {}",
                        short(&patch_id),
                        detail.patch.status.as_str()
                    ))));
                }
                let existing = merge_intents::get(conn, &r, &patch_id)?;
                if existing.is_none()
                    && merge_intents::count_in(conn, &r)? >= merge_intents::MAX_PER_REPO
                {
                    return Ok(Err(PatchError::Invalid(format!(
                        "the repository has {} queued merges, the most it may hold",
                        merge_intents::MAX_PER_REPO
                    ))));
                }
                let intent = merge_intents::Intent {
                    repo: r.clone(),
                    patch: patch_id.clone(),
                    revision: latest,
                    requester: a.clone(),
                    lease_token: fence,
                    created_at: now,
                };
                let (seq, replaced) = merge_intents::queue(conn, &intent, now)?;
                // Joining a merge queue with a lease token: the queue
                // carries that tenure until the patch lands or leaves.
                if let (Some(branch), Some(token)) = (&queue_branch, fence) {
                    collab_store::queue_holds::take_in(
                        conn,
                        &r,
                        &patch_id,
                        branch,
                        &detail.issues,
                        &a.principal,
                        token,
                        now,
                    )?;
                }
                Ok(Ok((latest, seq, replaced)))
            },
        )
        .await;
    match written {
        Ok(Ok((revision, seq, replaced))) => ok(&wire::MergeQueued {
            status: "queued".to_string(),
            repo,
            patch: detail.patch.id,
            revision,
            seq: ctx.app.writer.final_seq(seq),
            replaced,
            requested_by: actor.principal,
            lease_token: fence,
            waiting_for: waiting,
            queue,
        }),
        Ok(Err(e)) => patch_error(&repo, e),
        Err(e) => internal(&repo, e),
    }
}

/// `--cancel`: drop the queued merge of a patch.
async fn cancel_merge(ctx: &Context, repo: &str, id: String) -> Reply {
    let actor = super::issue::actor(&ctx.caller);
    let (r, a) = (repo.to_string(), actor.clone());
    let written = ctx
        .app
        .writer
        .write_in(repo, "collab-patch merge --cancel", move |conn, now| {
            let patch_id = match patches::resolve(conn, &r, &id) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            let reason = format!("cancelled by {}", a.name);
            let seq = merge_intents::dequeue(conn, &r, &patch_id, Some(&a), &reason, now)?;
            Ok(Ok((patch_id, seq)))
        })
        .await;
    match written {
        Ok(Ok((patch, Some(seq)))) => ok(&wire::MergeDequeued {
            status: "dequeued".to_string(),
            repo: repo.to_string(),
            patch,
            seq: ctx.app.writer.final_seq(seq),
        }),
        Ok(Ok((patch, None))) => error(format!("patch {} has no queued merge", short(&patch))),
        Ok(Err(e)) => patch_error(repo, e),
        Err(e) => internal(repo, e),
    }
}

fn merge_error(repo: &str, e: MergeError) -> Reply {
    match e {
        MergeError::Patch(e) => patch_error(repo, e),
        MergeError::Moved => error("the base branch moved while merging; try again"),
        MergeError::Fenced {
            issue,
            holder,
            token,
            message,
        } => (
            reply_line(&Fenced::new(repo, issue, holder, token, Some(message))),
            EXIT_FENCED,
        ),
    }
}

// ---------------------------------------------------------------- JSON shapes

fn short(id: &str) -> &str {
    &id[..id.len().min(8)]
}

/// One row of `list`: the patch, its latest revision's head, and the
/// approvals and change requests on that revision.
struct Row {
    patch: Patch,
    head: Option<String>,
    votes: (i64, i64),
}

/// One row of `list` (the CLI's `patch list --json` row).
fn summary(row: &Row) -> wire::PatchSummary {
    let p = &row.patch;
    wire::PatchSummary {
        id: p.id.clone(),
        title: p.title.clone(),
        status: p.status.as_str().to_string(),
        author: person(&p.author),
        base: p.base.clone(),
        revisions: p.revision_count,
        head: row.head.clone(),
        created_at: time_text(p.created_ms),
        updated_at: time_text(p.updated_ms),
        approvals: row.votes.0,
        changes_requested: row.votes.1,
        change_id: p.change_id.clone(),
        depends_on: p.depends_on.clone(),
    }
}

/// `show`: the patch, its revisions, current votes, comments, linked
/// issues and the merge rule's verdict.
fn shown(
    d: &PatchDetail,
    rule: &MergeRule,
    checks: &[collab_store::checks::Check],
    intent: Option<&merge_intents::Intent>,
) -> wire::PatchShown {
    let p = &d.patch;
    // On a queued branch the required checks are the merge group's: a
    // patch is ready to join a group on its votes alone.
    let verdict = if rule.queue {
        patches::rule_allows(d, rule)
    } else {
        patches::verdict(d, rule, checks)
    };
    wire::PatchShown {
        id: p.id.clone(),
        repo: p.repo.clone(),
        title: p.title.clone(),
        body: p.body.clone(),
        author: person(&p.author),
        base: p.base.clone(),
        created_at: time_text(p.created_ms),
        updated_at: time_text(p.updated_ms),
        status: p.status.as_str().to_string(),
        imported: p.imported,
        change_id: p.change_id.clone(),
        depends_on: p.depends_on.clone(),
        merge: p.merge.as_ref().map(|m| wire::MergeRecord {
            commit: m.commit.clone(),
            author: wire::Merger {
                principal: m.by.clone(),
                name: m.by.clone(),
                display_name: None,
            },
            at: time_text(m.at_ms),
        }),
        revisions: d
            .revisions
            .iter()
            .map(|r| wire::RevisionRow {
                n: r.n,
                head: r.head.clone(),
                base_commit: r.base_commit.clone(),
                base_tip: r.base_tip.clone(),
                author: person(&r.author),
                at: time_text(r.at_ms),
                lease_holders: r.lease_holders.clone(),
            })
            .collect(),
        reviews: d
            .reviews
            .iter()
            .map(|r| wire::ReviewRow {
                id: r.id.clone(),
                revision: r.revision,
                author: person(&r.author),
                at: time_text(r.at_ms),
                verdict: r.verdict.as_str().to_string(),
                body: r.body.clone(),
            })
            .collect(),
        comments: d
            .comments
            .iter()
            .map(|c| wire::PatchComment {
                id: c.id.clone(),
                author: person(&c.author),
                at: time_text(c.at_ms),
                body: c.body.clone(),
                revision: c.revision,
                path: c.inline.as_ref().map(|i| i.path.clone()),
                line: c.inline.as_ref().and_then(|i| i.line),
            })
            .collect(),
        issues: d.issues.clone(),
        checks: checks.iter().map(super::check::check_row).collect(),
        merge_rule: wire::MergeRuleShown {
            approvals: rule.approvals,
            no_changes_requested: rule.no_changes_requested,
            author_may_approve: rule.author_may_approve,
            others_may_revise: rule.others_may_revise,
            required_checks: rule.required_checks.clone(),
            skipped_is_success: rule.skipped_is_success,
            lease_holder_is_author: rule.lease_holder_is_author,
            queue: rule.queue,
            max_batch: rule.max_batch,
            max_parallel: rule.max_parallel,
            queue_method: rule.queue_method.as_str().to_string(),
            speculate: rule.speculate,
            train: rule.train,
            min_batch: rule.min_batch,
            batch_wait: rule.batch_wait,
            ready: verdict.is_ok(),
            reason: verdict.err(),
        },
        queued_merge: intent.map(|i| wire::QueuedMerge {
            revision: i.revision,
            requested_by: i.requester.principal.clone(),
            lease_token: i.lease_token,
            queued_at: time_text(i.created_at.saturating_mul(1000)),
        }),
    }
}
