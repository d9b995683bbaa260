//! The event log as the rest of the server uses it: the JSON shape every
//! consumer sees (`wire`, the same for `collab-events watch` lines and
//! webhook bodies), type patterns (`TypeFilter`), appending the events this
//! crate emits outside the issue and lease code (`Recorded`: repository
//! creation, releases, ref updates), and the background tasks (retention
//! pruning, picking up rows other processes committed).
//!
//! Storage and `seq` are `collab_store::event_log`'; the stream is `ssh::watch`';
//! delivery to URLs is `webhooks`'. `docs/events.md` documents every type.

pub mod filter;
pub mod recorded;

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone as _, Utc};
use serde_json::{json, Value};

use crate::app::App;
use collab_store::event_log::{self, Event, EVENTS_CHANNEL, EVENT_SCHEMA_VERSION};

pub use filter::TypeFilter;
pub use recorded::Recorded;

/// How often rows committed by other processes (the host CLI) are picked
/// up when nothing pokes the feed; hooks are picked up at once, because the
/// server pokes after every receive-pack.
const HEAD_POLL: Duration = Duration::from_secs(2);
/// The head poll on a database that other nodes write (PostgreSQL), where
/// a `NOTIFY` from every committed event wakes the poller at once
/// (`listen`); the poll is the safety net for a listener that is
/// reconnecting.
const HEAD_POLL_SHARED: Duration = Duration::from_secs(1);

/// How often old events are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Rows deleted per pruning transaction.
const PRUNE_BATCH: i64 = 5_000;

/// RFC 3339 (UTC, seconds) of a unix time.
pub fn rfc3339(at: i64) -> String {
    Utc.timestamp_opt(at, 0)
        .single()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_default()
}

/// The JSON object of one event, as watchers and webhook receivers get it.
pub fn wire(event: &Event) -> Value {
    json!({
        "schema": EVENT_SCHEMA_VERSION,
        "seq": event.seq,
        "at": rfc3339(event.at),
        "type": event.kind,
        "repo": event.repo,
        "repo_id": event.repo_id,
        "object_id": event.object_id,
        "actor": event.actor,
        "payload": event.payload,
    })
}

/// The actor of changes made on the host with `git-collab-server` itself
/// (no SSH principal).
pub const HOST_ACTOR: &str = "host";

/// Append `events` from a process other than the server (the host CLI, a
/// git hook): one short IMMEDIATE transaction on its own connection, so
/// they all commit together or not at all. SQLite serializes it with the
/// server's writer, so `seq` stays gap-free and in commit order.
pub fn append_from_other_process(
    collab_db: &collab_store::Location,
    events: &[Recorded],
) -> collab_store::sql::Result<()> {
    let conn = collab_store::open(collab_db)?;
    let tx = collab_store::sql::Transaction::new_unchecked(
        &conn,
        collab_store::sql::TransactionBehavior::Immediate,
    )?;
    let now = Utc::now().timestamp();
    for event in events {
        event.append_in(&tx, now)?;
    }
    tx.commit()
}

/// `append_from_other_process` for one event of a host command; a failure
/// is a warning on stderr and does not undo the change.
pub fn record_host_event(config: &crate::config::ServerConfig, event: &Recorded) {
    if let Err(e) =
        append_from_other_process(&config.collab_db_location(), std::slice::from_ref(event))
    {
        eprintln!("warning: could not record the {} event: {e}", event.kind);
    }
}

/// Start the background tasks of the event log: retention pruning and the
/// head poller. They stop with the server.
pub fn spawn_background(app: &Arc<App>) {
    let pruner = app.clone();
    tokio::spawn(async move {
        let stopping = pruner.stopping.clone();
        loop {
            prune(&pruner).await;
            tokio::select! {
                _ = tokio::time::sleep(PRUNE_EVERY) => {}
                _ = stopping.clone().wait() => return,
            }
        }
    });
    let poller = app.clone();
    // Other nodes write all the time on PostgreSQL; on SQLite only hooks
    // and host commands do.
    let head_poll = if app.config.collab_db_location().is_postgres() {
        HEAD_POLL_SHARED
    } else {
        HEAD_POLL
    };
    let notified = Arc::new(tokio::sync::Notify::new());
    if let collab_store::Location::Postgres(url) = app.config.collab_db_location() {
        listen(url, notified.clone());
    }
    tokio::spawn(async move {
        let stopping = poller.stopping.clone();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(head_poll) => {}
                _ = notified.notified() => {}
                _ = stopping.clone().wait() => return,
            }
            refresh_head(&poller).await;
        }
    });
}

/// LISTEN for the events other nodes (and hooks) commit on PostgreSQL, on a
/// connection of its own in a thread of its own (the client blocks), and
/// wake the head poller for each. A lost connection is retried every
/// second; meanwhile the poll still runs. The thread ends with the process.
fn listen(url: String, notified: Arc<tokio::sync::Notify>) {
    let spawned = std::thread::Builder::new()
        .name("pg-listen".into())
        .spawn(move || loop {
            // As the store connects: the URL's TLS settings and hosts.
            match collab_store::sql::connect_client(&url) {
                Ok(mut client) => {
                    if let Err(e) = client.batch_execute(&format!("LISTEN {EVENTS_CHANNEL}")) {
                        tracing::warn!("events: LISTEN: {e}");
                    } else {
                        // A write may have landed while we were away.
                        notified.notify_one();
                        use postgres::fallible_iterator::FallibleIterator as _;
                        let mut notifications = client.notifications();
                        let mut notes = notifications.blocking_iter();
                        loop {
                            match notes.next() {
                                Ok(Some(_)) => notified.notify_one(),
                                Ok(None) => break,
                                Err(e) => {
                                    tracing::warn!("events: listening: {e}");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!("events: connecting to listen: {e}"),
            }
            std::thread::sleep(Duration::from_secs(1));
        });
    if let Err(e) = spawned {
        tracing::warn!("events: cannot start the listener thread: {e}");
    }
}

/// Publish the head as committed on disk (by any process).
pub async fn refresh_head(app: &App) {
    // On the read pool: a connection opened per poll cost a schema parse
    // (SQLite) or a login (PostgreSQL) each time.
    match app.reads.read(|conn| Ok(event_log::head(conn)?)).await {
        Ok(seq) => {
            if let Err(e) = app.writer.observe_head(seq).await {
                tracing::warn!("after writes by another process: {e:#}");
            }
        }
        Err(e) => tracing::warn!("reading the event log head: {e:#}"),
    }
}

/// Delete events older than `events.retention_days`, in batches.
async fn prune(app: &App) {
    let keep = app.config.events.retention_days as i64 * 86_400;
    let mut total = 0;
    loop {
        let pruned = app
            .writer
            .write("prune events", move |conn, now| {
                let logged = collab_store::webhooks::prune_attempts(conn, now - keep, PRUNE_BATCH)?;
                Ok(event_log::prune_before(conn, now - keep, PRUNE_BATCH)?.max(logged))
            })
            .await;
        match pruned {
            Ok(n) => {
                total += n;
                if (n as i64) < PRUNE_BATCH {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!("pruning events: {e:#}");
                break;
            }
        }
    }
    if total > 0 {
        tracing::info!("pruned {total} events (and delivery log rows) older than the retention");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape() {
        let event = Event {
            seq: 7,
            at: 0,
            kind: "ref.updated".into(),
            repo: Some("r.git".into()),
            repo_id: Some("0f".into()),
            repo_now: Some("r.git".into()),
            object_id: Some("refs/heads/main".into()),
            actor: Some("alice".into()),
            payload: json!({"ref": "refs/heads/main"}),
        };
        assert_eq!(
            wire(&event),
            json!({
                "schema": 1, "seq": 7, "at": "1970-01-01T00:00:00Z", "type": "ref.updated",
                "repo": "r.git", "repo_id": "0f", "object_id": "refs/heads/main", "actor": "alice",
                "payload": {"ref": "refs/heads/main"},
            })
        );
    }
}
