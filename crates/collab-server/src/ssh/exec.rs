//! Run one exec request to completion (`run_exec`): parse it against the
//! verb table (`command`), refuse what does not parse with its usage line,
//! dispatch to the verb's module (`git`, `admin`, …), and count the
//! outcome. Adding a verb: a row in the verb table
//! (`collab_proto::verbs::table`), a variant of `ExecCommand` built in its
//! `from_invocation`, an arm in `dispatch` for a new family, and a module
//! for the work (CONTRIBUTING.md).
//!
//! A verb ends with its caller (`leaving`): a verb that only reads
//! (`STOPPED_AT_ONCE`) is dropped when `left` fires before it has
//! answered; any other runs its bounded work to the end, but its reply
//! gives up at once instead of waiting for a client that has gone
//! (`reply::unless_caller_left`).
//!
//! Before it runs, a command takes its units of the running-command pools
//! (`limits::running`, by its [`weight`]); past its key's share or the
//! server's cap it gets one `error:` line and exit status 1 instead. A new
//! heavy or long-lived family also gets an arm in `weight`.

use russh::server::Msg;
use russh::Channel;

use super::command::{parse_exec_command, refusal, ExecCommand, LeaseCmd, ReleaseCmd};
use super::context::ExecContext;
use super::leaving::Left;
use super::reply::{reply_and_close, CALLER_LEFT, EXIT_STATUS};
use crate::limits::running::{Runner, Weight};

/// Run one exec request to completion: parse, dispatch, reply; or until
/// its caller leaves (`left`).
pub async fn run_exec(ctx: ExecContext, channel: Channel<Msg>, raw: Vec<u8>, left: Left) {
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
    match &ctx.caller.identity.certificate {
        // Which certificate acted, for the audit trail (events record the
        // principal only).
        Some(cert) => tracing::info!(
            principal = ctx.caller.principal(),
            verb = command.verb(),
            repo = command.repo().unwrap_or(""),
            key_id = ?cert.key_id,
            serial = cert.serial,
            "exec"
        ),
        None => tracing::info!(
            principal = ctx.caller.principal(),
            verb = command.verb(),
            repo = command.repo().unwrap_or(""),
            "exec"
        ),
    }
    let verb = command.verb();
    let at_once = STOPPED_AT_ONCE.contains(&verb);
    let run = CALLER_LEFT.scope(left.clone(), async {
        let work = admit_and_dispatch(ctx, channel, command);
        if at_once {
            until_caller_leaves(work, left).await;
        } else {
            work.await;
        }
        EXIT_STATUS.with(|status| status.get())
    });
    let status = EXIT_STATUS.scope(std::cell::Cell::new(None), run).await;
    // No exit status sent means the client went away first.
    let outcome = status.map_or("disconnected", crate::metrics::outcome_of_exit);
    crate::metrics::verb_finished(verb, outcome);
}

/// The verbs stopped where they are when their caller leaves: they only
/// read (what a read may import into the collab database is written
/// through the writer, whole or not at all, in work handed to
/// `spawn_blocking` that runs to its end), and they are the ones with
/// large replies (a diff, a release file, a pack) or long lives (the
/// MCP session, whose calls go with it: `mcp::serve`). Every other verb
/// writes something: a push past its quarantine moves refs, a release's
/// file is stored before its event is recorded, a lease won by waiting
/// is given back when its reply fails. Those run their bounded work to
/// the end and only their reply gives up. `collab-events watch` and the
/// terminal UI end on their client's close themselves.
pub(super) const STOPPED_AT_ONCE: &[&str] = &[
    "git-upload-pack",
    "git-upload-archive",
    "collab-whoami",
    "help",
    "info",
    "collab-mcp",
    "collab-repo list",
    "collab-release list",
    "collab-release download",
    "collab-issue show",
    "collab-issue list",
    "collab-issue ready",
    "collab-patch list",
    "collab-patch show",
    "collab-patch diff",
    "collab-patch interdiff",
    "collab-check list",
    "collab-queue show",
    "collab-search",
    "collab-hook list",
    "collab-hook deliveries",
];

/// Run `work` until it ends or its caller leaves. A verb that has sent its
/// exit status already is let finish: its caller closing is then only the
/// answer to our close, and what is left of the verb is its own clean-up.
async fn until_caller_leaves(work: impl std::future::Future<Output = ()>, left: Left) {
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => {}
        _ = left.wait() => {
            if EXIT_STATUS.with(|status| status.get()).is_some() {
                work.await;
            }
            // Else `work` is dropped here: its buffers, files, child
            // processes and slots go with it.
        }
    }
}

/// `run_exec` as the MCP session takes it: it runs each tool call through
/// here, and gets it passed in rather than naming this module (which names
/// it).
fn boxed_run_exec(
    ctx: ExecContext,
    channel: Channel<Msg>,
    raw: Vec<u8>,
    left: Left,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(run_exec(ctx, channel, raw, left))
}

/// What `command` holds while it runs (`limits::running`).
pub fn weight(command: &ExecCommand) -> Weight {
    use super::patch::PatchCmd;
    match command {
        // The git process gate counts git, the watchers' share watchers,
        // the waiters' share a `--wait` (which may wait minutes).
        ExecCommand::Git { .. } | ExecCommand::Events(_) => Weight::Own,
        ExecCommand::Lease(
            LeaseCmd::Acquire {
                wait_secs: Some(_), ..
            }
            | LeaseCmd::Next {
                wait_secs: Some(_), ..
            },
        ) => Weight::Own,
        ExecCommand::Patch(PatchCmd::Diff { .. } | PatchCmd::Interdiff { .. })
        | ExecCommand::Release(ReleaseCmd::Download { .. }) => Weight::Heavy,
        ExecCommand::Tui => Weight::Tui,
        // Light, although it streams objects: git-lfs opens one session
        // per transfer worker (`lfs.concurrenttransfers`, 8 by default),
        // more than the heavy share of one key (4) would let in.
        ExecCommand::LfsTransfer { .. } => Weight::Light,
        ExecCommand::Mcp => Weight::Mcp,
        _ => Weight::Light,
    }
}

/// Take the command's units of the running pools, then run it; or refuse
/// it with one line.
async fn admit_and_dispatch(ctx: ExecContext, channel: Channel<Msg>, command: ExecCommand) {
    let weight = weight(&command);
    let key = ctx.caller.identity.share_key();
    let runner = Runner {
        key: &key,
        mcp_session: ctx.env.mcp_session,
    };
    let _admitted = match ctx.app.limits.running.admit(weight, runner) {
        Ok(admitted) => admitted,
        Err(refused) => {
            let mut message = refused.message();
            if weight == Weight::Tui {
                // The client's terminal is raw: end the line there too.
                message.push('\r');
            }
            return reply_and_close(channel, &message, 1).await;
        }
    };
    dispatch(ctx, channel, command).await
}

async fn dispatch(ctx: ExecContext, channel: Channel<Msg>, command: ExecCommand) {
    match command {
        ExecCommand::Git { service, repo } => super::git::run(&ctx, channel, service, &repo).await,
        ExecCommand::LfsTransfer { repo, operation } => {
            super::lfs::run(&ctx, channel, &repo, operation).await
        }
        ExecCommand::LfsAuthenticate { .. } => {
            reply_and_close(channel, super::lfs::AUTHENTICATE, 1).await
        }
        ExecCommand::Whoami => super::admin::whoami(&ctx, channel).await,
        ExecCommand::Mcp => crate::mcp::serve(ctx, channel, boxed_run_exec).await,
        ExecCommand::Help => super::admin::help(&ctx, channel).await,
        ExecCommand::Info { json } => super::admin::info(&ctx, channel, json).await,
        ExecCommand::Tui => crate::tui::run(ctx, channel).await,
        ExecCommand::Repo(cmd) => super::admin::repo(&ctx, channel, cmd).await,
        ExecCommand::Lease(cmd) => super::lease::run(&ctx, channel, cmd).await,
        ExecCommand::Release(cmd) => super::release::run(&ctx, channel, cmd).await,
        ExecCommand::Issue(cmd) => super::issue::run(&ctx, channel, cmd).await,
        ExecCommand::Patch(cmd) => super::patch::run(&ctx, channel, cmd).await,
        ExecCommand::Events(cmd) => super::watch::watch(&ctx, channel, cmd).await,
        ExecCommand::Hook(cmd) => super::webhook::run(&ctx, channel, cmd).await,
        ExecCommand::Mirror(cmd) => super::mirror::run(&ctx, channel, cmd).await,
        ExecCommand::Check(cmd) => super::check::run(&ctx, channel, cmd).await,
        ExecCommand::Queue(cmd) => super::queue::run(&ctx, channel, cmd).await,
        ExecCommand::Search(cmd) => super::search::run(&ctx, channel, cmd).await,
    }
}

#[cfg(test)]
mod tests {
    use super::STOPPED_AT_ONCE;

    /// A misspelt name would silently leave its verb to run on.
    #[test]
    fn every_verb_stopped_at_once_is_one_there_is() {
        let names: Vec<String> = collab_proto::verbs::VERBS
            .iter()
            .map(|v| v.name())
            .collect();
        for verb in STOPPED_AT_ONCE {
            assert!(
                names.iter().any(|n| n == verb) || ["help", "info"].contains(verb),
                "{verb} is not in the verb table"
            );
        }
    }
}
