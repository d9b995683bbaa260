//! Every SSH exec request is parsed, authorized and dispatched here.
//!
//! `parse_exec_command` turns the command line (split by `shell_tokens`, no
//! shell ever runs) into an `ExecCommand`; `run_exec` fixes the caller's
//! regime, dispatches to the verb's module (`git`, `admin`, …) and makes sure
//! every path ends in exactly one reply. Replies go through `reply_and_close`:
//! success is one JSON object on stdout, an error is one `error: …` line on
//! stderr; exit 0 success, 1 error (4 is reserved for lease conflicts).
//!
//! Adding a verb: a row in the verb table (`collab_proto::verbs::table`), a
//! variant in `ExecCommand` built in its `from_invocation` (`command.rs`),
//! an arm in `dispatch`, and a module for the work (CONTRIBUTING.md).

use std::sync::Arc;

use russh::server::Msg;
use russh::{Channel, ChannelWriteHalf};

use super::command::{parse_exec_command, refusal, ExecCommand};
use crate::app::App;
use crate::authz::{Caller, NotFound};

/// The reply for an unknown or invisible repository, identical for every verb.
pub const NOT_FOUND: &str = NotFound::MESSAGE;

/// The environment a client set on its channel (only `GIT_PROTOCOL` is
/// accepted).
#[derive(Debug, Clone, Default)]
pub struct ChannelEnv {
    pub git_protocol: Option<String>,
}

/// Everything a verb needs besides its channel.
pub struct ExecContext {
    pub app: Arc<App>,
    pub caller: Caller,
    pub env: ChannelEnv,
    /// The connection's session, for the few verbs that must send past a
    /// full window (a watcher's last line) or drop a stalled connection.
    pub session: russh::server::Handle,
}

/// Send one reply and end the channel: `message` goes to stderr when it is an
/// `error: …` line, else to stdout; a newline is added; then the exit status,
/// EOF and close. The read half is dropped first so the session never waits
/// on a reader that is not there.
pub async fn reply_and_close(channel: Channel<Msg>, message: &str, exit_code: u32) {
    let (read, write) = channel.split();
    drop(read);
    reply_on(write, message, exit_code).await;
}

/// `reply_and_close` on the write half of a channel whose read half the
/// verb kept (to notice the client leaving while it waits). False when the
/// reply could not be sent (the client is gone).
pub async fn reply_on(write: ChannelWriteHalf<Msg>, message: &str, exit_code: u32) -> bool {
    let mut line = message.trim_end_matches('\n').to_string();
    line.push('\n');
    let sent = if message.starts_with("error:") {
        write.extended_data_bytes(1, line.into_bytes()).await
    } else {
        write.data_bytes(line.into_bytes()).await
    };
    if sent.is_err() {
        return false;
    }
    note_exit_status(exit_code);
    let delivered = write.exit_status(exit_code).await.is_ok();
    let _ = write.eof().await;
    let _ = write.close().await;
    delivered
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
    use crate::authz::{authorize, Access};
    match authorize(&ctx.app, &ctx.caller, repo, needed) {
        Ok((entry, _)) => Some((entry, channel)),
        Err(_)
            if needed > Access::Read
                && authorize(&ctx.app, &ctx.caller, repo, Access::Read).is_ok() =>
        {
            let message = format!(
                "error: permission denied: {what_needs} {} access",
                needed.as_str()
            );
            reply_and_close(channel, &message, 1).await;
            None
        }
        Err(_) => {
            reply_and_close(channel, NOT_FOUND, 1).await;
            None
        }
    }
}

/// Serialize a reply object (one line of JSON).
pub fn json_line(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

/// Run one exec request to completion: parse, dispatch, reply.
pub async fn run_exec(ctx: ExecContext, channel: Channel<Msg>, raw: Vec<u8>) {
    let Ok(line) = String::from_utf8(raw) else {
        return reply_and_close(channel, "error: invalid command: not UTF-8", 1).await;
    };
    let Some(command) = parse_exec_command(&line) else {
        let message = refusal(&line);
        tracing::info!(
            principal = ctx.caller.principal(),
            "refused exec request: {message}"
        );
        return reply_and_close(channel, &message, 1).await;
    };
    tracing::info!(
        principal = ctx.caller.principal(),
        verb = command.verb(),
        repo = command.repo().unwrap_or(""),
        "exec"
    );
    let verb = command.verb();
    let status = EXIT_STATUS
        .scope(std::cell::Cell::new(None), async {
            dispatch(ctx, channel, command).await;
            EXIT_STATUS.with(|status| status.get())
        })
        .await;
    // No exit status sent means the client went away first.
    let outcome = status.map_or("disconnected", crate::metrics::outcome_of_exit);
    crate::metrics::verb_finished(verb, outcome);
}

tokio::task_local! {
    /// The exit status the running verb sent, for the verbs-by-outcome metric.
    static EXIT_STATUS: std::cell::Cell<Option<u32>>;
}

/// Record the exit status a verb sends (called next to every `exit_status`).
pub fn note_exit_status(code: u32) {
    let _ = EXIT_STATUS.try_with(|status| status.set(Some(code)));
}

async fn dispatch(ctx: ExecContext, channel: Channel<Msg>, command: ExecCommand) {
    match command {
        ExecCommand::Git { service, repo } => super::git::run(&ctx, channel, service, &repo).await,
        ExecCommand::Whoami => super::admin::whoami(&ctx, channel).await,
        ExecCommand::Help => super::admin::help(&ctx, channel).await,
        ExecCommand::Repo(cmd) => super::admin::repo(&ctx, channel, cmd).await,
        ExecCommand::Lease(cmd) => super::lease::run(&ctx, channel, cmd).await,
        ExecCommand::Release(cmd) => super::release::run(&ctx, channel, cmd).await,
        ExecCommand::Issue(cmd) => super::issue::run(&ctx, channel, cmd).await,
        ExecCommand::Patch(cmd) => super::patch::run(&ctx, channel, cmd).await,
        ExecCommand::Events(cmd) => super::watch::watch(&ctx, channel, cmd).await,
        ExecCommand::Hook(cmd) => super::webhook::run(&ctx, channel, cmd).await,
    }
}
