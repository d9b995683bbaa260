//! The event log as a source for `collab-events watch ['<repo>'...]
//! [--since SEQ] [--type PATTERN]... [--no-follow]` and the MCP event
//! tools: [`open`] checks the request and takes its slots, [`Watch::run`]
//! writes the JSON lines into any writer (the SSH door's channel, an MCP
//! session's pipe).
//!
//! One loop serves both the replay and the live part, so there is no seam:
//! it reads the `events` table for `seq > last_seen` in batches (its own
//! read-only connection; the table is the only source, never an in-memory
//! copy of a payload), writes what the caller may see, and when it has
//! caught up waits for the published event head (`Writer::
//! subscribe_event_head`, raised after every COMMIT and after every
//! receive-pack) to move past `last_seen`. `seq` is taken under the write
//! lock and committed in order, so a row with a lower seq can never appear
//! after a higher one was read: nothing is skipped, nothing repeats.
//!
//! Visibility is decided per event by `authz` (cached for a few seconds)
//! on the repository the event carries the id of (`events.repo_id`), under
//! the name that repository has now: an event of a repository the caller
//! cannot read is skipped, as if it did not exist; events of a deleted
//! repository, and events without a repository, go to server
//! administrators only. A new repository reusing a name never sees its
//! predecessor's events. A repository named on the command line that the caller cannot read
//! gets the one `repository not found` reply.
//!
//! Output goes through the door's writer, which waits for its client
//! (an SSH channel's window), so the server buffers at most one batch. A client that stops
//! reading blocks that write; after `events.stall_timeout_secs` it is cut
//! off with a last stderr line naming the seq to resume from (sent past the
//! full window: one short line) and exit status 1. An idle stream gets a
//! heartbeat line every `events.heartbeat_secs`.
//!
//! Watchers are capped server-wide (`events.max_watchers`) and per key
//! (`events.max_watchers_per_principal`, a fair share: one key cannot take
//! every slot).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt as _;

use super::command::WatchCmd;
use super::context::Context;
use super::reply::NOT_FOUND;
use crate::authz::{self, Access, Caller};
use crate::events::{wire, TypeFilter};
use crate::limits::shares::Share;
use crate::people::DisplayNames;
use collab_store::event_log::{self, Event};

/// Rows read per query.
const BATCH: i64 = 500;

/// How long a visibility decision (and the caller's admission) is reused.
const ACCESS_TTL: Duration = Duration::from_secs(5);

/// How long a watcher waits for the collab database to come back (a
/// PostgreSQL restart or failover) before it is cut off with the `seq` to
/// resume from; it retries with a backoff of up to a second meanwhile and
/// resumes after the last event it sent, so nothing is skipped or repeated.
const DB_WAIT: Duration = Duration::from_secs(60);

/// Watchers connected right now (bounded by `events.max_watchers`).
static WATCHERS: AtomicU64 = AtomicU64::new(0);

/// Counts a watcher for as long as it lives.
struct WatcherSlot;

impl WatcherSlot {
    fn take(max: u64) -> Option<WatcherSlot> {
        let taken = WATCHERS.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        });
        taken.ok().map(|_| {
            crate::metrics::set_watchers(WATCHERS.load(Ordering::Acquire));
            WatcherSlot
        })
    }
}

impl Drop for WatcherSlot {
    fn drop(&mut self) {
        WATCHERS.fetch_sub(1, Ordering::AcqRel);
        crate::metrics::set_watchers(WATCHERS.load(Ordering::Acquire));
    }
}

/// The read-only connection a watcher reads through, moved to the blocking
/// pool for each query.
struct Reader {
    conn: Option<collab_store::sql::Connection>,
}

impl Reader {
    async fn open(location: collab_store::Location) -> anyhow::Result<Reader> {
        let conn =
            tokio::task::spawn_blocking(move || collab_store::open_reader(&location)).await??;
        Ok(Reader { conn: Some(conn) })
    }

    async fn query<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&collab_store::sql::Connection) -> collab_store::sql::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let conn = self
            .conn
            .take()
            .ok_or_else(|| anyhow::anyhow!("reader lost"))?;
        let (conn, result) = tokio::task::spawn_blocking(move || {
            let result = f(&conn);
            (conn, result)
        })
        .await?;
        self.conn = Some(conn);
        Ok(result?)
    }
}

/// Which events the caller may see, re-decided every `ACCESS_TTL` (the
/// terminal UI's events pane decides with it too).
pub struct Visibility {
    caller: Caller,
    repos: HashMap<String, (bool, Instant)>,
    server_events: Option<(bool, Instant)>,
}

impl Visibility {
    pub fn new(caller: Caller) -> Visibility {
        Visibility {
            caller,
            repos: HashMap::new(),
            server_events: None,
        }
    }

    pub fn sees(&mut self, ctx: &Context, event: &Event) -> bool {
        let now = Instant::now();
        if event.has_repo() {
            // Judged by the repository the event was written for (its
            // lasting id), never by whatever holds its name today.
            let key = event.repo_id.clone().unwrap_or_default();
            if let Some((visible, at)) = self.repos.get(&key) {
                if now.duration_since(*at) < ACCESS_TTL {
                    return *visible;
                }
            }
            let admin = || authz::is_server_admin(&ctx.app, &self.caller);
            let visible = match (&event.repo_id, &event.repo_now) {
                // Live under `name` (its name now, after any rename). A
                // name without a repository on disk (removed by hand) is
                // like a deleted one.
                (Some(_), Some(name)) => {
                    authz::authorize(&ctx.app, &self.caller, name, Access::Read).is_ok()
                        || (crate::repos::find_repo(&ctx.app.config.repos_dir, name).is_none()
                            && admin())
                }
                // Deleted (its `repo.deleted` row too), or written without
                // an id: administrators only, for ever.
                _ => admin(),
            };
            if self.repos.len() > 10_000 {
                self.repos.clear();
            }
            self.repos.insert(key, (visible, now));
            return visible;
        }
        if let Some((visible, at)) = self.server_events {
            if now.duration_since(at) < ACCESS_TTL {
                return visible;
            }
        }
        let visible = authz::is_server_admin(&ctx.app, &self.caller);
        self.server_events = Some((visible, now));
        visible
    }
}

/// Why a stream ended.
pub enum End {
    /// The client closed the channel (or the connection went away).
    ClientGone,
    /// Caught up with `--no-follow`.
    CaughtUp,
    /// Cut off with this error line; exit status 1.
    Cut(String),
}

/// A watcher let in: its slots, its reader and where it starts.
pub struct Watch {
    only: HashSet<String>,
    types: Vec<String>,
    start: i64,
    stop_at: Option<i64>,
    reader: Reader,
    _share: Share,
    _slot: WatcherSlot,
}

/// Check `cmd` (its repositories readable, the key's share of watchers
/// and the server's, `--since` still kept) and take its slots; or the one
/// `error:` line that refuses it.
pub async fn open(ctx: &Context, cmd: WatchCmd) -> Result<Watch, String> {
    // Named repositories must be readable; resolve them to their canonical
    // names (the form events carry).
    let mut only: HashSet<String> = HashSet::new();
    for requested in &cmd.repos {
        match authz::authorize(&ctx.app, &ctx.caller, requested, Access::Read) {
            Ok((entry, _)) => {
                only.insert(entry.name);
            }
            Err(_) => return Err(NOT_FOUND.to_string()),
        }
    }
    let config = &ctx.app.config.events;
    // The key's share first, so one key cannot take every server-wide slot.
    let share_key = ctx.caller.identity.share_key();
    let shares = &ctx.app.limits.watchers_per_principal;
    let share = match shares.take("watch", &share_key, |limit| {
        format!("{limit} watchers connected with this key")
    }) {
        Ok(share) => share,
        Err(limit) => {
            return Err(format!(
                "error: too many event watchers with this key ({limit} connected); stop one and try again"
            ));
        }
    };
    let Some(slot) = WatcherSlot::take(config.max_watchers) else {
        crate::limits::note_refusal("watch", "max_watchers", || {
            format!("{} watchers connected", config.max_watchers)
        });
        return Err("error: too many event watchers are connected; try again later".to_string());
    };
    let mut reader = match Reader::open(ctx.app.config.collab_db_location()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("events: opening a reader: {e:#}");
            return Err("error: internal error".to_string());
        }
    };
    let bounds = reader.query(event_log::bounds).await;
    let (oldest, head) = match bounds {
        Ok(b) => b,
        Err(e) => {
            tracing::error!("events: reading the log bounds: {e:#}");
            return Err("error: internal error".to_string());
        }
    };
    let start = match cmd.since {
        // Events after `since` are all still stored only if `since + 1`
        // has not been pruned.
        Some(since) if since + 1 < oldest => {
            return Err(format!(
                "error: events after seq {since} are no longer kept (events.retention_days = {}); \
                 the oldest available seq is {oldest}: use --since {}",
                config.retention_days,
                oldest - 1
            ));
        }
        Some(since) => since,
        None => head,
    };
    Ok(Watch {
        only,
        types: cmd.types,
        start,
        stop_at: (!cmd.follow).then_some(head),
        reader,
        _share: share,
        _slot: slot,
    })
}

impl Watch {
    /// Write the events as JSON lines into `out` until caught up (with
    /// `--no-follow`), the caller leaves (`gone`), the server stops or the
    /// writer stalls past `events.stall_timeout_secs` (cut, with the line
    /// to end on).
    pub async fn run(
        mut self,
        ctx: &Context,
        out: &mut (impl tokio::io::AsyncWrite + Unpin),
        gone: &mut tokio::sync::oneshot::Receiver<()>,
    ) -> End {
        let config = &ctx.app.config.events;
        let stream = Stream {
            ctx,
            only: self.only,
            types: TypeFilter::new(self.types),
            visibility: Visibility::new(ctx.caller.clone()),
            last_seen: self.start,
            stop_at: self.stop_at,
            stall: Duration::from_secs(config.stall_timeout_secs),
            heartbeat: Duration::from_secs(config.heartbeat_secs),
        };
        stream.run(&mut self.reader, out, gone).await
    }
}

/// One watcher's state.
struct Stream<'a> {
    ctx: &'a Context,
    /// Canonical names of the repositories asked for; empty = all.
    only: HashSet<String>,
    types: TypeFilter,
    visibility: Visibility,
    /// Every event up to here has been considered (sent or skipped).
    last_seen: i64,
    /// With `--no-follow`: the head at the start.
    stop_at: Option<i64>,
    stall: Duration,
    heartbeat: Duration,
}

impl Stream<'_> {
    async fn run(
        mut self,
        reader: &mut Reader,
        out: &mut (impl tokio::io::AsyncWrite + Unpin),
        gone: &mut tokio::sync::oneshot::Receiver<()>,
    ) -> End {
        let app = &self.ctx.app;
        let mut head = app.writer.subscribe_event_head();
        let stopping = app.stopping.clone();
        let mut admitted_at = Instant::now();
        let mut last_write = Instant::now();
        // Since when, and the next pause, while the database is unreachable.
        let mut outage: Option<(Instant, Duration)> = None;
        loop {
            if admitted_at.elapsed() >= ACCESS_TTL {
                // A key removed from authorized_keys (or governance) stops here.
                if !authz::is_admitted(app, &self.ctx.caller.identity) {
                    return End::Cut("error: this key is no longer admitted".into());
                }
                self.visibility.caller = authz::caller_for(app, self.ctx.caller.identity.clone());
                admitted_at = Instant::now();
            }
            let after = self.last_seen;
            let limit = match self.stop_at {
                Some(stop) => (stop - after).clamp(0, BATCH),
                None => BATCH,
            };
            let rows = if limit == 0 {
                Vec::new()
            } else {
                match reader
                    .query(move |conn| event_log::after(conn, after, limit))
                    .await
                {
                    Ok(rows) => {
                        outage = None;
                        rows
                    }
                    // The connection reconnects on its next use; the read
                    // starts again after the last event considered.
                    Err(e) if super::reply::is_unavailable(&e) => {
                        let (since, pause) = outage.get_or_insert_with(|| {
                            tracing::warn!("events: the collab database is unavailable: {e:#}");
                            (Instant::now(), Duration::from_millis(50))
                        });
                        if since.elapsed() >= DB_WAIT {
                            return End::Cut(format!(
                                "error: the collab database is unavailable; resume with --since {after}"
                            ));
                        }
                        let wait = *pause;
                        *pause = (*pause * 2).min(Duration::from_secs(1));
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => continue,
                            _ = &mut *gone => return End::ClientGone,
                        }
                    }
                    Err(e) => {
                        tracing::error!("events: reading after {after}: {e:#}");
                        return End::Cut("error: internal error".into());
                    }
                }
            };
            let full = rows.len() as i64 == BATCH;
            let mut batch = Vec::new();
            let names = DisplayNames::of(app);
            for event in &rows {
                self.last_seen = event.seq;
                if self.wanted(event) {
                    // The actor's display name beside its principal, as
                    // replies name people (`actor_name`, added; webhook
                    // bodies keep the stored form).
                    let mut line = wire(event);
                    if let Some(actor) = event.actor.as_deref() {
                        line["actor_name"] = names.name(actor).into();
                    }
                    // A branch name may hold text-direction or invisible
                    // characters (pushed before they were refused, or a
                    // mirror's): sent as JSON escapes, same value.
                    let line = serde_json::to_string(&line).unwrap_or_default();
                    batch.extend_from_slice(collab_record::text::escape_json(&line).as_bytes());
                    batch.push(b'\n');
                }
            }
            if !batch.is_empty() {
                if let Some(end) = self.send(out, &batch, after, gone).await {
                    return end;
                }
                last_write = Instant::now();
            }
            if full {
                continue;
            }
            if self.stop_at.is_some_and(|stop| self.last_seen >= stop) {
                return End::CaughtUp;
            }
            // Caught up: wait for the head to pass last_seen, a heartbeat,
            // the client leaving, or the server stopping.
            let heartbeat_due = last_write + self.heartbeat;
            let last_seen = self.last_seen;
            tokio::select! {
                changed = async { head.wait_for(|&h| h > last_seen).await.map(|_| ()) } => {
                    if changed.is_err() {
                        return End::Cut("error: the server is shutting down".into());
                    }
                }
                _ = tokio::time::sleep_until(heartbeat_due.into()) => {
                    let line = json!({
                        "type": "heartbeat",
                        "seq": self.last_seen,
                        "at": crate::events::rfc3339(chrono::Utc::now().timestamp()),
                    });
                    let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
                    bytes.push(b'\n');
                    if let Some(end) = self.send(out, &bytes, self.last_seen, gone).await {
                        return end;
                    }
                    last_write = Instant::now();
                }
                _ = &mut *gone => return End::ClientGone,
                _ = stopping.clone().wait() => {
                    return End::Cut(format!(
                        "error: the server is shutting down; resume with --since {}",
                        self.last_seen
                    ));
                }
                // Re-check admission even on a quiet log.
                _ = tokio::time::sleep(ACCESS_TTL) => {}
            }
        }
    }

    fn wanted(&mut self, event: &Event) -> bool {
        if !self.types.matches(&event.kind) {
            return false;
        }
        // Named repositories: their events under any earlier name too.
        if !self.only.is_empty()
            && !event
                .repo_now
                .as_ref()
                .is_some_and(|r| self.only.contains(r))
        {
            return false;
        }
        self.visibility.sees(self.ctx, event)
    }

    /// Write `bytes`, waiting for the client's window at most `stall`.
    /// Everything up to `confirmed` was written before these bytes.
    async fn send(
        &self,
        out: &mut (impl tokio::io::AsyncWrite + Unpin),
        bytes: &[u8],
        confirmed: i64,
        gone: &mut tokio::sync::oneshot::Receiver<()>,
    ) -> Option<End> {
        let write = async {
            out.write_all(bytes).await?;
            out.flush().await
        };
        tokio::select! {
            written = tokio::time::timeout(self.stall, write) => match written {
                Ok(Ok(())) => None,
                Ok(Err(_)) => Some(End::ClientGone),
                Err(_) => Some(End::Cut(format!(
                    "error: too slow: the client stopped reading for {}s; every line up to seq \
                     {confirmed} was sent whole (a last line without a newline is incomplete); \
                     resume with --since <the seq of the last complete line>",
                    self.stall.as_secs(),
                ))),
            },
            _ = &mut *gone => Some(End::ClientGone),
        }
    }
}
