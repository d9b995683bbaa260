//! Run one exec request to completion (`run_exec`): parse it against the
//! verb table (`command`), refuse what does not parse with its usage line,
//! and answer it: a verb the service answers (`crate::service::serves`)
//! through `service::authorize`, its `--body-stdin` body read from the
//! channel (bounded) only once authorized, and `service::run`, whose
//! answer is written with its exit status; a stream (git, git-lfs, the
//! event watch, release upload and download, the terminal UI, the MCP
//! session) and the families not moved to the service yet by its module
//! here (`dispatch`), after `service::admit`. Adding a verb: a row in the
//! verb table (`collab_proto::verbs::table`), a variant of `ExecCommand`
//! built in its `from_invocation`, and a service function
//! (CONTRIBUTING.md); nothing here.
//!
//! A verb ends with its caller (`leaving`): a verb that only reads
//! (`STOPPED_AT_ONCE`) is dropped when `left` fires before it has
//! answered; any other runs its bounded work to the end, but its reply
//! gives up at once instead of waiting for a client that has gone
//! (`reply::unless_caller_left`); a lease waiter stops waiting
//! (`service::Context::left`), and a lease won that cannot be delivered
//! is given back (`service::undelivered`).
//!
//! Before it runs, a command takes its units of the running-command pools
//! (`limits::running`, by `service::weight`); past its key's share or the
//! server's cap it gets one `error:` line and exit status 1 instead.

use russh::server::Msg;
use russh::Channel;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use russh::ChannelMsg;

use super::context::ExecContext;
use super::leaving::Left;
use super::reply::{reply_and_close, reply_on, CALLER_LEFT, EXIT_STATUS};
use crate::service;
use crate::service::command::{parse_exec_command, refusal, ExecCommand};

/// Run one exec request to completion: parse, dispatch, reply; or until
/// its caller leaves (`left`).
pub async fn run_exec(mut ctx: ExecContext, channel: Channel<Msg>, raw: Vec<u8>, left: Left) {
    ctx.call.left = Some(left.clone());
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
    let at_once = service::stops_at_once(verb);
    // Set once the service has counted the verb's outcome.
    let counted = Arc::new(AtomicBool::new(false));
    let run = CALLER_LEFT.scope(left.clone(), async {
        let work = async {
            if service::serves(&command) {
                through_the_service(ctx, channel, command, &counted).await
            } else {
                admit_and_dispatch(ctx, channel, command).await
            }
        };
        if at_once {
            until_caller_leaves(work, left).await;
        } else {
            work.await;
        }
        EXIT_STATUS.with(|status| status.get())
    });
    let status = EXIT_STATUS.scope(std::cell::Cell::new(None), run).await;
    if counted.load(Ordering::Relaxed) {
        return;
    }
    // No exit status sent means the client went away first.
    let outcome = status.map_or("disconnected", crate::metrics::outcome_of_exit);
    crate::metrics::verb_finished(verb, outcome);
}

/// A verb the service answers: authorize, read its body from the channel
/// if it takes one, run, write the answer.
async fn through_the_service(
    ctx: ExecContext,
    mut channel: Channel<Msg>,
    command: ExecCommand,
    counted: &AtomicBool,
) {
    let authorized = match service::authorize(&ctx, command).await {
        Ok(authorized) => authorized,
        Err(answer) => {
            counted.store(true, Ordering::Relaxed);
            return reply_and_close(channel, &answer.line, answer.status).await;
        }
    };
    let stdin = match authorized.stdin(&ctx) {
        Some(rule) => match read_stdin(&mut channel, &rule).await {
            Ok(body) => Some(body),
            Err(line) => {
                let answer = authorized.refuse(line);
                counted.store(true, Ordering::Relaxed);
                return reply_and_close(channel, &answer.line, answer.status).await;
            }
        },
        None => None,
    };
    // Nothing more is read: the read half goes now, so the session never
    // waits on a reader that is not there (a lease may wait minutes).
    let (read, write) = channel.split();
    drop(read);
    let answer = service::run(&ctx, authorized, stdin).await;
    counted.store(true, Ordering::Relaxed);
    let delivered = reply_on(write, &answer.line, answer.status).await;
    if !delivered {
        service::undelivered(&ctx, answer).await;
    }
}

/// Read the channel's stdin to EOF, as `rule` says (bounded: past its
/// `max` the reply is its `too_long` line).
async fn read_stdin(channel: &mut Channel<Msg>, rule: &service::Stdin) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(msg) = channel.wait().await {
        match msg {
            ChannelMsg::Data { data } => {
                if body.len() as u64 + data.len() as u64 > rule.max {
                    return Err(rule.too_long.clone());
                }
                body.extend_from_slice(&data);
            }
            ChannelMsg::Eof | ChannelMsg::Close => break,
            _ => {}
        }
    }
    rule.text(body)
}

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

/// Take the command's units of the running pools, then run it; or refuse
/// it with one line.
async fn admit_and_dispatch(ctx: ExecContext, channel: Channel<Msg>, command: ExecCommand) {
    let _admitted = match service::admit(&ctx, &command) {
        Ok(admitted) => admitted,
        Err(answer) => return reply_and_close(channel, &answer.line, answer.status).await,
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
        ExecCommand::Mcp => crate::mcp::serve(ctx, channel).await,
        ExecCommand::Tui => crate::tui::run(ctx, channel).await,
        ExecCommand::Release(cmd) => super::release::run(&ctx, channel, cmd).await,
        ExecCommand::Events(cmd) => super::watch::watch(&ctx, channel, cmd).await,
        // The service's (`through_the_service`).
        ExecCommand::Lease(_)
        | ExecCommand::Issue(_)
        | ExecCommand::Patch(_)
        | ExecCommand::Check(_)
        | ExecCommand::Queue(_)
        | ExecCommand::Search(_)
        | ExecCommand::Whoami
        | ExecCommand::Help
        | ExecCommand::Info { .. }
        | ExecCommand::Repo(_)
        | ExecCommand::Hook(_)
        | ExecCommand::Mirror(_) => reply_and_close(channel, "error: internal error", 1).await,
    }
}
