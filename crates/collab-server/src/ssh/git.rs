//! `git-upload-pack` and `git-receive-pack`: authorize, then run
//! `git upload-pack|receive-pack <dir>` with its stdin and stdout streamed
//! over the SSH channel in both directions with backpressure, its stderr sent
//! as extended data, and its exit status forwarded.
//!
//! Backpressure: output goes through `ChannelWriteHalf::make_writer`, which
//! waits for the client's window; input is written to the child from its own
//! task, which drains the channel until it closes (an undrained channel
//! stalls the whole connection).
//!
//! receive-pack runs the server's hooks (`hooks/`), which get the pusher,
//! the repository and the access level `authz` decided through
//! `HookContext`'s environment; the `pre-receive` access check enforces the
//! per-ref rules. Below Rewind, receive-pack also refuses non-fast-forward
//! updates and deletions of branches (`receive.denyNonFastForwards`,
//! `receive.denyDeletes` on the command line, above any repository config):
//! defense in depth, not the rule.
//!
//! Each git process takes a slot from the git process gate
//! (`git.max_processes`, `git.max_processes_per_principal`) before it
//! starts; without one the client gets a one-line `error: …` and exit 1.

use std::process::Stdio;

use russh::server::Msg;
use russh::{Channel, ChannelMsg};
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::process::Command;

use super::command::GitService;
use super::context::{fenced_ref_issue, fenced_refs, ExecContext};
use super::reply::{reply_and_close, NOT_FOUND};
use crate::authz::{self, Access};
use crate::hooks::HookContext;

/// Copy buffer: one SSH packet's worth.
const CHUNK: usize = 32 * 1024;

/// Only `version=N` style values are passed on to git.
fn sane_git_protocol(value: &str) -> bool {
    value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b':' | b'.' | b'_' | b'-'))
}

/// Serve one git transport request on `channel`.
pub async fn run(ctx: &ExecContext, channel: Channel<Msg>, service: GitService, requested: &str) {
    let needed = match service {
        GitService::UploadPack | GitService::UploadArchive => Access::Read,
        GitService::ReceivePack => Access::Write,
    };
    let (entry, level) = match authz::authorize(&ctx.app, &ctx.caller, requested, needed) {
        Ok(found) => found,
        Err(_) => match push_to_create(ctx, service, requested).await {
            Some(found) => found,
            None => return reply_and_close(channel, NOT_FOUND, 1).await,
        },
    };
    let principal = ctx.caller.principal().to_string();
    let _slot = match ctx.app.limits.git.acquire(&principal).await {
        Ok(slot) => slot,
        Err(busy) => {
            crate::limits::note_refusal("git_process", busy.label(), || {
                format!("refused git {} for {principal}", service.subcommand())
            });
            let message = format!("error: {}", busy.message());
            return reply_and_close(channel, &message, 1).await;
        }
    };

    let mut cmd = Command::new("git");
    // A clean git environment: nothing from the server's own GIT_* variables.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(&key);
        }
    }
    match service {
        GitService::UploadPack => {
            cmd.args(["-c", "uploadpack.allowFilter=true"]);
        }
        GitService::UploadArchive => {}
        GitService::ReceivePack => {
            let hooks = ctx.app.config.hooks_dir();
            cmd.arg("-c")
                .arg(format!("core.hooksPath={}", hooks.display()));
            // Push options reach the hooks (`-o collab-lease=<issue>:<token>`).
            cmd.args(["-c", "receive.advertisePushOptions=true"]);
            // Push-to-review: `refs/for/*` updates go to the proc-receive
            // hook (`hooks::review`), which records them and never stores
            // the ref.
            cmd.args(["-c", "receive.procReceiveRefs=refs/for"]);
            // The refs only the server writes (revision pins, the signed
            // export) are not advertised to pushers: no client may update
            // them, and leaving them out keeps a push from reading and
            // sending thousands of them (and out of git's connectivity
            // check). A push naming one is refused by git itself.
            for prefix in crate::hooks::access::SERVER_MAINTAINED_PREFIXES {
                cmd.arg("-c")
                    .arg(format!("receive.hideRefs={}", prefix.trim_end_matches('/')));
            }
            // Repacking is the server's maintenance (single-flight, under
            // the repository's lock), never a `gc --auto` after a push.
            cmd.args(["-c", "receive.autogc=false"]);
            if level < Access::Rewind {
                cmd.args([
                    "-c",
                    "receive.denyNonFastForwards=true",
                    "-c",
                    "receive.denyDeletes=true",
                ]);
            }
            let hook = HookContext {
                principal: ctx.caller.principal().to_string(),
                fingerprint: ctx.caller.identity.fingerprint.clone(),
                repo: entry.name.clone(),
                access: level,
                state_dir: ctx.app.config.state_dir.clone(),
                collab_db: ctx.app.config.collab_db_location(),
                fenced_refs: fenced_refs(ctx, &entry),
                fenced_ref_issue: fenced_ref_issue(ctx, &entry),
                others_may_revise: crate::authz::merge_rule(&ctx.app, &entry).others_may_revise,
                max_body: ctx.app.config.max_issue_body as usize,
                web_url: web_url(&ctx.app.config.http.listen),
            };
            cmd.envs(hook.to_env());
        }
    }
    cmd.arg(service.subcommand())
        .arg(&entry.path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(protocol) = ctx
        .env
        .git_protocol
        .as_deref()
        .filter(|p| sane_git_protocol(p))
    {
        cmd.env("GIT_PROTOCOL", protocol);
    }

    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot run git {}: {e}", service.subcommand());
            return reply_and_close(channel, "error: internal error", 1).await;
        }
    };
    let (mut stdin, stdout, stderr) =
        match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
            (Some(i), Some(o), Some(e)) => (Some(i), o, e),
            _ => return reply_and_close(channel, "error: internal error", 1).await,
        };

    let (mut rx, tx) = channel.split();
    // Client -> child stdin, in its own task; keeps draining after the child
    // stops reading so the session never blocks on this channel.
    tokio::spawn(async move {
        while let Some(msg) = rx.wait().await {
            match msg {
                ChannelMsg::Data { data } => {
                    if let Some(w) = stdin.as_mut() {
                        if w.write_all(&data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                ChannelMsg::Eof => stdin = None,
                ChannelMsg::Close => break,
                _ => {}
            }
        }
    });

    let mut out = tx.make_writer();
    let mut err = tx.make_writer_ext(Some(1));
    let mut stdout = BufReader::with_capacity(CHUNK, stdout);
    let mut stderr = BufReader::with_capacity(CHUNK, stderr);
    let (a, b) = tokio::join!(
        tokio::io::copy_buf(&mut stdout, &mut out),
        tokio::io::copy_buf(&mut stderr, &mut err)
    );
    if let Err(e) = a.and(b) {
        // The client went away; kill_on_drop reaps git.
        tracing::info!("git {} for {}: {e}", service.subcommand(), entry.name);
        return;
    }
    // Never shutdown() the writers: that sends EOF before the exit status.
    let _ = out.flush().await;
    let _ = err.flush().await;
    let code = match child.wait().await {
        Ok(status) => status.code().unwrap_or(255) as u32,
        Err(_) => 255,
    };
    if service == GitService::ReceivePack && entry.is_governance() {
        ctx.app.governance.reload();
        // Its `[[webhooks]]` may have changed.
        ctx.app.webhooks.poke();
    }
    if service == GitService::ReceivePack {
        repair_head(ctx, &entry.path, &entry.name).await;
        // The hooks ran in other processes; their event rows are committed.
        crate::events::refresh_head(&ctx.app).await;
        // The merge scan may have closed issues (`Fixes:`): export them.
        ctx.app.export.touch(&entry.name);
    }
    if service == GitService::ReceivePack && code == 0 {
        // The push is in: count it towards the repository's next maintenance.
        let public = crate::authz::anonymous_can_read(&ctx.app, &entry);
        ctx.app
            .maintenance
            .push_finished(&entry.path, &entry.name, public);
    }
    tracing::info!(
        principal = ctx.caller.principal(),
        repo = entry.name,
        "git {} exited {code}",
        service.subcommand()
    );
    super::reply::note_exit_status(code);
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

/// A push to a repository that does not exist creates it, when the
/// operator enabled `push_to_create` and the caller may create it by that
/// name. Anything else stays "not found".
async fn push_to_create(
    ctx: &ExecContext,
    service: GitService,
    requested: &str,
) -> Option<(crate::repos::RepoEntry, Access)> {
    if service != GitService::ReceivePack
        || !ctx.app.config.push_to_create
        || !authz::can_create_repo(&ctx.app, &ctx.caller, requested)
        || crate::repos::find_repo(&ctx.app.config.repos_dir, requested).is_some()
    {
        return None;
    }
    let repos_dir = ctx.app.config.repos_dir.clone();
    let name = requested.trim_start_matches('/').to_string();
    let created =
        tokio::task::spawn_blocking(move || crate::repos::create_repo_in(&repos_dir, &name))
            .await
            .ok()?;
    match created {
        Ok((name, _)) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = name,
                "repository created by push"
            );
            crate::events::Recorded::repo_created(&name, ctx.caller.principal())
                .record_or_log(&ctx.app.writer)
                .await;
        }
        // A concurrent push may have created it first: fine, use it.
        Err(crate::repos::CreateError::Exists(_)) => {}
        Err(e) => {
            tracing::info!(requested, "push-to-create refused: {e}");
            return None;
        }
    }
    authz::authorize(&ctx.app, &ctx.caller, requested, Access::Write).ok()
}

/// After a push, make HEAD name a branch that exists (see
/// `repo_admin::repair_dangling_head`).
async fn repair_head(ctx: &ExecContext, path: &std::path::Path, name: &str) {
    let path = path.to_path_buf();
    match tokio::task::spawn_blocking(move || crate::repo_admin::repair_dangling_head(&path)).await
    {
        Ok(Ok(Some(branch))) => {
            tracing::info!(repo = name, branch, "HEAD now names {branch}");
            crate::events::Recorded::head_repaired(name, &branch)
                .record_or_log(&ctx.app.writer)
                .await;
        }
        Ok(Ok(None)) => {}
        Ok(Err(e)) => tracing::warn!(repo = name, "checking HEAD after a push: {e}"),
        Err(e) => tracing::warn!(repo = name, "checking HEAD after a push: {e}"),
    }
}

/// The web UI's address as the push hook prints it: the HTTP listen
/// address, with `localhost` for an unspecified (all interfaces) host.
fn web_url(listen: &str) -> String {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => format!("http://localhost:{}", addr.port()),
        Ok(addr) => format!("http://{addr}"),
        Err(_) => format!("http://{listen}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_protocol_values_pass() {
        assert!(sane_git_protocol("version=2"));
        assert!(sane_git_protocol("version=2:object-format=sha1"));
        assert!(!sane_git_protocol("version=2\n"));
        assert!(!sane_git_protocol("$(id)"));
    }
}
