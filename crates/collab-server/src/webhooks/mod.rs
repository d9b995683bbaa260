//! Webhook delivery: the event log is the outbox.
//!
//! Each active subscription has one worker task that walks the `events`
//! table from the subscription's cursor, in `seq` order. An event that
//! matches (repository glob, type patterns, and the owner may read the
//! repository now) is POSTed, signed the Standard Webhooks way (`sign`),
//! with the `webhook-id` `<subscription>-<seq>`, stable across retries,
//! restarts and redeliveries, so receivers deduplicate on it. The next
//! event waits until this one is delivered (per-subscription order). A
//! failure is retried with exponential backoff and jitter
//! (`webhooks.retry_base_secs`, doubling, capped at `retry_max_secs`);
//! when a subscription has failed without a success for
//! `webhooks.disable_after_secs` (3 days by default) it is disabled, with a
//! `webhook.disabled` event in the same transaction.
//!
//! Every attempt is logged (`collab_store::webhooks::log_attempt`) in the same writer
//! transaction that moves the cursor or the retry state, so after a crash
//! the worker resumes exactly there: at least once, never skipped. The
//! HTTP client (`client`) follows no redirects, uses no proxy, gives each
//! attempt `webhooks.attempt_timeout_secs`, and resolves names through the
//! SSRF guard (`ssrf`), connecting only to the addresses it vetted.
//!
//! A supervisor task starts and stops workers as subscriptions come and go
//! (poked by `collab-hook`, polled every few seconds), syncs the
//! subscriptions declared in the server configuration, and refreshes the
//! delivery metrics.

pub mod client;
pub mod secrets;
pub mod sign;
pub mod ssrf;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde_json::json;

use crate::app::App;
use crate::events::{filter::glob_match, wire, Recorded, TypeFilter};
use crate::governance::GovState;
use collab_store::event_log::{self, Event};
use collab_store::webhooks::{self as store, Attempt, Webhook};

pub use client::{AttemptResult, Webhooks};

/// Events read per query by a worker.
const BATCH: i64 = 256;

/// How often the supervisor looks for changes without being poked.
const SUPERVISE_EVERY: Duration = Duration::from_secs(5);

/// How long an owner's access decision is reused.
const ACCESS_TTL: Duration = Duration::from_secs(5);

/// The `webhook-id` of event `seq` for subscription `id`.
pub fn message_id(id: &str, seq: i64) -> String {
    format!("{id}-{seq}")
}

/// The body of a delivery: Standard Webhooks' `{type, timestamp, data}`,
/// `data` being the event exactly as `collab-events watch` prints it.
pub fn body(event: &Event) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "type": event.kind,
        "timestamp": crate::events::rfc3339(event.at),
        "data": wire(event),
    }))
    .unwrap_or_default()
}

/// The id a declared subscription gets.
pub fn declared_id(origin: &str, name: &str) -> String {
    format!("{origin}-{name}")
}

/// Whether `event`'s repository falls under `hook`'s glob: the name the
/// repository has now (a renamed repository's history follows it), or, for
/// a deleted one, the name it had.
pub fn glob_matches(hook: &Webhook, event: &Event) -> bool {
    let Some(repo) = event.repo_now.as_ref().or(event.repo.as_ref()) else {
        return true;
    };
    let short = repo.strip_suffix(".git").unwrap_or(repo);
    let glob = hook
        .repo_glob
        .strip_suffix(".git")
        .unwrap_or(&hook.repo_glob);
    glob_match(glob, short)
}

/// Whether `hook`'s owner may read `event` now: decided by the repository
/// the event carries the id of, under its current name. Events of a deleted
/// repository (or written without an id) are like server-wide ones: for
/// administrators (and the operator's own subscriptions) only.
pub fn owner_sees(app: &App, hook: &Webhook, event: &Event) -> bool {
    // `None` (server-wide, deleted, no id) is administrators' only.
    let repo = event.repo_id.as_ref().and(event.repo_now.as_deref());
    crate::authz::owner_can_read(app, &hook.owner, &hook.origin, repo)
}

/// Whether `hook` may be delivered to a target that is not on the public
/// internet (one the operator's allowlist lets through): the operator's own
/// declared subscriptions, an administrator's, and approved ones. Decided
/// at each attempt, so a demoted owner loses it at once.
pub fn may_reach_internal(app: &App, hook: &Webhook) -> bool {
    hook.origin != "ssh"
        || hook.approved_by.is_some()
        || crate::authz::owner_is_admin(app, &hook.owner)
}

/// Start the supervisor (and through it the workers).
pub fn spawn(app: Arc<App>) {
    tokio::spawn(supervise(app));
}

/// Run `f` on a connection of the read pool (`app.reads`). A worker reads
/// the log each time it moves, so a connection opened per read (SQLite
/// parsing the schema and every statement again, or a PostgreSQL login)
/// was about 5 % of the server's CPU in a fleet run (docs/benchmarks.md).
pub async fn read<T: Send + 'static>(
    app: &App,
    f: impl Fn(&collab_store::sql::Connection) -> collab_store::sql::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    app.reads.read(move |conn| Ok(f(conn)?)).await
}

async fn supervise(app: Arc<App>) {
    if let Err(e) = seal_plain_secrets(&app).await {
        tracing::error!("webhooks: sealing the secrets stored in plain text: {e:#}");
    }
    if let Err(e) = sync_declared(&app).await {
        tracing::error!("webhooks: syncing the declared subscriptions: {e:#}");
    }
    let mut governance = app.governance.state();
    let stopping = app.stopping.clone();
    // Each worker with the definition it was started with: a declared
    // subscription whose definition changed gets a new worker.
    let mut workers: HashMap<String, (tokio::task::JoinHandle<()>, Definition)> = HashMap::new();
    let delivery = Delivery::new(&app);
    loop {
        // governance.toml changed (a push to `_governance` reloads it and
        // pokes us): its `[[webhooks]]` are synced again.
        let now_governance = app.governance.state();
        if !Arc::ptr_eq(&governance, &now_governance) {
            governance = now_governance;
            // Stop their workers first, so no event is judged by an old
            // definition after the new one is stored; the ones still
            // declared start again below.
            workers.retain(|_, (task, definition)| {
                let keep = definition.origin != "governance";
                if !keep {
                    task.abort();
                }
                keep
            });
            if let Err(e) = sync_governance(&app, &governance).await {
                tracing::error!("webhooks: syncing the governance subscriptions: {e:#}");
            }
        }
        match delivery.pass(&app).await {
            None => {
                for (_, (task, _)) in workers.drain() {
                    task.abort();
                }
            }
            Some(held) => {
                let held: HashMap<String, Webhook> =
                    held.into_iter().map(|h| (h.id.clone(), h)).collect();
                // Not held any more (given back, lapsed, taken, disabled),
                // changed, or finished: stopped (and started again below if
                // still held).
                workers.retain(|id, (task, definition)| {
                    let keep = held
                        .get(id)
                        .is_some_and(|hook| *definition == Definition::of(&app, hook))
                        && !task.is_finished();
                    if !keep {
                        task.abort();
                    }
                    keep
                });
                for (id, hook) in held {
                    workers.entry(id).or_insert_with(|| {
                        let definition = Definition::of(&app, &hook);
                        (
                            tokio::spawn(
                                Worker::new(app.clone(), hook, delivery.node.clone()).run(),
                            ),
                            definition,
                        )
                    });
                }
            }
        }
        refresh_metrics(&app).await;
        tokio::select! {
            _ = app.webhooks.changed.notified() => {}
            _ = tokio::time::sleep(SUPERVISE_EVERY) => {}
            _ = stopping.clone().wait() => {
                for (_, (task, _)) in workers {
                    task.abort();
                }
                delivery.release(&app).await;
                return;
            }
        }
    }
}

/// Seal the secrets an older server stored in plain text (`secrets`).
async fn seal_plain_secrets(app: &App) -> anyhow::Result<()> {
    let secrets = app.webhooks.secrets.clone();
    let sealed = app
        .writer
        .write("seal webhook secrets", move |conn, _| {
            let (mut n, mut foreign) = (0, 0);
            for hook in store::list(conn)? {
                match hook.secret {
                    Some(s) if !secrets::SecretBox::is_sealed(&s) => {
                        store::set_secret(conn, &hook.id, &secrets.seal(&s))?;
                        n += 1;
                    }
                    Some(s) if secrets.open(&s).is_err() => foreign += 1,
                    _ => {}
                }
            }
            Ok((n, foreign))
        })
        .await?;
    let (sealed, foreign) = sealed;
    if sealed > 0 {
        tracing::info!("sealed {sealed} webhook secrets stored in plain text");
    }
    if foreign > 0 {
        // Another node (or a lost key file) sealed them: say so at start,
        // not only at each failing attempt.
        tracing::error!(
            "{foreign} webhook secrets cannot be opened with {}/webhook-secrets.key: copy the \
             key file of the node that sealed them (every node needs the same one)",
            app.config.state_dir.display()
        );
    }
    Ok(())
}

/// Which node delivers which subscription: each node claims a share of
/// them, per subscription row (`collab_store::webhooks::claim_pass`, run through the
/// writer every `SUPERVISE_EVERY` and when poked): a claim names the node
/// and lasts `webhooks.claim_secs`, renewed at each pass, so every node
/// delivers (the active subscriptions divided by the live nodes, rounded
/// up), one node at a time delivers a subscription (its events stay in
/// order), and a dead node's claims lapse and go to the others. The cursor
/// and the retry state move only if the writing node still holds the
/// claim (compare-and-set in the same transaction): a node that lost its
/// claim stops that worker at its next pass and its late records change
/// nothing. An attempt in flight when a claim moves may be repeated by the
/// next claimant (delivery is at least once; the `webhook-id` header is the
/// receiver's key to drop the repeat). On SQLite one server claims them all.
struct Delivery {
    /// This process's name in claims.
    node: String,
    claim_secs: i64,
}

impl Delivery {
    fn new(app: &App) -> Delivery {
        Delivery {
            node: format!(
                "{}-{}-{:08x}",
                hostname(),
                std::process::id(),
                rand::random::<u32>()
            ),
            claim_secs: app.webhooks.config.claim_secs as i64,
        }
    }

    /// Renew, take and give back claims: the subscriptions this node
    /// delivers now, or `None` if the pass failed (then it delivers none:
    /// its claims may have lapsed).
    async fn pass(&self, app: &App) -> Option<Vec<Webhook>> {
        let (node, secs) = (self.node.clone(), self.claim_secs);
        let claims = app
            .writer
            .write("claim webhooks", move |conn, now| {
                Ok(store::claim_pass(conn, &node, now, now + secs)?)
            })
            .await;
        match claims {
            Ok(claims) => Some(claims.held),
            Err(e) => {
                tracing::warn!("webhooks: claiming subscriptions: {e:#}");
                None
            }
        }
    }

    /// Give every claim back (a stopping node), so the others take over at
    /// their next pass rather than after the claims lapse.
    async fn release(&self, app: &App) {
        let node = self.node.clone();
        let released = app.writer.write("release webhooks", move |conn, _| {
            Ok(store::release_all(conn, &node)?)
        });
        if let Ok(Err(e)) = tokio::time::timeout(Duration::from_secs(2), released).await {
            tracing::debug!("webhooks: giving the claims back: {e:#}");
        }
    }
}

/// The host's name, for claims an operator can read.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into())
}

/// What a worker was started for; a change means a new worker.
#[derive(PartialEq)]
struct Definition {
    origin: String,
    repo_glob: String,
    url: String,
    events: Vec<String>,
    secret: Option<String>,
}

impl Definition {
    fn of(app: &App, hook: &Webhook) -> Definition {
        Definition {
            origin: hook.origin.clone(),
            repo_glob: hook.repo_glob.clone(),
            url: hook.url.clone(),
            events: hook.events.clone(),
            // Opened: each sync seals the same secret anew (fresh nonce).
            secret: hook
                .secret
                .as_deref()
                .map(|s| app.webhooks.secrets.open(s).unwrap_or_default()),
        }
    }
}

async fn refresh_metrics(app: &App) {
    let backlog = read(app, |conn| {
        let head = event_log::head(conn)?;
        let mut depth = 0;
        let mut oldest: Option<i64> = None;
        for hook in store::list(conn)?.into_iter().filter(|h| h.active) {
            depth += (head - hook.cursor).max(0);
            if hook.cursor < head {
                let at: Option<i64> = conn
                    .prepare_cached("SELECT at FROM events WHERE seq > ?1 ORDER BY seq LIMIT 1")?
                    .query_row([hook.cursor], |r| r.get(0))
                    .ok();
                oldest = match (oldest, at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        Ok((depth, oldest))
    })
    .await;
    if let Ok((depth, oldest)) = backlog {
        let age = oldest.map_or(0, |at| (chrono::Utc::now().timestamp() - at).max(0));
        crate::metrics::set_webhook_backlog(depth as u64, age as u64);
    }
}

/// The subscriptions a governance file declares (origin `governance`);
/// `None` while governance is broken (its subscriptions are kept as they
/// are until the file is readable again).
fn governance_declared(state: &GovState) -> Option<Vec<Webhook>> {
    let hooks = match state {
        GovState::Inactive => &[][..],
        GovState::Active(conf) => conf.webhooks(),
        GovState::Broken(_) => return None,
    };
    Some(
        hooks
            .iter()
            .map(|hook| {
                declared_webhook(
                    "governance",
                    &hook.name,
                    &hook.repo,
                    &hook.url,
                    &hook.events,
                    None,
                )
            })
            .collect(),
    )
}

fn declared_webhook(
    origin: &str,
    name: &str,
    repo: &str,
    url: &str,
    events: &[String],
    secret: Option<String>,
) -> Webhook {
    Webhook {
        id: declared_id(origin, name),
        origin: origin.into(),
        owner: origin.into(),
        repo_glob: repo.to_string(),
        url: url.to_string(),
        events: events.to_vec(),
        secret,
        active: true,
        disabled_reason: None,
        created_at: 0,
        cursor: 0,
        attempts: 0,
        failing_since: None,
        next_attempt_at: None,
        needs_approval: false,
        approved_by: None,
    }
}

/// Make the subscriptions of `origin` in the `webhooks` table exactly
/// `declared`: new ones start at the current head, changed ones keep their
/// progress, dropped ones are deleted.
async fn replace_declared(
    app: &App,
    origin: &'static str,
    declared: Vec<Webhook>,
) -> anyhow::Result<()> {
    let changed = app
        .writer
        .write(format!("sync {origin} webhooks"), move |conn, now| {
            let head = event_log::head(conn)?;
            let existing = store::list(conn)?;
            let mut changed = false;
            for hook in existing.iter().filter(|h| h.origin == origin) {
                if !declared.iter().any(|d| d.id == hook.id) {
                    store::remove(conn, &hook.id)?;
                    changed = true;
                }
            }
            for mut hook in declared {
                if existing.iter().any(|h| h.id == hook.id) {
                    store::update_declared(conn, &hook)?;
                } else {
                    hook.created_at = now;
                    hook.cursor = head;
                    store::insert(conn, &hook)?;
                }
                changed = true;
            }
            Ok(changed)
        })
        .await?;
    if changed {
        app.webhooks.poke();
    }
    Ok(())
}

/// Sync the `[[webhooks]]` of `governance.toml` (origin `governance`).
async fn sync_governance(app: &App, state: &GovState) -> anyhow::Result<()> {
    match governance_declared(state) {
        Some(declared) => replace_declared(app, "governance", declared).await,
        None => Ok(()),
    }
}

/// Make the `webhooks` table hold exactly the subscriptions the server
/// configuration (origin `config`) and `governance.toml` (origin
/// `governance`) declare.
async fn sync_declared(app: &App) -> anyhow::Result<()> {
    let governance = sync_governance(app, &app.governance.state()).await;
    let mut declared = Vec::new();
    for hook in &app.config.webhooks.subscriptions {
        let secret = match &hook.secret_file {
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!(
                        "webhooks.subscriptions {}: reading {}",
                        hook.name,
                        path.display()
                    )
                })?;
                let text = text.trim().to_string();
                sign::secret_key(&text)
                    .map_err(|e| anyhow::anyhow!("webhooks.subscriptions {}: {e}", hook.name))?;
                Some(app.webhooks.secrets.seal(&text))
            }
            None => None,
        };
        declared.push(declared_webhook(
            "config",
            &hook.name,
            &hook.repo,
            &hook.url,
            &hook.events,
            secret,
        ));
    }
    replace_declared(app, "config", declared).await?;
    governance
}

/// An attempt to record; a failed one also moves the retry state (and may
/// disable the subscription) and is answered with `(now, disabled)` once
/// committed.
struct Record {
    attempt: Attempt,
    /// The node that made it: its writes need its claim.
    node: String,
    failure: Option<Failure>,
    reply: Option<tokio::sync::oneshot::Sender<Result<(i64, bool), String>>>,
}

struct Failure {
    delay_secs: i64,
    failing_since: Option<i64>,
    disable_after: i64,
    url: String,
}

/// Most records one transaction carries.
const RECORD_BATCH: usize = 256;

/// Write a worker's records in arrival order, as many per transaction as
/// are waiting; answer the failures after COMMIT.
async fn record_attempts(app: Arc<App>, mut records: tokio::sync::mpsc::Receiver<Record>) {
    while let Some(first) = records.recv().await {
        let mut batch = vec![first];
        while batch.len() < RECORD_BATCH {
            match records.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        let mut replies = Vec::with_capacity(batch.len());
        let mut work = Vec::with_capacity(batch.len());
        for record in batch {
            replies.push(record.reply);
            work.push((record.attempt, record.node, record.failure));
        }
        let written = app
            .writer
            .write("webhook attempts", move |conn, now| {
                let mut answers = Vec::with_capacity(work.len());
                for (attempt, node, failure) in work {
                    answers.push(record_one(conn, now, attempt, &node, failure)?);
                }
                Ok(answers)
            })
            .await;
        match written {
            Ok(answers) => {
                for (reply, disabled) in replies.into_iter().zip(answers) {
                    if let Some(reply) = reply {
                        let _ = reply.send(Ok(disabled));
                    }
                }
            }
            Err(e) => {
                let text = format!("{e:#}");
                for reply in replies.into_iter().flatten() {
                    let _ = reply.send(Err(text.clone()));
                }
            }
        }
    }
}

/// One attempt's rows; `(now, stop)`: stop when the subscription was
/// disabled or `node` no longer holds its claim (then nothing but the log
/// row is written: the cursor and retry state are the claimant's).
fn record_one(
    conn: &collab_store::sql::Connection,
    now: i64,
    attempt: Attempt,
    node: &str,
    failure: Option<Failure>,
) -> anyhow::Result<(i64, bool)> {
    let (id, seq) = (attempt.webhook_id.clone(), attempt.seq.unwrap_or(0));
    store::log_attempt(conn, &Attempt { at: now, ..attempt })?;
    let Some(failure) = failure else {
        let held = store::advance(conn, &id, node, seq)?;
        return Ok((now, !held));
    };
    if !store::holds(conn, &id, node)? {
        return Ok((now, true));
    }
    let since = failure.failing_since.unwrap_or(now);
    if now - since >= failure.disable_after {
        let reason = format!(
            "failing since {} without a success",
            crate::events::rfc3339(since)
        );
        store::disable(conn, &id, &reason)?;
        Recorded {
            kind: "webhook.disabled",
            repo: None,
            object_id: Some(id.clone()),
            actor: None,
            payload: json!({
                "subscription": id, "url": failure.url, "reason": reason,
                "failing_since": crate::events::rfc3339(since),
            }),
        }
        .append_in(conn, now)?;
        return Ok((now, true));
    }
    let held = store::failed(conn, &id, node, now, now + failure.delay_secs)?;
    Ok((now, !held))
}

/// Disable `hook` with `reason` and a `webhook.disabled` event, in one
/// transaction, if `node` still holds its claim.
async fn disable(
    app: &App,
    hook: &Webhook,
    node: &str,
    reason: &'static str,
) -> anyhow::Result<()> {
    let (id, url, node) = (hook.id.clone(), hook.url.clone(), node.to_string());
    app.writer
        .write("disable webhook", move |conn, now| {
            if !store::holds(conn, &id, &node)? {
                return Ok(());
            }
            store::disable(conn, &id, reason)?;
            Recorded {
                kind: "webhook.disabled",
                repo: None,
                object_id: Some(id.clone()),
                actor: None,
                payload: json!({ "subscription": id, "url": url, "reason": reason }),
            }
            .append_in(conn, now)?;
            Ok(())
        })
        .await?;
    app.webhooks.poke();
    Ok(())
}

/// One subscription's delivery loop.
struct Worker {
    app: Arc<App>,
    hook: Webhook,
    /// This node's name in claims.
    node: String,
    /// Attempts go to `record_attempts` in order.
    recorder: tokio::sync::mpsc::Sender<Record>,
    types: TypeFilter,
    /// Events read ahead of the cursor, oldest first.
    queue: std::collections::VecDeque<Event>,
    /// How far `queue` reaches (every event up to here was read).
    read_to: i64,
    /// Access decisions by repository id (`None`: server-wide events).
    access: HashMap<Option<String>, (bool, Instant)>,
    /// The owner is no longer admitted: stop and disable.
    owner_gone: bool,
}

impl Worker {
    fn new(app: Arc<App>, hook: Webhook, node: String) -> Worker {
        let (recorder, records) = tokio::sync::mpsc::channel(RECORD_BATCH * 4);
        tokio::spawn(record_attempts(app.clone(), records));
        Worker {
            recorder,
            types: TypeFilter::new(hook.events.clone()),
            read_to: hook.cursor,
            queue: Default::default(),
            access: HashMap::new(),
            owner_gone: false,
            node,
            app,
            hook,
        }
    }

    async fn run(mut self) {
        let mut head = self.app.writer.subscribe_event_head();
        loop {
            let Some(event) = self.next_match(&mut head).await else {
                if self.owner_gone {
                    let reason = "its owner is no longer admitted (key line removed or limited \
                                  by from=, or no longer a principal of governance.toml)";
                    tracing::warn!(
                        webhook = self.hook.id,
                        owner = self.hook.owner,
                        "webhook disabled: {reason}"
                    );
                    if let Err(e) = disable(&self.app, &self.hook, &self.node, reason).await {
                        tracing::warn!(webhook = self.hook.id, "disabling: {e:#}");
                    }
                }
                return;
            };
            if !self.deliver(&event).await {
                return;
            }
        }
    }

    /// The next event to deliver; skipped ones move the stored cursor when
    /// the worker goes idle. `None` when the server stops.
    async fn next_match(&mut self, head: &mut tokio::sync::watch::Receiver<i64>) -> Option<Event> {
        let mut skipped_to: Option<i64> = None;
        loop {
            while let Some(event) = self.queue.pop_front() {
                if self.matches(&event) {
                    return Some(event);
                }
                if self.owner_gone {
                    // Not consumed: re-judged if an administrator re-enables.
                    return None;
                }
                skipped_to = Some(event.seq);
            }
            let after = self.read_to;
            match read(&self.app, move |conn| event_log::after(conn, after, BATCH)).await {
                Ok(rows) if !rows.is_empty() => {
                    self.read_to = rows.last().map_or(after, |e| e.seq);
                    self.queue.extend(rows);
                    continue;
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(webhook = self.hook.id, "reading events: {e:#}"),
            }
            // Caught up: remember what was skipped, then wait.
            if let Some(seq) = skipped_to.take() {
                let (id, node) = (self.hook.id.clone(), self.node.clone());
                let held = self
                    .app
                    .writer
                    .write("webhook cursor", move |conn, _| {
                        Ok(store::advance(conn, &id, &node, seq)?)
                    })
                    .await;
                if let Ok(false) = held {
                    // The claim went to another node: it delivers from here.
                    return None;
                }
                self.hook.cursor = seq;
            }
            let read_to = self.read_to;
            tokio::select! {
                changed = head.wait_for(|&h| h > read_to) => {
                    if changed.is_err() { return None; }
                }
                _ = tokio::time::sleep(Duration::from_secs(5)) => {}
                _ = self.app.stopping.clone().wait() => return None,
            }
        }
    }

    fn matches(&mut self, event: &Event) -> bool {
        if !self.types.matches(&event.kind) {
            return false;
        }
        // The owner must still be admitted at delivery, not only when the
        // subscription was added; if not, the subscription is disabled.
        // Not cached (an in-memory lookup): a removed key gets nothing more.
        if self.hook.origin == "ssh" && !crate::authz::owner_admitted(&self.app, &self.hook.owner) {
            self.owner_gone = true;
            return false;
        }
        if !glob_matches(&self.hook, event) {
            return false;
        }
        let now = Instant::now();
        let key = event.repo_id.clone();
        if let Some((ok, at)) = self.access.get(&key) {
            if now.duration_since(*at) < ACCESS_TTL {
                return *ok;
            }
        }
        let ok = owner_sees(&self.app, &self.hook, event);
        if self.access.len() > 10_000 {
            self.access.clear();
        }
        self.access.insert(key, (ok, now));
        ok
    }

    /// Deliver `event`, retrying until it succeeds or the subscription is
    /// disabled. False when the worker must stop.
    async fn deliver(&mut self, event: &Event) -> bool {
        let message = message_id(&self.hook.id, event.seq);
        let payload = body(event);
        loop {
            if let Some(at) = self.hook.next_attempt_at {
                let wait = (at - chrono::Utc::now().timestamp()).max(0) as u64;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(wait)) => {}
                    _ = self.app.stopping.clone().wait() => return false,
                }
            }
            let result = self
                .app
                .webhooks
                .post(
                    &self.hook.url,
                    &message,
                    &payload,
                    self.hook.secret.as_deref(),
                    &self.app.signing_key,
                    may_reach_internal(&self.app, &self.hook),
                )
                .await;
            crate::metrics::webhook_delivery(result.outcome);
            let attempt = Attempt {
                id: 0,
                webhook_id: self.hook.id.clone(),
                message_id: message.clone(),
                seq: Some(event.seq),
                at: 0,
                status: result.status.map(i64::from),
                outcome: result.outcome.to_string(),
                latency_ms: result.latency_ms,
                response: result.response.clone(),
            };
            if result.delivered() {
                // Recorded in the background, in order, batched: the next
                // event goes out while this one's record commits. A crash
                // before that commit sends it again (same webhook-id).
                let record = Record {
                    attempt,
                    node: self.node.clone(),
                    failure: None,
                    reply: None,
                };
                if self.recorder.send(record).await.is_err() {
                    return false;
                }
                self.hook.cursor = event.seq;
                self.hook.attempts = 0;
                self.hook.failing_since = None;
                self.hook.next_attempt_at = None;
                return true;
            }
            let delay = self.app.webhooks.backoff(self.hook.attempts + 1);
            let (reply, answer) = tokio::sync::oneshot::channel();
            let record = Record {
                attempt,
                node: self.node.clone(),
                failure: Some(Failure {
                    delay_secs: delay.as_secs().max(1) as i64,
                    failing_since: self.hook.failing_since,
                    disable_after: self.app.webhooks.config.disable_after_secs as i64,
                    url: self.hook.url.clone(),
                }),
                reply: Some(reply),
            };
            if self.recorder.send(record).await.is_err() {
                return false;
            }
            let (now, disabled) = match answer.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    // Not recorded: act as if it failed, retry later.
                    tracing::warn!(webhook = self.hook.id, "recording an attempt: {e}");
                    (chrono::Utc::now().timestamp(), false)
                }
                Err(_) => return false,
            };
            if disabled {
                tracing::warn!(
                    webhook = self.hook.id,
                    "webhook disabled after continuous failure, or its claim went to another node"
                );
                return false;
            }
            tracing::info!(
                webhook = self.hook.id,
                seq = event.seq,
                outcome = result.outcome,
                status = ?result.status,
                "webhook attempt failed; retrying in {delay:?}"
            );
            self.hook.attempts += 1;
            self.hook.failing_since.get_or_insert(now);
            self.hook.next_attempt_at = Some(now + delay.as_secs().max(1) as i64);
        }
    }
}
