//! `collab-hook`: webhook subscriptions over SSH.
//!
//! ```text
//! collab-hook add '<repo-glob>' '<url>' [--event PATTERN]... [--secret-stdin]
//! collab-hook list
//! collab-hook remove|enable|test '<id>'
//! collab-hook approve '<id>'            (administrators)
//! collab-hook deliveries '<id>' [--limit N]
//! collab-hook redeliver '<webhook-id>'
//! ```
//!
//! Who may add: `authz::can_subscribe` (administrators for any glob; others
//! for a glob whose every existing repository they can rewind). A
//! subscription is visible to, and managed by, its owner and the server
//! administrators; anyone else gets `error: webhook not found`, whether it
//! exists or not. Subscriptions declared in the server configuration are
//! listed but changed only there. Delivery is `webhooks`'.
//!
//! A target that is not on the public internet (one `webhooks.allowed_hosts`
//! lets through) is for administrators: anyone else's subscription to it is
//! stored inactive until an administrator runs `collab-hook approve`. Adds
//! are capped per owner (`webhooks.max_per_owner`) and per repository the
//! glob matches (`webhooks.max_per_repo`). `test` and `redeliver` report
//! the HTTP status only.

use collab_proto::replies::webhook as wire;
use serde::Serialize;
use serde_json::json;

use super::command::HookCmd;
use super::context::Context;
use super::reply::reply_line;
use crate::authz;
use crate::events::TypeFilter;
use crate::webhooks::{self, message_id, AttemptResult};
use collab_store::webhooks::{self as store, Attempt, Webhook};

const NOT_FOUND: &str = "error: webhook not found";

/// Why a subscription waits.
const PENDING_REASON: &str =
    "awaiting an administrator's approval (collab-hook approve): the target is not on the public internet";

/// The largest secret read from stdin.
pub const MAX_SECRET: usize = 4096;

/// Run one `collab-hook` command; `stdin` is the secret of
/// `add --secret-stdin` (read by the door, at most [`MAX_SECRET`] bytes,
/// trimmed).
pub async fn reply(ctx: &Context, cmd: HookCmd, stdin: Option<String>) -> Reply {
    match cmd {
        HookCmd::Add {
            repo_glob,
            url,
            events,
            secret_stdin,
        } => {
            let secret = if secret_stdin { stdin } else { None };
            add(ctx, repo_glob, url, events, secret).await
        }
        HookCmd::List => list(ctx).await,
        HookCmd::Remove { id } => remove(ctx, &id).await,
        HookCmd::Enable { id } => enable(ctx, &id).await,
        HookCmd::Approve { id } => approve(ctx, &id).await,
        HookCmd::Test { id } => test(ctx, &id).await,
        HookCmd::Deliveries { id, limit } => deliveries(ctx, &id, limit).await,
        HookCmd::Redeliver { message_id } => redeliver(ctx, &message_id).await,
    }
}

type Reply = (String, u32);

fn ok(reply: &impl Serialize) -> Reply {
    (reply_line(reply), 0)
}

fn err(message: impl std::fmt::Display) -> Reply {
    (format!("error: {message}"), 1)
}

fn internal(e: anyhow::Error) -> Reply {
    tracing::error!("collab-hook: {e:#}");
    ("error: internal error".to_string(), 1)
}

/// The subscription's public shape (never the secret itself).
fn hook_shown(hook: &Webhook) -> wire::WebhookShown {
    wire::WebhookShown {
        id: hook.id.clone(),
        origin: hook.origin.clone(),
        owner: hook.owner.clone(),
        repo: hook.repo_glob.clone(),
        url: hook.url.clone(),
        events: hook.events.clone(),
        secret: hook.secret.is_some(),
        active: hook.active,
        disabled_reason: hook.disabled_reason.clone(),
        cursor: hook.cursor,
        attempts: hook.attempts,
        failing_since: hook.failing_since.map(crate::events::rfc3339),
        next_attempt_at: hook.next_attempt_at.map(crate::events::rfc3339),
        needs_approval: hook.pending_approval(),
        approved_by: hook.approved_by.clone(),
    }
}

fn attempt_row(attempt: &Attempt) -> wire::DeliveryRow {
    wire::DeliveryRow {
        webhook_id: attempt.message_id.clone(),
        seq: attempt.seq,
        at: crate::events::rfc3339(attempt.at),
        status: attempt.status,
        outcome: attempt.outcome.clone(),
        // Without a response, how long it took would tell a closed port
        // from a silent one: not shown (the server log has it).
        latency_ms: attempt.status.map(|_| attempt.latency_ms),
        response: attempt.response.clone(),
    }
}

/// `{"status", "id"}` of `remove`, `enable` and `approve`.
fn changed(status: &str, id: &str) -> Reply {
    ok(&wire::WebhookChanged {
        status: status.to_string(),
        id: id.to_string(),
    })
}

/// The subscription `id` if the caller may see it.
async fn visible(ctx: &Context, id: &str) -> Result<Webhook, Reply> {
    let owned = id.to_string();
    let hook = webhooks::read(&ctx.app, move |conn| store::get(conn, &owned))
        .await
        .map_err(internal)?;
    match hook {
        Some(h)
            if h.owner == ctx.caller.principal()
                || authz::is_server_admin(&ctx.app, &ctx.caller) =>
        {
            Ok(h)
        }
        _ => Err(err(NOT_FOUND.trim_start_matches("error: "))),
    }
}

async fn add(
    ctx: &Context,
    repo_glob: String,
    url: String,
    events: Vec<String>,
    secret: Option<String>,
) -> Reply {
    if !crate::events::filter::valid_repo_glob(&repo_glob) {
        return err("invalid repository glob: use A-Z a-z 0-9 . _ - / and *");
    }
    if let Some(secret) = &secret {
        if let Err(e) = webhooks::sign::secret_key(secret) {
            return err(format!("invalid secret: {e}"));
        }
    }
    if !authz::can_subscribe(&ctx.app, &ctx.caller, &repo_glob) {
        return err(
            "permission denied: a webhook needs rewind access on every repository its glob matches",
        );
    }
    if !authz::caller_acts_unattended(&ctx.app, &ctx.caller) {
        return err(authz::UNATTENDED_REFUSAL);
    }
    if url.len() > 2048 {
        return err("invalid URL: longer than 2048 bytes");
    }
    let target = match ctx.app.webhooks.vet_url(&url).await {
        Ok((_, target)) => target,
        Err(e) => return err(e),
    };
    // A target inside (let through by `webhooks.allowed_hosts`) is the
    // operator's to hand out: a non-administrator's subscription waits,
    // inactive, for `collab-hook approve`.
    let pending = target == webhooks::client::Target::Internal
        && !authz::is_server_admin(&ctx.app, &ctx.caller);
    let owner = ctx.caller.principal().to_string();
    // Fair shares: subscriptions per owner, and per repository (each one
    // multiplies every event of the repository into a POST).
    let glob = repo_glob
        .strip_suffix(".git")
        .unwrap_or(&repo_glob)
        .to_string();
    let matching: Vec<String> = crate::repos::list_repos(&ctx.app.config.repos_dir)
        .into_iter()
        .map(|e| e.short_name().to_string())
        .filter(|name| crate::events::filter::glob_match(&glob, name))
        .collect();
    let (per_owner, per_repo) = (
        ctx.app.config.webhooks.max_per_owner as usize,
        ctx.app.config.webhooks.max_per_repo as usize,
    );
    // Stored sealed with the key outside the database (`webhooks::secrets`).
    let secret = secret.map(|s| ctx.app.webhooks.secrets.seal(&s));
    let id = format!("wh{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
    let hook = Webhook {
        id: id.clone(),
        origin: "ssh".into(),
        owner: ctx.caller.principal().to_string(),
        repo_glob,
        url,
        events,
        secret,
        active: true,
        disabled_reason: None,
        created_at: 0,
        cursor: 0,
        attempts: 0,
        failing_since: None,
        next_attempt_at: None,
        needs_approval: pending,
        approved_by: None,
    };
    let hook = if pending {
        Webhook {
            active: false,
            disabled_reason: Some(PENDING_REASON.to_string()),
            ..hook
        }
    } else {
        hook
    };
    let stored = ctx
        .app
        .writer
        .write("add webhook", move |conn, now| {
            // Counted in the writer, so concurrent adds cannot overshoot.
            let added: Vec<Webhook> = store::list(conn)?
                .into_iter()
                .filter(|h| h.origin == "ssh")
                .collect();
            if added.iter().filter(|h| h.owner == owner).count() >= per_owner {
                return Ok(Err(format!(
                    "too many webhooks: you have {per_owner} (webhooks.max_per_owner); remove one first"
                )));
            }
            for repo in &matching {
                let on_repo = added
                    .iter()
                    .filter(|h| {
                        let g = h.repo_glob.strip_suffix(".git").unwrap_or(&h.repo_glob);
                        crate::events::filter::glob_match(g, repo)
                    })
                    .count();
                if on_repo >= per_repo {
                    return Ok(Err(format!(
                        "too many webhooks on {repo}: it has {per_repo} (webhooks.max_per_repo)"
                    )));
                }
            }
            // Delivery starts with the events after this moment.
            let hook = Webhook {
                created_at: now,
                cursor: collab_store::event_log::head(conn)?,
                ..hook
            };
            store::insert(conn, &hook)?;
            Ok(Ok(hook))
        })
        .await;
    match stored {
        Ok(Err(refusal)) => err(refusal),
        Ok(Ok(hook)) => {
            ctx.app.webhooks.poke();
            tracing::info!(
                principal = ctx.caller.principal(),
                webhook = hook.id,
                "webhook added"
            );
            let status = if hook.pending_approval() {
                "pending_approval"
            } else {
                "added"
            };
            ok(&wire::WebhookAdded {
                status: status.to_string(),
                webhook: hook_shown(&hook),
            })
        }
        Err(e) => internal(e),
    }
}

async fn list(ctx: &Context) -> Reply {
    let hooks = match webhooks::read(&ctx.app, store::list).await {
        Ok(h) => h,
        Err(e) => return internal(e),
    };
    let admin = authz::is_server_admin(&ctx.app, &ctx.caller);
    let webhooks = hooks
        .iter()
        .filter(|h| admin || h.owner == ctx.caller.principal())
        .map(hook_shown)
        .collect();
    ok(&wire::WebhookList { webhooks })
}

async fn remove(ctx: &Context, id: &str) -> Reply {
    let hook = match visible(ctx, id).await {
        Ok(h) => h,
        Err(reply) => return reply,
    };
    if hook.origin != "ssh" {
        let place = if hook.origin == "governance" {
            "governance.toml"
        } else {
            "the server configuration"
        };
        return err(format!(
            "webhook {id} is declared in {place}; remove it there"
        ));
    }
    let owned = id.to_string();
    match ctx
        .app
        .writer
        .write("remove webhook", move |conn, _| {
            Ok(store::remove(conn, &owned)?)
        })
        .await
    {
        Ok(_) => {
            ctx.app.webhooks.poke();
            changed("removed", id)
        }
        Err(e) => internal(e),
    }
}

async fn enable(ctx: &Context, id: &str) -> Reply {
    match visible(ctx, id).await {
        Err(reply) => return reply,
        Ok(hook) if hook.pending_approval() => {
            return err(format!(
                "webhook {id} waits for an administrator's approval (collab-hook approve): its \
                 target is not on the public internet"
            ))
        }
        Ok(_) => {}
    }
    let owned = id.to_string();
    match ctx
        .app
        .writer
        .write("enable webhook", move |conn, _| {
            Ok(store::enable(conn, &owned)?)
        })
        .await
    {
        Ok(_) => {
            ctx.app.webhooks.poke();
            changed("enabled", id)
        }
        Err(e) => internal(e),
    }
}

/// `collab-hook approve`: an administrator lets a subscription reach a
/// target that is not on the public internet (one the operator's
/// `webhooks.allowed_hosts` lets through), and activates it.
async fn approve(ctx: &Context, id: &str) -> Reply {
    if !authz::is_server_admin(&ctx.app, &ctx.caller) {
        return err("permission denied: approving a webhook needs a server administrator");
    }
    if let Err(reply) = visible(ctx, id).await {
        return reply;
    }
    let (owned, by) = (id.to_string(), ctx.caller.principal().to_string());
    match ctx
        .app
        .writer
        .write("approve webhook", move |conn, _| {
            Ok(store::approve(conn, &owned, &by)?)
        })
        .await
    {
        Ok(_) => {
            ctx.app.webhooks.poke();
            tracing::info!(
                principal = ctx.caller.principal(),
                webhook = id,
                "webhook approved"
            );
            changed("approved", id)
        }
        Err(e) => internal(e),
    }
}

/// Send once and log the attempt (out of the subscription's order: the
/// cursor does not move).
async fn send_and_log(
    ctx: &Context,
    hook: &Webhook,
    message: String,
    seq: Option<i64>,
    body: Vec<u8>,
) -> Result<AttemptResult, Reply> {
    let result = ctx
        .app
        .webhooks
        .post(
            &hook.url,
            &message,
            &body,
            hook.secret.as_deref(),
            &ctx.app.signing_key,
            webhooks::may_reach_internal(&ctx.app, hook),
        )
        .await;
    crate::metrics::webhook_delivery(result.outcome);
    let attempt = Attempt {
        id: 0,
        webhook_id: hook.id.clone(),
        message_id: message,
        seq,
        at: 0,
        status: result.status.map(i64::from),
        outcome: result.outcome.to_string(),
        latency_ms: result.latency_ms,
        response: result.response.clone(),
    };
    ctx.app
        .writer
        .write("log webhook attempt", move |conn, now| {
            Ok(store::log_attempt(conn, &Attempt { at: now, ..attempt })?)
        })
        .await
        .map_err(internal)?;
    Ok(result)
}

fn delivered(message: &str, result: &AttemptResult) -> wire::Delivered {
    wire::Delivered {
        webhook_id: message.to_string(),
        outcome: result.outcome.to_string(),
        status: result.status,
        latency_ms: result.latency_ms,
        response: result.response.clone(),
    }
}

async fn test(ctx: &Context, id: &str) -> Reply {
    let hook = match visible(ctx, id).await {
        Ok(h) => h,
        Err(reply) => return reply,
    };
    let now = chrono::Utc::now().timestamp();
    let message = format!("{}-test-{:08x}", hook.id, rand::random::<u32>());
    let body = serde_json::to_vec(&json!({
        "type": "webhook.test",
        "timestamp": crate::events::rfc3339(now),
        "data": { "subscription": hook.id, "by": ctx.caller.principal() },
    }))
    .unwrap_or_default();
    match send_and_log(ctx, &hook, message.clone(), None, body).await {
        Ok(result) => attempt_reply(&message, &result),
        Err(reply) => reply,
    }
}

async fn deliveries(ctx: &Context, id: &str, limit: i64) -> Reply {
    let hook = match visible(ctx, id).await {
        Ok(h) => h,
        Err(reply) => return reply,
    };
    let owned = hook.id.clone();
    match webhooks::read(&ctx.app, move |conn| store::attempts(conn, &owned, limit)).await {
        Ok(attempts) => ok(&wire::Deliveries {
            deliveries: attempts.iter().map(attempt_row).collect(),
            id: hook.id,
        }),
        Err(e) => internal(e),
    }
}

async fn redeliver(ctx: &Context, message: &str) -> Reply {
    // `<subscription>-<seq>`.
    let Some((id, seq)) = message
        .rsplit_once('-')
        .and_then(|(id, seq)| Some((id, seq.parse::<i64>().ok()?)))
    else {
        return err("no such delivery");
    };
    let hook = match visible(ctx, id).await {
        Ok(h) => h,
        Err(_) => return err("no such delivery"),
    };
    let event = webhooks::read(&ctx.app, move |conn| {
        Ok(collab_store::event_log::after(conn, seq - 1, 1)?
            .into_iter()
            .find(|e| e.seq == seq))
    })
    .await;
    let event = match event {
        Ok(Some(e)) => e,
        Ok(None) => return err(format!("event {seq} is no longer kept")),
        Err(e) => return internal(e),
    };
    if seq > hook.cursor + 1 {
        return err("no such delivery: that event has not been delivered yet");
    }
    // Only what the subscription would deliver now: an event it skipped (or
    // of a repository its owner may no longer read) is no delivery of it.
    if !TypeFilter::new(hook.events.clone()).matches(&event.kind)
        || !webhooks::glob_matches(&hook, &event)
        || !webhooks::owner_sees(&ctx.app, &hook, &event)
    {
        return err("no such delivery");
    }
    let message = message_id(&hook.id, seq);
    match send_and_log(
        ctx,
        &hook,
        message.clone(),
        Some(seq),
        webhooks::body(&event),
    )
    .await
    {
        Ok(result) => attempt_reply(&message, &result),
        Err(reply) => reply,
    }
}

/// A delivered attempt as JSON; any other as one error line. Either way
/// only the status (never a response body): `client` keeps no more.
fn attempt_reply(message: &str, result: &AttemptResult) -> Reply {
    if result.delivered() {
        return ok(&delivered(message, result));
    }
    let what = match result.status {
        Some(s) if result.response.is_empty() => format!("HTTP {s}"),
        Some(s) => format!("HTTP {s}: {}", result.response),
        None => result.response.clone(),
    };
    err(format!("delivery {message} failed: {what}"))
}
