//! Run one exec request to completion (`run_exec`): parse it against the
//! verb table (`command`), refuse what does not parse with its usage line,
//! dispatch to the verb's module (`git`, `admin`, …), and count the
//! outcome. Adding a verb: a row in the verb table
//! (`collab_proto::verbs::table`), a variant of `ExecCommand` built in its
//! `from_invocation`, an arm in `dispatch` for a new family, and a module
//! for the work (CONTRIBUTING.md).

use russh::server::Msg;
use russh::Channel;

use super::command::{parse_exec_command, refusal, ExecCommand};
use super::context::ExecContext;
use super::reply::{reply_and_close, EXIT_STATUS};

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

/// `run_exec` as the MCP session takes it: it runs each tool call through
/// here, and gets it passed in rather than naming this module (which names
/// it).
fn boxed_run_exec(
    ctx: ExecContext,
    channel: Channel<Msg>,
    raw: Vec<u8>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(run_exec(ctx, channel, raw))
}

async fn dispatch(ctx: ExecContext, channel: Channel<Msg>, command: ExecCommand) {
    match command {
        ExecCommand::Git { service, repo } => super::git::run(&ctx, channel, service, &repo).await,
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
    }
}
