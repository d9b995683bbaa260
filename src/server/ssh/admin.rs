//! The identity and administration verbs: `collab-whoami` (who the server
//! thinks you are) and `collab-repo create|list|gc` (repositories). Access
//! decisions are `authz`'s; this module only formats replies.

use russh::server::Msg;
use russh::Channel;
use serde_json::json;

use super::session::{json_line, reply_and_close, ExecContext, RepoCmd, NOT_FOUND};
use crate::authz;
use crate::repos::{self, CreateError};

/// `collab-whoami` -> `{"principal", "regime", "name", "fingerprint",
/// "admin", "key", "server_key"}`; `key` is the OpenSSH line to enroll in
/// governance, `server_key` the server's signing key (webhook `v1a,`
/// signatures are made with it).
pub async fn whoami(ctx: &ExecContext, channel: Channel<Msg>) {
    let caller = &ctx.caller;
    let mut key = caller.identity.key.clone();
    key.set_comment("");
    let reply = json!({
        "key": key.to_openssh().ok(),
        "principal": caller.principal(),
        "regime": caller.regime.as_str(),
        "name": caller.name(),
        "fingerprint": caller.identity.fingerprint,
        "admin": caller.identity.admin,
        "server_key": ctx.app.signing_key.public_key_line(),
    });
    reply_and_close(channel, &json_line(&reply), 0).await
}

/// `collab-repo create '<name>'` (needs Rewind on the name) and
/// `collab-repo list` (the repositories the caller can read).
pub async fn repo(ctx: &ExecContext, channel: Channel<Msg>, cmd: RepoCmd) {
    match cmd {
        RepoCmd::Create { name } => create(ctx, channel, &name).await,
        RepoCmd::List => list(ctx, channel).await,
        RepoCmd::Gc { name } => gc(ctx, channel, &name).await,
    }
}

/// `collab-repo gc '<repo>'`: run maintenance now and wait for it (after a
/// run or backup in progress on the repository). Needs Rewind; a
/// repository the caller cannot see is not found.
async fn gc(ctx: &ExecContext, channel: Channel<Msg>, name: &str) {
    let app = ctx.app.clone();
    let caller = ctx.caller.clone();
    let requested = name.to_string();
    let found = tokio::task::spawn_blocking(move || {
        authz::authorize(&app, &caller, &requested, authz::Access::Read).ok()
    })
    .await
    .ok()
    .flatten();
    let Some((entry, level)) = found else {
        return reply_and_close(channel, NOT_FOUND, 1).await;
    };
    if level < authz::Access::Rewind {
        return reply_and_close(
            channel,
            "error: permission denied: collab-repo gc needs rewind access",
            1,
        )
        .await;
    }
    let public = authz::anonymous_can_read(&ctx.app, &entry);
    match ctx
        .app
        .maintenance
        .run_now(&entry.path, &entry.name, public)
        .await
    {
        Ok(report) => {
            let mut reply = serde_json::to_value(&report).unwrap_or_default();
            reply["status"] = json!("done");
            reply["repo"] = json!(entry.name);
            reply_and_close(channel, &json_line(&reply), 0).await
        }
        Err(e) => {
            tracing::error!(repo = entry.name, "collab-repo gc: {e:#}");
            reply_and_close(channel, "error: maintenance failed", 1).await
        }
    }
}

async fn create(ctx: &ExecContext, channel: Channel<Msg>, name: &str) {
    if let Err(e) = repos::normalize_repo_name(name) {
        return reply_and_close(channel, &format!("error: invalid repository name: {e}"), 1).await;
    }
    // Refused before looking at the disk, so it says nothing about whether
    // the repository exists.
    if !authz::can_create_repo(&ctx.app, &ctx.caller, name) {
        return reply_and_close(
            channel,
            "error: permission denied: creating repositories needs rewind access",
            1,
        )
        .await;
    }
    let repos_dir = ctx.app.config.repos_dir.clone();
    let owned = name.to_string();
    let result = tokio::task::spawn_blocking(move || repos::create_repo_in(&repos_dir, &owned))
        .await
        .unwrap_or_else(|e| Err(CreateError::Io(anyhow::anyhow!("{e}"))));
    match result {
        Ok((created, _path)) => {
            tracing::info!(
                principal = ctx.caller.principal(),
                repo = created,
                "repository created"
            );
            crate::events::Recorded::repo_created(&created, ctx.caller.principal())
                .record_or_log(&ctx.app.leases)
                .await;
            let reply = json!({ "status": "created", "repo": created });
            reply_and_close(channel, &json_line(&reply), 0).await
        }
        Err(CreateError::Io(e)) => {
            tracing::error!("creating repository {name}: {e:#}");
            reply_and_close(channel, "error: internal error", 1).await
        }
        Err(e) => reply_and_close(channel, &format!("error: {e}"), 1).await,
    }
}

async fn list(ctx: &ExecContext, channel: Channel<Msg>) {
    let repos_dir = ctx.app.config.repos_dir.clone();
    let entries = tokio::task::spawn_blocking(move || repos::list_repos(&repos_dir))
        .await
        .unwrap_or_default();
    let visible: Vec<_> = entries
        .iter()
        .filter_map(|entry| {
            authz::repo_access(&ctx.app, &ctx.caller, entry)
                .map(|level| json!({ "name": entry.name, "access": level.as_str() }))
        })
        .collect();
    reply_and_close(channel, &json_line(&json!({ "repos": visible })), 0).await
}
