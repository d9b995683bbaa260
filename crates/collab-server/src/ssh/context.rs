//! Everything a verb needs besides its channel (`ExecContext`: the shared
//! state, the caller, the channel's environment, the session), and what the
//! verbs ask of it: `authorize_or_reply` (the repository at a level, or the
//! reply that refuses it), `git_process_slot` and `fenced_refs`.

use russh::server::Msg;
use russh::Channel;

use super::reply::reply_and_close;
use crate::service::Context;

/// The environment a client set on its channel (only `GIT_PROTOCOL` and
/// `NO_COLOR` are accepted) and its pty request, if any.
#[derive(Debug, Clone, Default)]
pub struct ChannelEnv {
    pub git_protocol: Option<String>,
    /// `NO_COLOR` was set, not empty: the terminal UI draws without colour.
    pub no_color: bool,
    /// The pty the client asked for: only the terminal UI is served on one.
    pub pty: Option<PtyRequest>,
}

/// What a pty request said (`TERM` and the window size).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PtyRequest {
    pub term: String,
    pub cols: u32,
    pub rows: u32,
}

/// Everything a verb needs besides its channel: the service's
/// [`Context`] (the shared state and the caller, reached through it as
/// `ctx.app`, `ctx.caller`), the channel's environment and the session.
pub struct ExecContext {
    pub call: Context,
    pub env: ChannelEnv,
    /// The connection's session, for the few verbs that must send past a
    /// full window (a watcher's last line) or drop a stalled connection.
    pub session: russh::server::Handle,
}

impl std::ops::Deref for ExecContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.call
    }
}

impl std::ops::DerefMut for ExecContext {
    fn deref_mut(&mut self) -> &mut Context {
        &mut self.call
    }
}

/// Resolve `repo` with at least `needed` for a verb, or reply and give the
/// channel back as `None`. A caller who cannot read the repository gets
/// the one not-found reply (existence stays secret); a reader who lacks the
/// level learns only that: `error: permission denied: {what_needs} {level}
/// access` (`what_needs` like "releases need").
pub async fn authorize_or_reply(
    ctx: &ExecContext,
    channel: Channel<Msg>,
    repo: &str,
    needed: crate::authz::Access,
    what_needs: &str,
) -> Option<(crate::repos::RepoEntry, Channel<Msg>)> {
    match crate::service::context::authorize_repo(ctx, repo, needed, what_needs) {
        Ok(entry) => Some((entry, channel)),
        Err((message, code)) => {
            reply_and_close(channel, &message, code).await;
            None
        }
    }
}

/// The repository's fenced refs: its `collab-policy.toml`'s, plus
/// governance's when governance is active.
pub(super) fn fenced_refs(ctx: &ExecContext, entry: &crate::repos::RepoEntry) -> Vec<String> {
    crate::authz::fenced_refs(&ctx.app, entry)
}

/// The repository's fenced-ref-to-issue patterns: its `collab-policy.toml`'s
/// `fenced_ref_issue` (unset: [`crate::hooks::fencing::DEFAULT_REF_ISSUE`]),
/// plus governance's when governance is active.
pub(super) fn fenced_ref_issue(ctx: &ExecContext, entry: &crate::repos::RepoEntry) -> Vec<String> {
    let mut patterns = match &entry.policy.fenced_ref_issue {
        Some(own) => own.clone(),
        None => vec![crate::hooks::fencing::DEFAULT_REF_ISSUE.to_string()],
    };
    if let crate::governance::GovState::Active(conf) = ctx.app.governance.state().as_ref() {
        patterns.extend(conf.fenced_ref_issue().iter().cloned());
    }
    patterns
}

/// A slot of the git process gate for the caller, waiting up to
/// `git.queue_timeout`; else the refusal (counted and logged) as the
/// `error:` line to send. `what`: the git subcommand, for the log.
pub(super) async fn git_process_slot(
    ctx: &ExecContext,
    what: &str,
) -> Result<crate::limits::ProcessPermit, String> {
    let principal = ctx.caller.principal();
    ctx.app.limits.git.acquire(principal).await.map_err(|busy| {
        crate::limits::note_refusal("git_process", busy.label(), || {
            format!("refused git {what} for {principal}")
        });
        format!("error: {}", busy.message())
    })
}
