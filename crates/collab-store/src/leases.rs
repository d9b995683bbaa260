//! Work leases on issues: the one collaboration primitive git cannot
//! express (an atomic claim with a TTL). This module owns every lease
//! decision: who wins an acquire, what is idempotent, when a tenure ends
//! (release, expiry by TTL or `max_lifetime`, a break), the lock delay after
//! an expiry, and which fencing token a tenure gets; and it appends each
//! change's `lease.*` event in the same transaction. It never reads the clock
//! (`now`, unix seconds, is passed in) and knows nothing of SSH,
//! authorization or threads; `writer` runs these functions on the server's
//! single writer thread.
//!
//! The standalone operations (`acquire`, `renew`, …) each run in ONE
//! `BEGIN IMMEDIATE` transaction. The `*_in` variants hold the same
//! read-decide-write logic without opening a transaction, so a caller that
//! already has one (the group-commit writer, under a SAVEPOINT per
//! operation) can run them.
//!
//! Per issue, `lease_tokens` keeps what outlives a tenure and is never
//! deleted from: the token high-water mark (so releasing a lease or reaping
//! an expired one never lets a later tenure reuse a token), the count of
//! holder changes (`transitions`), the last holder, and the end of a lock
//! delay. `leases` holds the current tenure of each claimed issue.

use std::path::Path;
use std::time::Duration;

use crate::sql::{
    Connection, LeaseCall, OptionalExtension, Transaction, TransactionBehavior, Value,
};
use serde_json::json;

use super::event_log::{self, NewEvent};

/// How long a connection waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest TTL accepted when the configuration sets none: the longest
/// the verbs parse (`collab_proto::limits::MAX_TTL_SECS`, ten years).
pub const DEFAULT_MAX_TTL: i64 = collab_proto::limits::MAX_TTL_SECS as i64;

/// The `leases.*` configuration keys as the decisions see them. The
/// default keeps phase 1's behaviour: no lifetime cap, no lock delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// No tenure lasts longer than this many seconds from its acquire,
    /// renewals included (an open-ended claim too); `None` = unlimited.
    pub max_lifetime: Option<i64>,
    /// After a tenure ends by expiry (not release, break or close), nobody
    /// but its last holder may acquire the issue for this many seconds.
    pub lock_delay: i64,
    /// The longest TTL an acquire or renew may ask for.
    pub max_ttl: i64,
    /// How long the author of a patch the merge queue evicted holds its
    /// issue again (a fresh tenure) before the issue returns to the ready
    /// queue; 0 = no grace (`queue_holds::evict_in`).
    pub eviction_grace: i64,
}

/// Default of `leases.eviction_grace`: ten minutes.
pub const DEFAULT_EVICTION_GRACE: i64 = 10 * 60;

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_lifetime: None,
            lock_delay: 0,
            max_ttl: DEFAULT_MAX_TTL,
            eviction_grace: DEFAULT_EVICTION_GRACE,
        }
    }
}

/// A tenure: the current claim on one issue (live, or expired and not yet
/// noticed).
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub repo: String,
    pub issue_id: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: i64,
    /// None = open-ended (human assignment).
    pub expires_at: Option<i64>,
    /// The last renewal (or re-acquire) by the holder; None = never renewed.
    pub renewed_at: Option<i64>,
    /// The holder's note (what it is doing), bounded by the verb.
    pub note: Option<String>,
    /// How many times the issue passed from one holder to another.
    pub transitions: i64,
}

impl Lease {
    pub fn live(&self, now: i64) -> bool {
        self.expires_at.map(|e| e > now).unwrap_or(true)
    }
}

/// What an acquire (or a renew) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub repo: String,
    pub issue_id: String,
    pub holder: String,
    /// None = open-ended.
    pub ttl_secs: Option<i64>,
    /// Stored with the tenure; on a renew or re-acquire, None keeps the
    /// current note.
    pub note: Option<String>,
}

impl Claim {
    pub fn new(repo: &str, issue_id: &str, holder: &str, ttl_secs: Option<i64>) -> Claim {
        Claim {
            repo: repo.into(),
            issue_id: issue_id.into(),
            holder: holder.into(),
            ttl_secs,
            note: None,
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Acquire {
    /// Caller now holds the lease: a fresh tenure, or (`fresh: false`) an
    /// idempotent re-acquire of its own live lease, which moves the expiry.
    Acquired { lease: Lease, fresh: bool },
    /// A different holder has a live lease.
    Held {
        holder: String,
        expires_at: Option<i64>,
    },
    /// The last tenure ended by expiry and its lock delay still runs: only
    /// its holder may acquire before `until`.
    Locked { holder: String, until: i64 },
}

#[derive(Debug, PartialEq)]
pub enum Renew {
    Renewed(Lease),
    /// No live lease held by caller (expired, released, or someone else's).
    NotHolder {
        holder: Option<String>,
    },
}

#[derive(Debug, PartialEq)]
pub enum Release {
    /// Row deleted, or there was nothing to release (idempotent success).
    Released,
    /// A different holder has a live lease; refuse.
    NotHolder { holder: String },
}

#[derive(Debug, PartialEq)]
pub enum Break {
    /// The live tenure was ended by force.
    Broken(Lease),
    /// Nothing live to break.
    NotHeld,
}

/// Everything known about an issue's leasing, live tenure or not (for
/// `show`).
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub live: Option<Lease>,
    /// The last token handed out (0 = never leased).
    pub last_token: i64,
    pub transitions: i64,
    /// Set while a lock delay runs (after an expiry), with the holder it
    /// protects.
    pub locked: Option<(String, i64)>,
    /// Set while a merge queue carries the live tenure (`queue_holds`).
    pub queued: Option<Queued>,
}

/// The queued patch that holds a live tenure, and the branch whose merge
/// queue it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub patch: String,
    pub branch: String,
}

/// What an expiry pass did, and when the next one is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// Tenures ended by this pass.
    pub ended: Vec<(String, String)>,
    /// The earliest future instant at which a tenure ends or a lock delay
    /// runs out (unix seconds); None = nothing scheduled.
    pub next_due: Option<i64>,
}

/// A TTL that cannot become an expiry time.
#[derive(Debug, thiserror::Error)]
pub enum InvalidTtl {
    #[error("lease ttl must be a positive number of seconds, got {0}")]
    NotPositive(i64),
    #[error("lease ttl {ttl} is longer than leases.max_ttl ({max})")]
    TooLong { ttl: i64, max: i64 },
}

/// Open (creating if needed) the lease database and ensure the schema.
///
/// WAL lets readers run beside the writer; `synchronous=FULL` makes every
/// COMMIT durable (fsync of the WAL) before it returns, which is what lets
/// a reply promise that the lease survives a crash.
pub fn open(path: &Path) -> crate::sql::Result<Connection> {
    make_private(path).map_err(|e| failure(format!("{}: {e}", path.display())))?;
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(failure(format!(
            "{}: cannot use WAL journal mode (got {mode})",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "FULL")?;
    // The writer opens a SAVEPOINT per operation; its sub-journal in memory
    // instead of a temp file nearly halves what a savepoint costs.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    let conn = Connection::from(conn);
    init_schema(&conn)?;
    Ok(conn)
}

/// The database holds issue bodies, webhook secrets and everything else:
/// owner-only whatever the umask. The file is created 0600 before SQLite
/// opens it (SQLite gives its `-wal` and `-shm` the main file's mode), and
/// a file an older server left 0644 is tightened, with its `-wal`/`-shm`.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = std::path::PathBuf::from(file);
        match std::fs::metadata(&file) {
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Create or migrate the schema on any connection (tests use in-memory
/// ones). See `migrations`.
pub fn init_schema(conn: &Connection) -> crate::sql::Result<()> {
    super::migrations::migrate(conn)
}

// The standalone forms (one transaction each, default policy, no note)
// serve the unit tests and benches/lease_store.rs; the server goes through
// the writer and the `*_in` forms.
pub fn acquire(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> crate::sql::Result<Acquire> {
    let claim = Claim::new(repo, issue_id, holder, ttl_secs);
    in_immediate_tx(conn, |tx| acquire_in(tx, &claim, &Policy::default(), now))
}

pub fn renew(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> crate::sql::Result<Renew> {
    let claim = Claim::new(repo, issue_id, holder, ttl_secs);
    in_immediate_tx(conn, |tx| renew_in(tx, &claim, &Policy::default(), now))
}

pub fn release(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    now: i64,
) -> crate::sql::Result<Release> {
    in_immediate_tx(conn, |tx| {
        release_in(tx, repo, issue_id, holder, &Policy::default(), now)
    })
}

/// A live lease on the issue, if any.
pub fn current(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> crate::sql::Result<Option<Lease>> {
    current_in(conn, repo, issue_id, now)
}

/// All live leases in a repo, oldest first.
pub fn list(conn: &Connection, repo: &str, now: i64) -> crate::sql::Result<Vec<Lease>> {
    list_in(conn, repo, now)
}

/// `acquire` without its own transaction: the caller must be inside one.
/// On PostgreSQL one statement decides it, the function
/// `collab_lease_acquire` (unless [`Connection::lease_functions`] says
/// otherwise); on SQLite the statements below run in process.
pub fn acquire_in(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Acquire> {
    check_ttl(claim.ttl_secs, policy)?;
    if conn.lease_functions() {
        if let Some(outcome) = acquire_by_function(conn, claim, policy, now)? {
            return Ok(outcome);
        }
    }
    acquire_by_statements(conn, claim, policy, now)
}

/// `acquire_in`'s decision as statements sent one by one (SQLite; on
/// PostgreSQL the path the function replaced, kept to compare).
pub(crate) fn acquire_by_statements(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Acquire> {
    let (repo, issue_id, holder) = (&*claim.repo, &*claim.issue_id, &*claim.holder);
    lock_issue(conn, repo, issue_id)?;
    match live_row(conn, repo, issue_id, policy, now)? {
        Some(live) if live.holder == holder => Ok(Acquire::Acquired {
            lease: extend(conn, live, claim, policy, now)?,
            fresh: false,
        }),
        Some(live) => Ok(Acquire::Held {
            holder: live.holder,
            expires_at: live.expires_at,
        }),
        None => begin_tenure(conn, claim, policy, now),
    }
}

/// `renew` without its own transaction: the caller must be inside one.
/// `claim.ttl_secs` is the new TTL from now (None = open-ended).
pub fn renew_in(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Renew> {
    check_ttl(claim.ttl_secs, policy)?;
    if conn.lease_functions() {
        if let Some(outcome) = renew_by_function(conn, claim, policy, now)? {
            return Ok(outcome);
        }
    }
    renew_by_statements(conn, claim, policy, now)
}

/// `renew_in`'s decision as statements sent one by one.
pub(crate) fn renew_by_statements(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Renew> {
    lock_issue(conn, &claim.repo, &claim.issue_id)?;
    match live_row(conn, &claim.repo, &claim.issue_id, policy, now)? {
        Some(live) if live.holder == claim.holder => {
            Ok(Renew::Renewed(extend(conn, live, claim, policy, now)?))
        }
        other => Ok(Renew::NotHolder {
            holder: other.map(|l| l.holder),
        }),
    }
}

/// `release` without its own transaction: the caller must be inside one.
/// On PostgreSQL one statement decides it, the function
/// `collab_lease_release` (as for [`acquire_in`]).
pub fn release_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Release> {
    if conn.lease_functions() {
        if let Some(outcome) = release_by_function(conn, repo, issue_id, holder, policy, now)? {
            return Ok(outcome);
        }
    }
    release_by_statements(conn, repo, issue_id, holder, policy, now)
}

/// `release_in`'s decision as statements sent one by one.
pub(crate) fn release_by_statements(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Release> {
    lock_issue(conn, repo, issue_id)?;
    let Some(live) = live_row(conn, repo, issue_id, policy, now)? else {
        // Nothing live to release (an expired tenure was just ended, with
        // its event, by `live_row`): idempotent success.
        return Ok(Release::Released);
    };
    if live.holder != holder {
        return Ok(Release::NotHolder {
            holder: live.holder,
        });
    }
    // The token's high-water mark stays in lease_tokens.
    delete_row(conn, repo, issue_id)?;
    record(
        conn,
        "lease.released",
        &live,
        Some(holder),
        json!({ "holder": holder, "token": live.token }),
        now,
    )?;
    Ok(Release::Released)
}

/// End the live tenure on an issue by force (`collab-lease break`), whoever
/// holds it; `by` and `reason` go into the `lease.broken` event. No lock
/// delay follows: the breaker decided.
pub fn break_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    by: &str,
    reason: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Break> {
    if conn.lease_functions() {
        if let Some(outcome) = break_by_function(conn, repo, issue_id, by, reason, policy, now)? {
            return Ok(outcome);
        }
    }
    break_by_statements(conn, repo, issue_id, by, reason, policy, now)
}

/// `break_in`'s decision as statements sent one by one.
pub(crate) fn break_by_statements(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    by: &str,
    reason: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Break> {
    lock_issue(conn, repo, issue_id)?;
    let Some(live) = live_row(conn, repo, issue_id, policy, now)? else {
        return Ok(Break::NotHeld);
    };
    delete_row(conn, repo, issue_id)?;
    record(
        conn,
        "lease.broken",
        &live,
        Some(by),
        json!({ "holder": live.holder, "token": live.token, "reason": reason, "by": by }),
        now,
    )?;
    Ok(Break::Broken(live))
}

/// The live lease on an issue, if any. A pure read: an expired row that
/// no pass has ended yet is simply not live.
pub fn current_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> crate::sql::Result<Option<Lease>> {
    Ok(row(conn, repo, issue_id)?.filter(|l| l.live(now)))
}

/// The live lease on an issue, if any (a pure read, for fencing checks
/// inside another write). The same as [`current_in`].
pub fn live_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> crate::sql::Result<Option<Lease>> {
    current_in(conn, repo, issue_id, now)
}

/// End whatever tenure is held on an issue because the issue closed;
/// returns the live lease that ended, if there was one (the caller records
/// its event: the close is the caller's). No lock delay follows. A tenure
/// that had already expired unnoticed is ended with its own
/// `lease.expired`.
pub fn end_on_close_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> crate::sql::Result<Option<Lease>> {
    lock_issue(conn, repo, issue_id)?;
    let live = live_row(conn, repo, issue_id, &Policy::default(), now)?;
    if live.is_some() {
        delete_row(conn, repo, issue_id)?;
    }
    Ok(live)
}

/// All live leases in a repo, oldest tenure first. A pure read.
pub fn list_in(conn: &Connection, repo: &str, now: i64) -> crate::sql::Result<Vec<Lease>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT_LEASE} WHERE l.repo = ?1 AND (l.expires_at IS NULL OR l.expires_at > ?2)
         ORDER BY l.acquired_at, l.issue_id"
    ))?;
    let leases = stmt.query_map(crate::sql::params![repo, now], lease_from_row)?;
    leases.collect()
}

/// The issues of `repo` ever leased whose id starts with `prefix` (hex),
/// at most two: one is a match, two is ambiguous. A pure read (push
/// fencing resolves the issue of a `collab-lease` push option with it).
pub fn issues_with_prefix(
    conn: &Connection,
    repo: &str,
    prefix: &str,
) -> crate::sql::Result<Vec<String>> {
    if !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Vec::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT issue_id FROM lease_tokens WHERE repo = ?1 AND issue_id LIKE ?2
         ORDER BY issue_id LIMIT 2",
    )?;
    let ids = stmt.query_map([repo, &format!("{prefix}%")], |r| r.get(0))?;
    ids.collect()
}

/// Everything about an issue's leasing (for `collab-lease show`). A pure
/// read.
pub fn status_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> crate::sql::Result<Status> {
    let live = current_in(conn, repo, issue_id, now)?;
    let issue: Option<(i64, i64, Option<String>, Option<i64>)> = conn
        .prepare_cached(
            "SELECT last_token, transitions, last_holder, locked_until FROM lease_tokens
             WHERE repo = ?1 AND issue_id = ?2",
        )?
        .query_row([repo, issue_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let (last_token, transitions, last_holder, locked_until) = issue.unwrap_or_default();
    let locked = match (live.is_some(), last_holder, locked_until) {
        (false, Some(holder), Some(until)) if until > now => Some((holder, until)),
        _ => None,
    };
    let queued = match &live {
        Some(l) => queued_in(conn, l)?,
        None => None,
    };
    Ok(Status {
        live,
        last_token,
        transitions,
        locked,
        queued,
    })
}

/// End every tenure whose time is up at `now`, with its `lease.expired`
/// event and lock delay, and say when the next one is due. The server's
/// expiry timer runs this when the last answer's `next_due` arrives.
pub fn expire_due_in(conn: &Connection, policy: &Policy, now: i64) -> crate::sql::Result<Expired> {
    let due: Vec<Lease> = conn
        .prepare_cached(&format!(
            "{SELECT_LEASE} WHERE l.expires_at IS NOT NULL AND l.expires_at <= ?1
             ORDER BY l.expires_at, l.repo, l.issue_id"
        ))?
        .query_map([now], lease_from_row)?
        .collect::<crate::sql::Result<_>>()?;
    let mut ended = Vec::with_capacity(due.len());
    for lease in due {
        // Another node deciding this issue ends it itself (every lease
        // operation ends an expired tenure it finds), or a later pass does.
        if !conn.lock_issue(&lease.repo, &lease.issue_id)? {
            continue;
        }
        // Read again under the lock: the list was read before it.
        match row(conn, &lease.repo, &lease.issue_id)? {
            Some(now_row) if now_row.token == lease.token && !now_row.live(now) => {
                delete_row(conn, &now_row.repo, &now_row.issue_id)?;
                end_by_expiry(conn, &now_row, policy, now)?;
                ended.push(now_row);
            }
            _ => {}
        }
    }
    let next_expiry: Option<i64> = conn
        .prepare_cached("SELECT MIN(expires_at) FROM leases WHERE expires_at IS NOT NULL")?
        .query_row([], |r| r.get(0))?;
    let next_unlock: Option<i64> = conn
        .prepare_cached(
            "SELECT MIN(locked_until) FROM lease_tokens
             WHERE locked_until IS NOT NULL AND locked_until > ?1",
        )?
        .query_row([now], |r| r.get(0))?;
    Ok(Expired {
        ended: ended.into_iter().map(|l| (l.repo, l.issue_id)).collect(),
        next_due: earliest(next_expiry, next_unlock),
    })
}

/// Whether the writer runs this kind of operation on `conn` as one
/// function call (PostgreSQL, version 16): its savepoint can then ride in
/// the call's round trip ([`Connection::defer_savepoint`]).
pub fn in_one_call(conn: &Connection) -> bool {
    conn.lease_functions()
}

/// The columns of a lease function's row, as text.
struct Columns(Vec<Option<String>>);

impl Columns {
    fn text(&self, i: usize) -> Option<String> {
        self.0.get(i).cloned().flatten()
    }

    fn int(&self, i: usize) -> crate::sql::Result<Option<i64>> {
        self.text(i)
            .map(|t| {
                t.parse()
                    .map_err(|_| crate::sql::Error::conversion(format!("lease function: {t:?}")))
            })
            .transpose()
    }

    fn need_text(&self, i: usize) -> crate::sql::Result<String> {
        self.text(i).ok_or_else(|| {
            crate::sql::Error::conversion(format!("lease function: column {i} NULL"))
        })
    }

    fn need_int(&self, i: usize) -> crate::sql::Result<i64> {
        self.int(i)?.ok_or_else(|| {
            crate::sql::Error::conversion(format!("lease function: column {i} NULL"))
        })
    }

    /// The lease in columns 1 to 7 (holder, token, acquired_at,
    /// expires_at, renewed_at, note, transitions).
    fn lease(&self, repo: &str, issue_id: &str) -> crate::sql::Result<Lease> {
        Ok(Lease {
            repo: repo.into(),
            issue_id: issue_id.into(),
            holder: self.need_text(1)?,
            token: self.need_int(2)?,
            acquired_at: self.need_int(3)?,
            expires_at: self.int(4)?,
            renewed_at: self.int(5)?,
            note: self.text(6),
            transitions: self.need_int(7)?,
        })
    }

    /// After the call: the events it appended (column `i`) are numbered at
    /// COMMIT and announced.
    fn events(&self, conn: &Connection, i: usize) -> crate::sql::Result<()> {
        if self.int(i)?.unwrap_or(0) > 0 {
            conn.appended_late();
            conn.notify(event_log::EVENTS_CHANNEL)?;
        }
        Ok(())
    }
}

/// A lease operation as one call of its PostgreSQL function (version 16):
/// the function and its arguments (the connection adds the last one,
/// whether the issue's lock is only tried). Made by `*_call`, which also
/// reserves the provisional numbers of the events it may append; its row
/// is read by `*_done`.
#[derive(Debug)]
pub struct Call {
    pub function: &'static str,
    pub args: Vec<Value>,
}

fn int(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Integer)
}

fn text(v: Option<&str>) -> Value {
    v.map_or(Value::Null, Value::from)
}

/// Run `call`; `None` if it cannot be sent (nothing was done).
fn call(conn: &Connection, call: Call) -> crate::sql::Result<Option<Vec<Option<String>>>> {
    conn.call_row(call.function, &call.args)
}

/// `acquire_in` as a call of `collab_lease_acquire` (postgres_v16.sql),
/// after the TTL check.
pub fn acquire_call(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Call> {
    check_ttl(claim.ttl_secs, policy)?;
    // At most two events (an expiry, then the acquire), in this order.
    let (first, second) = (conn.reserve_seq(), conn.reserve_seq());
    Ok(Call {
        function: "collab_lease_acquire",
        args: vec![
            Value::from(claim.repo.as_str()),
            Value::from(claim.issue_id.as_str()),
            Value::from(claim.holder.as_str()),
            int(claim.ttl_secs),
            text(claim.note.as_deref()),
            int(policy.max_lifetime),
            Value::Integer(policy.lock_delay),
            Value::Integer(now),
            int(first),
            int(second),
        ],
    })
}

/// The outcome of an [`acquire_call`] from its row.
pub fn acquire_done(
    conn: &Connection,
    claim: &Claim,
    row: Vec<Option<String>>,
) -> crate::sql::Result<Acquire> {
    let row = Columns(row);
    row.events(conn, 9)?;
    let outcome = row.need_text(0)?;
    Ok(match outcome.as_str() {
        "acquired" | "reacquired" => Acquire::Acquired {
            lease: row.lease(&claim.repo, &claim.issue_id)?,
            fresh: outcome == "acquired",
        },
        "held" => Acquire::Held {
            holder: row.need_text(1)?,
            expires_at: row.int(4)?,
        },
        "locked" => Acquire::Locked {
            holder: row.need_text(1)?,
            until: row.need_int(8)?,
        },
        "busy" => return Err(busy(&claim.repo, &claim.issue_id)),
        other => return Err(failure(format!("collab_lease_acquire: outcome {other:?}"))),
    })
}

/// `acquire_in` as one call of `collab_lease_acquire`. `None`: the claim
/// cannot be sent as literals; nothing was done.
fn acquire_by_function(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Option<Acquire>> {
    let Some(row) = call(conn, acquire_call(conn, claim, policy, now)?)? else {
        return Ok(None);
    };
    acquire_done(conn, claim, row).map(Some)
}

/// `release_in` as a call of `collab_lease_release`.
pub fn release_call(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    policy: &Policy,
    now: i64,
) -> Call {
    let seq = conn.reserve_seq();
    Call {
        function: "collab_lease_release",
        args: vec![
            Value::from(repo),
            Value::from(issue_id),
            Value::from(holder),
            int(policy.max_lifetime),
            Value::Integer(policy.lock_delay),
            Value::Integer(now),
            int(seq),
        ],
    }
}

/// The outcome of a [`release_call`] from its row.
pub fn release_done(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    row: Vec<Option<String>>,
) -> crate::sql::Result<Release> {
    let row = Columns(row);
    row.events(conn, 2)?;
    Ok(match row.need_text(0)?.as_str() {
        "released" => Release::Released,
        "not_holder" => Release::NotHolder {
            holder: row.need_text(1)?,
        },
        "busy" => return Err(busy(repo, issue_id)),
        other => return Err(failure(format!("collab_lease_release: outcome {other:?}"))),
    })
}

/// `release_in` as one call of `collab_lease_release`.
fn release_by_function(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Option<Release>> {
    let made = release_call(conn, repo, issue_id, holder, policy, now);
    let Some(row) = call(conn, made)? else {
        return Ok(None);
    };
    release_done(conn, repo, issue_id, row).map(Some)
}

/// `renew_in` as a call of `collab_lease_renew`, after the TTL check.
pub fn renew_call(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Call> {
    check_ttl(claim.ttl_secs, policy)?;
    let seq = conn.reserve_seq();
    Ok(Call {
        function: "collab_lease_renew",
        args: vec![
            Value::from(claim.repo.as_str()),
            Value::from(claim.issue_id.as_str()),
            Value::from(claim.holder.as_str()),
            int(claim.ttl_secs),
            text(claim.note.as_deref()),
            int(policy.max_lifetime),
            Value::Integer(policy.lock_delay),
            Value::Integer(now),
            int(seq),
        ],
    })
}

/// The outcome of a [`renew_call`] from its row.
pub fn renew_done(
    conn: &Connection,
    claim: &Claim,
    row: Vec<Option<String>>,
) -> crate::sql::Result<Renew> {
    let row = Columns(row);
    row.events(conn, 8)?;
    Ok(match row.need_text(0)?.as_str() {
        "renewed" => Renew::Renewed(row.lease(&claim.repo, &claim.issue_id)?),
        "not_holder" => Renew::NotHolder {
            holder: row.text(1),
        },
        "busy" => return Err(busy(&claim.repo, &claim.issue_id)),
        other => return Err(failure(format!("collab_lease_renew: outcome {other:?}"))),
    })
}

/// `renew_in` as one call of `collab_lease_renew`.
fn renew_by_function(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Option<Renew>> {
    let Some(row) = call(conn, renew_call(conn, claim, policy, now)?)? else {
        return Ok(None);
    };
    renew_done(conn, claim, row).map(Some)
}

/// `break_in` as a call of `collab_lease_break`.
pub fn break_call(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    by: &str,
    reason: &str,
    policy: &Policy,
    now: i64,
) -> Call {
    let seq = conn.reserve_seq();
    Call {
        function: "collab_lease_break",
        args: vec![
            Value::from(repo),
            Value::from(issue_id),
            Value::from(by),
            Value::from(reason),
            int(policy.max_lifetime),
            Value::Integer(policy.lock_delay),
            Value::Integer(now),
            int(seq),
        ],
    }
}

/// The outcome of a [`break_call`] from its row.
pub fn break_done(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    row: Vec<Option<String>>,
) -> crate::sql::Result<Break> {
    let row = Columns(row);
    row.events(conn, 8)?;
    Ok(match row.need_text(0)?.as_str() {
        "broken" => Break::Broken(row.lease(repo, issue_id)?),
        "not_held" => Break::NotHeld,
        "busy" => return Err(busy(repo, issue_id)),
        other => return Err(failure(format!("collab_lease_break: outcome {other:?}"))),
    })
}

/// `break_in` as one call of `collab_lease_break`.
fn break_by_function(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    by: &str,
    reason: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Option<Break>> {
    let made = break_call(conn, repo, issue_id, by, reason, policy, now);
    let Some(row) = call(conn, made)? else {
        return Ok(None);
    };
    break_done(conn, repo, issue_id, row).map(Some)
}

/// `acquire_in` as one operation of a `collab_lease_group` call, after the
/// TTL check; its two provisional event numbers are reserved here.
pub fn acquire_group_call<'a>(
    conn: &Connection,
    claim: &'a Claim,
    policy: &Policy,
) -> crate::sql::Result<LeaseCall<'a>> {
    check_ttl(claim.ttl_secs, policy)?;
    let (seq1, seq2) = (conn.reserve_seq(), conn.reserve_seq());
    Ok(LeaseCall {
        seq1,
        seq2,
        ..acquire_shape(claim)
    })
}

/// `renew_in` as one operation of a `collab_lease_group` call, after the
/// TTL check.
pub fn renew_group_call<'a>(
    conn: &Connection,
    claim: &'a Claim,
    policy: &Policy,
) -> crate::sql::Result<LeaseCall<'a>> {
    check_ttl(claim.ttl_secs, policy)?;
    Ok(LeaseCall {
        kind: "renew",
        seq1: conn.reserve_seq(),
        ..acquire_shape(claim)
    })
}

/// A claim's fields as a group call's (an acquire, no event numbers yet).
fn acquire_shape(claim: &Claim) -> LeaseCall<'_> {
    LeaseCall {
        kind: "acquire",
        repo: &claim.repo,
        issue_id: &claim.issue_id,
        holder: &claim.holder,
        ttl: claim.ttl_secs,
        note: claim.note.as_deref(),
        reason: None,
        seq1: None,
        seq2: None,
    }
}

/// `release_in` as one operation of a `collab_lease_group` call.
pub fn release_group_call<'a>(
    conn: &Connection,
    repo: &'a str,
    issue_id: &'a str,
    holder: &'a str,
) -> LeaseCall<'a> {
    LeaseCall {
        kind: "release",
        repo,
        issue_id,
        holder,
        ttl: None,
        note: None,
        reason: None,
        seq1: conn.reserve_seq(),
        seq2: None,
    }
}

/// `break_in` as one operation of a `collab_lease_group` call.
pub fn break_group_call<'a>(
    conn: &Connection,
    repo: &'a str,
    issue_id: &'a str,
    by: &'a str,
    reason: &'a str,
) -> LeaseCall<'a> {
    LeaseCall {
        kind: "break",
        repo,
        issue_id,
        holder: by,
        ttl: None,
        note: None,
        reason: Some(reason),
        seq1: conn.reserve_seq(),
        seq2: None,
    }
}

/// An answer of `collab_lease_group` (`Connection::call_group`): `Err` with
/// the SQLSTATE of an operation that failed (nothing of it kept), else its
/// row in the layout of its own function's, for `acquire_done`,
/// `renew_done`, `release_done` or `break_done`.
pub fn group_answer(
    kind: &str,
    mut answer: Vec<Option<String>>,
) -> Result<Vec<Option<String>>, String> {
    if let Some(Some(state)) = answer.get(10) {
        return Err(state.clone());
    }
    answer.truncate(10);
    match kind {
        // outcome .. until, events
        "acquire" => {}
        // outcome, holder, events
        "release" => {
            let events = answer.get_mut(9).and_then(Option::take);
            answer.truncate(2);
            answer.push(events);
        }
        // outcome .. transitions, events
        _ => {
            answer.remove(8);
        }
    }
    Ok(answer)
}

fn busy(repo: &str, issue_id: &str) -> crate::sql::Error {
    crate::sql::Error::Busy(format!("{repo}#{issue_id}"))
}

/// The earlier of two optional instants.
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Take the issue's lock for the rest of the transaction before deciding
/// anything about it (`Connection::lock_issue`): on PostgreSQL, where
/// several nodes write at once, it is what makes one decision per issue at
/// a time. Busy (tried in a concurrent group, held elsewhere):
/// [`crate::sql::Error::Busy`], and the writer runs the operation again.
pub(crate) fn lock_issue(conn: &Connection, repo: &str, issue_id: &str) -> crate::sql::Result<()> {
    if conn.lock_issue(repo, issue_id)? {
        Ok(())
    } else {
        Err(busy(repo, issue_id))
    }
}

fn in_immediate_tx<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> crate::sql::Result<T>,
) -> crate::sql::Result<T> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let out = op(&tx)?;
    tx.commit()?;
    Ok(out)
}

fn check_ttl(ttl_secs: Option<i64>, policy: &Policy) -> crate::sql::Result<()> {
    let invalid = match ttl_secs {
        Some(ttl) if ttl <= 0 => InvalidTtl::NotPositive(ttl),
        Some(ttl) if ttl > policy.max_ttl => InvalidTtl::TooLong {
            ttl,
            max: policy.max_ttl,
        },
        _ => return Ok(()),
    };
    Err(crate::sql::Error::conversion(invalid.to_string()))
}

/// When a tenure acquired at `acquired_at` ends if its TTL is counted from
/// `now`: the TTL's end, capped by `max_lifetime`; None = never.
fn expiry(now: i64, acquired_at: i64, ttl_secs: Option<i64>, policy: &Policy) -> Option<i64> {
    let by_ttl = ttl_secs.map(|ttl| now.saturating_add(ttl));
    let cap = policy
        .max_lifetime
        .map(|max| acquired_at.saturating_add(max));
    earliest(by_ttl, cap)
}

/// Start a new tenure on a free issue, unless a lock delay protects it.
pub(crate) fn begin_tenure(
    conn: &Connection,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Acquire> {
    let (repo, issue_id, holder) = (&*claim.repo, &*claim.issue_id, &*claim.holder);
    // One statement bumps the token, counts a holder change and checks the
    // lock delay: when the delay still runs for someone else, the update's
    // WHERE fails, nothing changes and no row comes back. A new tenure ends
    // any lock delay (it protected the tenure before).
    let bumped: Option<(i64, i64)> = conn
        .prepare_cached(
            "INSERT INTO lease_tokens (repo, issue_id, last_token, transitions, last_holder)
             VALUES (?1, ?2, 1, 0, ?3)
             ON CONFLICT (repo, issue_id) DO UPDATE SET
                 last_token = lease_tokens.last_token + 1,
                 transitions = lease_tokens.transitions + CASE
                     WHEN lease_tokens.last_holder IS NULL
                       OR lease_tokens.last_holder = excluded.last_holder THEN 0 ELSE 1 END,
                 last_holder = excluded.last_holder,
                 locked_until = NULL
             WHERE lease_tokens.locked_until IS NULL
                OR lease_tokens.locked_until <= ?4
                OR lease_tokens.last_holder = excluded.last_holder
             RETURNING last_token, transitions",
        )?
        .query_row(crate::sql::params![repo, issue_id, holder, now], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()?;
    let Some((token, transitions)) = bumped else {
        let (holder, until) = conn
            .prepare_cached(
                "SELECT last_holder, locked_until FROM lease_tokens
                 WHERE repo = ?1 AND issue_id = ?2",
            )?
            .query_row([repo, issue_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        return Ok(Acquire::Locked { holder, until });
    };
    let lease = Lease {
        repo: repo.into(),
        issue_id: issue_id.into(),
        holder: holder.into(),
        token,
        acquired_at: now,
        expires_at: expiry(now, now, claim.ttl_secs, policy),
        renewed_at: None,
        note: claim.note.clone(),
        transitions,
    };
    conn.prepare_cached(
        "INSERT INTO leases (repo, issue_id, holder, token, acquired_at, expires_at, note)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(crate::sql::params![
        repo,
        issue_id,
        holder,
        token,
        now,
        lease.expires_at,
        lease.note
    ])?;
    record(
        conn,
        "lease.acquired",
        &lease,
        Some(holder),
        json!({
            "holder": holder,
            "token": token,
            "acquired_at": rfc3339(Some(now)),
            "expires_at": rfc3339(lease.expires_at),
            "note": lease.note,
            "transitions": transitions,
        }),
        now,
    )?;
    Ok(Acquire::Acquired { lease, fresh: true })
}

/// The holder renews (or re-acquires) its live tenure: new expiry from
/// `now`, capped by `max_lifetime`; a new note if one is given. A tenure
/// a merge queue holds stays open-ended: the TTL asked for is what it
/// gets back when its patch leaves the queue (`queue_holds`).
fn extend(
    conn: &Connection,
    mut live: Lease,
    claim: &Claim,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Lease> {
    live.expires_at = if queue_held(conn, &live, claim.ttl_secs)? {
        None
    } else {
        expiry(now, live.acquired_at, claim.ttl_secs, policy)
    };
    live.renewed_at = Some(now);
    if claim.note.is_some() {
        live.note = claim.note.clone();
    }
    conn.prepare_cached(
        "UPDATE leases SET expires_at = ?3, renewed_at = ?4, note = ?5
         WHERE repo = ?1 AND issue_id = ?2",
    )?
    .execute(crate::sql::params![
        live.repo,
        live.issue_id,
        live.expires_at,
        now,
        live.note
    ])?;
    record(
        conn,
        "lease.renewed",
        &live,
        Some(&live.holder),
        json!({
            "holder": live.holder,
            "token": live.token,
            "expires_at": rfc3339(live.expires_at),
            "note": live.note,
        }),
        now,
    )?;
    Ok(live)
}

/// Inside a renew or re-acquire of `live`: whether a merge queue holds it
/// (a `lease_queue_holds` row of its token, written by `queue_holds`), in
/// which case it stays open-ended and `ttl` (the TTL asked for) becomes
/// what it gets back when its patch leaves the queue.
fn queue_held(conn: &Connection, live: &Lease, ttl: Option<i64>) -> crate::sql::Result<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE lease_queue_holds SET ttl = ?4
             WHERE repo = ?1 AND issue_id = ?2 AND token = ?3",
        )?
        .execute(crate::sql::params![
            live.repo,
            live.issue_id,
            live.token,
            ttl
        ])?;
    Ok(changed > 0)
}

/// The queued patch holding `lease`, if any (the first queued). A pure
/// read.
pub fn queued_in(conn: &Connection, lease: &Lease) -> crate::sql::Result<Option<Queued>> {
    conn.prepare_cached(
        "SELECT patch_id, branch FROM lease_queue_holds
         WHERE repo = ?1 AND issue_id = ?2 AND token = ?3
         ORDER BY held_at, patch_id LIMIT 1",
    )?
    .query_row(
        crate::sql::params![lease.repo, lease.issue_id, lease.token],
        |r| {
            Ok(Queued {
                patch: r.get(0)?,
                branch: r.get(1)?,
            })
        },
    )
    .optional()
}

const SELECT_LEASE: &str = "SELECT l.repo, l.issue_id, l.holder, l.token, l.acquired_at,
        l.expires_at, l.renewed_at, l.note, t.transitions
    FROM leases l JOIN lease_tokens t ON t.repo = l.repo AND t.issue_id = l.issue_id";

fn row(conn: &Connection, repo: &str, issue_id: &str) -> crate::sql::Result<Option<Lease>> {
    conn.prepare_cached(&format!(
        "{SELECT_LEASE} WHERE l.repo = ?1 AND l.issue_id = ?2"
    ))?
    .query_row([repo, issue_id], lease_from_row)
    .optional()
}

/// The issue's live lease, for a write. An expired row found on the way
/// is ended here (deleted, `lease.expired` appended, lock delay set): its
/// tenure ended at `expires_at`, whoever notices first.
fn live_row(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Option<Lease>> {
    match row(conn, repo, issue_id)? {
        Some(lease) if lease.live(now) => Ok(Some(lease)),
        Some(expired) => {
            delete_row(conn, repo, issue_id)?;
            end_by_expiry(conn, &expired, policy, now)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

pub(crate) fn delete_row(conn: &Connection, repo: &str, issue_id: &str) -> crate::sql::Result<()> {
    conn.prepare_cached("DELETE FROM leases WHERE repo = ?1 AND issue_id = ?2")?
        .execute([repo, issue_id])?;
    Ok(())
}

/// After an expired row is gone: the lock delay (counted from the moment
/// the tenure ended, not from when it was noticed) and the event.
fn end_by_expiry(
    conn: &Connection,
    lease: &Lease,
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<()> {
    let ended_at = lease.expires_at.unwrap_or(now);
    let locked_until = (policy.lock_delay > 0).then(|| ended_at.saturating_add(policy.lock_delay));
    if locked_until.is_some() {
        conn.prepare_cached(
            "UPDATE lease_tokens SET locked_until = ?3 WHERE repo = ?1 AND issue_id = ?2",
        )?
        .execute(crate::sql::params![
            lease.repo,
            lease.issue_id,
            locked_until
        ])?;
    }
    let by_lifetime = policy
        .max_lifetime
        .is_some_and(|max| lease.expires_at == Some(lease.acquired_at.saturating_add(max)));
    record(
        conn,
        "lease.expired",
        lease,
        None,
        json!({
            "holder": lease.holder,
            "token": lease.token,
            "expires_at": rfc3339(lease.expires_at),
            "reason": if by_lifetime { "max_lifetime" } else { "ttl" },
            "locked_until": rfc3339(locked_until),
        }),
        now,
    )
}

/// Append a `lease.*` event for the lease's issue in the caller's
/// transaction (docs/events.md has every shape).
pub(crate) fn record(
    conn: &Connection,
    kind: &str,
    lease: &Lease,
    actor: Option<&str>,
    payload: serde_json::Value,
    now: i64,
) -> crate::sql::Result<()> {
    let event = NewEvent {
        kind,
        repo: Some(&lease.repo),
        object_id: Some(&lease.issue_id),
        actor,
        payload,
    };
    event_log::append(conn, &event, now).map(drop)
}

/// Unix seconds as RFC 3339 UTC (`2026-09-05T12:00:00Z`), as every event
/// payload writes times; `None` is `null`.
pub fn rfc3339(secs: Option<i64>) -> serde_json::Value {
    secs.and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map(|t| serde_json::Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
        .unwrap_or(serde_json::Value::Null)
}

fn lease_from_row(r: &crate::sql::Row<'_>) -> crate::sql::Result<Lease> {
    Ok(Lease {
        repo: r.get(0)?,
        issue_id: r.get(1)?,
        holder: r.get(2)?,
        token: r.get(3)?,
        acquired_at: r.get(4)?,
        expires_at: r.get(5)?,
        renewed_at: r.get(6)?,
        note: r.get(7)?,
        transitions: r.get(8)?,
    })
}

fn failure(message: String) -> crate::sql::Error {
    crate::sql::Error::failure(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &str = "team/app";
    const ISSUE: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
    const T0: i64 = 1_790_000_000;

    fn db() -> crate::testing::TestDb {
        crate::testing::db()
    }

    /// (token, expires_at) of an acquire that succeeded.
    fn acquired(token: i64, expires_at: Option<i64>) -> (i64, Option<i64>) {
        (token, expires_at)
    }

    fn tenure(outcome: Acquire) -> (i64, Option<i64>) {
        match outcome {
            Acquire::Acquired { lease, .. } => (lease.token, lease.expires_at),
            held => panic!("expected Acquired, got {held:?}"),
        }
    }

    fn token_of(outcome: Acquire) -> i64 {
        tenure(outcome).0
    }

    #[test]
    fn acquire_free_issue_returns_token_1() {
        let conn = db();
        let got = acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        assert_eq!(tenure(got), acquired(1, Some(T0 + 60)));
    }

    #[test]
    fn acquire_sets_expiry_from_ttl() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(300), T0).unwrap();
        let lease = current(&conn, REPO, ISSUE, T0).unwrap().unwrap();
        assert_eq!(lease.expires_at, Some(T0 + 300));
        assert_eq!(lease.acquired_at, T0);
        assert_eq!(lease.holder, "alice");
        assert!(current(&conn, REPO, ISSUE, T0 + 299).unwrap().is_some());
        assert!(current(&conn, REPO, ISSUE, T0 + 300).unwrap().is_none());
    }

    #[test]
    fn acquire_without_ttl_is_open_ended() {
        let conn = db();
        assert_eq!(
            tenure(acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap()),
            acquired(1, None)
        );
        let lease = current(&conn, REPO, ISSUE, T0).unwrap().unwrap();
        assert_eq!(lease.expires_at, None);
    }

    #[test]
    fn acquire_rejects_non_positive_ttl() {
        let conn = db();
        for ttl in [0, -5] {
            let err = acquire(&conn, REPO, ISSUE, "alice", Some(ttl), T0).unwrap_err();
            assert!(err.to_string().contains("positive"), "{err}");
        }
        assert_eq!(current(&conn, REPO, ISSUE, T0).unwrap(), None);
        // Nothing was written: the first real tenure still gets token 1.
        assert_eq!(
            tenure(acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap()),
            acquired(1, None)
        );
    }

    #[test]
    fn acquire_rejects_empty_holder_without_spending_a_token() {
        let conn = db();
        assert!(acquire(&conn, REPO, ISSUE, "", None, T0).is_err());
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "bob", None, T0).unwrap()),
            1
        );
    }

    #[test]
    fn second_acquire_by_other_holder_returns_held() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = acquire(&conn, REPO, ISSUE, "bob", Some(60), T0 + 10).unwrap();
        assert_eq!(
            got,
            Acquire::Held {
                holder: "alice".into(),
                expires_at: Some(T0 + 60)
            }
        );
        // The loser changed nothing.
        let lease = current(&conn, REPO, ISSUE, T0 + 10).unwrap().unwrap();
        assert_eq!((lease.holder.as_str(), lease.token), ("alice", 1));
    }

    #[test]
    fn reacquire_by_holder_is_idempotent_same_token_new_expiry() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let again = acquire(&conn, REPO, ISSUE, "alice", Some(600), T0 + 30).unwrap();
        assert_eq!(tenure(again), acquired(1, Some(T0 + 630)));
        let lease = current(&conn, REPO, ISSUE, T0 + 30).unwrap().unwrap();
        assert_eq!(lease.acquired_at, T0, "a re-acquire is not a new tenure");
        assert_eq!(lease.expires_at, Some(T0 + 630));
    }

    #[test]
    fn acquire_after_expiry_takes_over_and_bumps_token() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = acquire(&conn, REPO, ISSUE, "bob", Some(60), T0 + 60).unwrap();
        assert_eq!(tenure(got), acquired(2, Some(T0 + 120)));
        let lease = current(&conn, REPO, ISSUE, T0 + 61).unwrap().unwrap();
        assert_eq!((lease.holder.as_str(), lease.acquired_at), ("bob", T0 + 60));
    }

    #[test]
    fn renew_extends_expiry_keeps_token() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = renew(&conn, REPO, ISSUE, "alice", Some(120), T0 + 50).unwrap();
        let Renew::Renewed(lease) = got else {
            panic!("{got:?}")
        };
        assert_eq!((lease.token, lease.expires_at), (1, Some(T0 + 170)));
        assert_eq!(lease.renewed_at, Some(T0 + 50));
        assert!(current(&conn, REPO, ISSUE, T0 + 100).unwrap().is_some());
    }

    #[test]
    fn renew_by_non_holder_returns_not_holder() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = renew(&conn, REPO, ISSUE, "bob", Some(60), T0 + 1).unwrap();
        assert_eq!(
            got,
            Renew::NotHolder {
                holder: Some("alice".into())
            }
        );
        let lease = current(&conn, REPO, ISSUE, T0 + 1).unwrap().unwrap();
        assert_eq!(lease.expires_at, Some(T0 + 60));
        // Nobody holds it at all.
        assert_eq!(
            renew(&conn, REPO, "ffff", "bob", Some(60), T0).unwrap(),
            Renew::NotHolder { holder: None }
        );
    }

    #[test]
    fn renew_after_expiry_returns_not_holder() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = renew(&conn, REPO, ISSUE, "alice", Some(60), T0 + 60).unwrap();
        assert_eq!(got, Renew::NotHolder { holder: None });
        assert!(current(&conn, REPO, ISSUE, T0 + 60).unwrap().is_none());
    }

    #[test]
    fn release_by_holder_deletes() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap();
        assert_eq!(
            release(&conn, REPO, ISSUE, "alice", T0 + 1).unwrap(),
            Release::Released
        );
        assert_eq!(current(&conn, REPO, ISSUE, T0 + 1).unwrap(), None);
        assert!(list(&conn, REPO, T0 + 1).unwrap().is_empty());
    }

    #[test]
    fn release_idempotent_when_absent() {
        let conn = db();
        assert_eq!(
            release(&conn, REPO, ISSUE, "alice", T0).unwrap(),
            Release::Released
        );
        acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap();
        release(&conn, REPO, ISSUE, "alice", T0).unwrap();
        assert_eq!(
            release(&conn, REPO, ISSUE, "alice", T0).unwrap(),
            Release::Released
        );
    }

    #[test]
    fn release_by_non_holder_refused() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        assert_eq!(
            release(&conn, REPO, ISSUE, "bob", T0 + 1).unwrap(),
            Release::NotHolder {
                holder: "alice".into()
            }
        );
        assert!(current(&conn, REPO, ISSUE, T0 + 1).unwrap().is_some());
        // Once alice's lease has expired, anyone may clear it.
        assert_eq!(
            release(&conn, REPO, ISSUE, "bob", T0 + 60).unwrap(),
            Release::Released
        );
    }

    #[test]
    fn list_shows_only_live_leases() {
        let conn = db();
        acquire(&conn, REPO, "01", "alice", Some(10), T0).unwrap();
        acquire(&conn, REPO, "02", "bob", None, T0 + 1).unwrap();
        acquire(&conn, REPO, "03", "carol", Some(100), T0 + 2).unwrap();
        acquire(&conn, "other/repo", "04", "dave", None, T0).unwrap();
        let live = list(&conn, REPO, T0 + 10).unwrap();
        let ids: Vec<_> = live.iter().map(|l| l.issue_id.as_str()).collect();
        assert_eq!(
            ids,
            ["02", "03"],
            "oldest first, expired and other repos left out"
        );
        assert_eq!(live[0].holder, "bob");
        // A read changes nothing; the expiry pass reaps the expired row.
        let rows = |conn: &Connection| -> i64 {
            conn.query_row("SELECT count(*) FROM leases WHERE repo = ?1", [REPO], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(rows(&conn), 3);
        expire_due_in(&conn, &Policy::default(), T0 + 10).unwrap();
        assert_eq!(rows(&conn), 2);
    }

    #[test]
    fn current_none_after_expiry() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(5), T0).unwrap();
        assert_eq!(current(&conn, REPO, ISSUE, T0 + 5).unwrap(), None);
        assert_eq!(current(&conn, REPO, "nope", T0).unwrap(), None);
    }

    #[test]
    fn open_ended_lease_never_expires() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap();
        let far = i64::MAX - 1;
        assert!(current(&conn, REPO, ISSUE, far).unwrap().is_some());
        assert!(matches!(
            acquire(&conn, REPO, ISSUE, "bob", Some(60), far).unwrap(),
            Acquire::Held { .. }
        ));
        assert_eq!(list(&conn, REPO, far).unwrap().len(), 1);
    }

    #[test]
    fn tenure_token_monotonic_across_holders() {
        let conn = db();
        let a1 = acquire(&conn, REPO, ISSUE, "a", Some(10), T0).unwrap();
        let b = acquire(&conn, REPO, ISSUE, "b", Some(10), T0 + 10).unwrap();
        let a2 = acquire(&conn, REPO, ISSUE, "a", Some(10), T0 + 20).unwrap();
        assert_eq!(
            [token_of(a1), token_of(b), token_of(a2)],
            [1, 2, 3],
            "a -> expire -> b -> expire -> a"
        );
    }

    #[test]
    fn token_grows_across_release() {
        let conn = db();
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "a", None, T0).unwrap()),
            1
        );
        release(&conn, REPO, ISSUE, "a", T0).unwrap();
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "b", None, T0).unwrap()),
            2
        );
        release(&conn, REPO, ISSUE, "b", T0).unwrap();
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "b", None, T0).unwrap()),
            3
        );
    }

    #[test]
    fn token_grows_across_reaping() {
        let conn = db();
        acquire(&conn, REPO, "01", "a", Some(10), T0).unwrap();
        acquire(&conn, REPO, "02", "a", Some(10), T0).unwrap();
        // An expiry pass reaps 01 and 02; reads never reset anything either.
        assert!(list(&conn, REPO, T0 + 10).unwrap().is_empty());
        assert_eq!(current(&conn, REPO, "01", T0 + 10).unwrap(), None);
        expire_due_in(&conn, &Policy::default(), T0 + 10).unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM leases", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "expired rows were reaped");
        assert_eq!(
            token_of(acquire(&conn, REPO, "01", "b", None, T0 + 11).unwrap()),
            2
        );
        // A takeover ends the expired tenure itself.
        acquire(&conn, REPO, "03", "a", Some(10), T0).unwrap();
        assert_eq!(current(&conn, REPO, "03", T0 + 10).unwrap(), None);
        assert_eq!(
            token_of(acquire(&conn, REPO, "03", "b", None, T0 + 10).unwrap()),
            2
        );
    }

    #[test]
    fn tokens_are_per_issue_and_per_repo() {
        let conn = db();
        assert_eq!(
            token_of(acquire(&conn, REPO, "01", "a", None, T0).unwrap()),
            1
        );
        assert_eq!(
            token_of(acquire(&conn, REPO, "02", "a", None, T0).unwrap()),
            1
        );
        assert_eq!(
            token_of(acquire(&conn, "x/y", "01", "a", None, T0).unwrap()),
            1
        );
    }

    #[test]
    fn reopening_the_file_keeps_leases_and_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        {
            let conn = open(&path).unwrap();
            acquire(&conn, REPO, ISSUE, "a", None, T0).unwrap();
            release(&conn, REPO, ISSUE, "a", T0).unwrap();
            acquire(&conn, REPO, ISSUE, "b", Some(100), T0).unwrap();
        }
        let conn = open(&path).unwrap();
        let lease = current(&conn, REPO, ISSUE, T0 + 1).unwrap().unwrap();
        assert_eq!((lease.holder.as_str(), lease.token), ("b", 2));
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "c", None, T0 + 100).unwrap()),
            3
        );
        let mode: String = conn
            .as_sqlite()
            .unwrap()
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        let sync: i64 = conn
            .as_sqlite()
            .unwrap()
            .pragma_query_value(None, "synchronous", |r| r.get(0))
            .unwrap();
        assert_eq!(
            (mode.as_str(), sync),
            ("wal", 2),
            "WAL with synchronous=FULL"
        );
    }

    #[test]
    fn open_refuses_a_newer_schema() {
        use super::super::migrations::SCHEMA_VERSION;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        drop(open(&path).unwrap());
        rusqlite::Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = open(&path).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    /// (type, object, actor, payload) of every event so far.
    fn events_of(conn: &Connection) -> Vec<(String, String, Option<String>, serde_json::Value)> {
        event_log::after(conn, 0, 1000)
            .unwrap()
            .into_iter()
            .map(|e| (e.kind, e.object_id.unwrap(), e.actor, e.payload))
            .collect()
    }

    fn kinds(conn: &Connection) -> Vec<String> {
        events_of(conn).into_iter().map(|e| e.0).collect()
    }

    #[test]
    fn every_tenure_change_appends_its_event() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        // Idempotent re-acquire moves the expiry: a renewal.
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0 + 1).unwrap();
        renew(&conn, REPO, ISSUE, "alice", Some(60), T0 + 2).unwrap();
        // Refusals change nothing and record nothing.
        acquire(&conn, REPO, ISSUE, "bob", Some(60), T0 + 3).unwrap();
        renew(&conn, REPO, ISSUE, "bob", Some(60), T0 + 3).unwrap();
        release(&conn, REPO, ISSUE, "bob", T0 + 3).unwrap();
        release(&conn, REPO, ISSUE, "alice", T0 + 4).unwrap();
        // Releasing nothing is idempotent and silent.
        release(&conn, REPO, ISSUE, "alice", T0 + 5).unwrap();
        assert_eq!(
            kinds(&conn),
            [
                "lease.acquired",
                "lease.renewed",
                "lease.renewed",
                "lease.released"
            ]
        );
        let all = events_of(&conn);
        assert_eq!(
            all[0],
            (
                "lease.acquired".into(),
                ISSUE.into(),
                Some("alice".into()),
                json!({"holder": "alice", "token": 1, "acquired_at": rfc3339(Some(T0)),
                       "expires_at": rfc3339(Some(T0 + 60)), "note": null, "transitions": 0})
            )
        );
        assert_eq!(
            all[2].3,
            json!({"holder": "alice", "token": 1, "expires_at": rfc3339(Some(T0 + 62)), "note": null})
        );
        assert_eq!(all[3].3, json!({"holder": "alice", "token": 1}));
    }

    #[test]
    fn an_expiry_is_recorded_once_by_whoever_notices_it() {
        let conn = db();
        acquire(&conn, REPO, "01", "alice", Some(10), T0).unwrap();
        acquire(&conn, REPO, "02", "alice", Some(10), T0).unwrap();
        acquire(&conn, REPO, "03", "alice", Some(10), T0).unwrap();
        // A takeover ends 01's tenure first.
        acquire(&conn, REPO, "01", "bob", None, T0 + 10).unwrap();
        // A release of 02 by anyone notices it; the expiry pass gets 03;
        // reads and a second pass record nothing.
        assert_eq!(
            release(&conn, REPO, "02", "carol", T0 + 10).unwrap(),
            Release::Released
        );
        assert_eq!(current(&conn, REPO, "03", T0 + 10).unwrap(), None);
        assert_eq!(list(&conn, REPO, T0 + 11).unwrap().len(), 1);
        let pass = expire_due_in(&conn, &Policy::default(), T0 + 11).unwrap();
        assert_eq!(pass.ended, [(REPO.to_string(), "03".to_string())]);
        assert_eq!(pass.next_due, None, "bob's lease is open-ended");
        let again = expire_due_in(&conn, &Policy::default(), T0 + 12).unwrap();
        assert!(again.ended.is_empty());
        let all = events_of(&conn);
        let tail: Vec<_> = all[3..]
            .iter()
            .map(|(kind, issue, actor, _)| (kind.as_str(), issue.as_str(), actor.as_deref()))
            .collect();
        assert_eq!(
            tail,
            [
                ("lease.expired", "01", None),
                ("lease.acquired", "01", Some("bob")),
                ("lease.expired", "02", None),
                ("lease.expired", "03", None),
            ]
        );
        assert_eq!(
            all[3].3,
            json!({"holder": "alice", "token": 1, "expires_at": rfc3339(Some(T0 + 10)),
                   "reason": "ttl", "locked_until": null})
        );
    }

    fn claim(holder: &str, ttl_secs: Option<i64>) -> Claim {
        Claim::new(REPO, ISSUE, holder, ttl_secs)
    }

    fn policy(max_lifetime: Option<i64>, lock_delay: i64) -> Policy {
        Policy {
            max_lifetime,
            lock_delay,
            ..Policy::default()
        }
    }

    #[test]
    fn max_lifetime_caps_every_renewal_and_then_the_tenure_ends() {
        let conn = db();
        let p = policy(Some(100), 0);
        let got = acquire_in(&conn, &claim("alice", Some(60)), &p, T0).unwrap();
        assert_eq!(tenure(got), (1, Some(T0 + 60)));
        let Renew::Renewed(lease) =
            renew_in(&conn, &claim("alice", Some(60)), &p, T0 + 50).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            lease.expires_at,
            Some(T0 + 100),
            "capped at acquired_at + 100"
        );
        // An open-ended claim is capped too.
        let got = acquire_in(&conn, &Claim::new(REPO, "02", "bob", None), &p, T0).unwrap();
        assert_eq!(tenure(got), (1, Some(T0 + 100)));
        // Renewing at the cap cannot keep it: at T0+100 it has ended.
        let renewed = renew_in(&conn, &claim("alice", Some(60)), &p, T0 + 100).unwrap();
        assert_eq!(renewed, Renew::NotHolder { holder: None });
        let events = events_of(&conn);
        let expired = events.iter().find(|e| e.0 == "lease.expired").unwrap();
        assert_eq!(expired.3["reason"], "max_lifetime");
        // A fresh tenure starts a fresh lifetime.
        let got = acquire_in(&conn, &claim("alice", Some(60)), &p, T0 + 100).unwrap();
        assert_eq!(tenure(got), (2, Some(T0 + 160)));
    }

    #[test]
    fn lock_delay_follows_an_expiry_only_and_spares_the_last_holder() {
        let conn = db();
        let p = policy(None, 30);
        acquire_in(&conn, &claim("alice", Some(10)), &p, T0).unwrap();
        // Noticed late (T0+15), the delay still counts from the expiry (T0+10).
        let got = acquire_in(&conn, &claim("bob", Some(10)), &p, T0 + 15).unwrap();
        assert_eq!(
            got,
            Acquire::Locked {
                holder: "alice".into(),
                until: T0 + 40
            }
        );
        let status = status_in(&conn, REPO, ISSUE, T0 + 15).unwrap();
        assert_eq!(status.locked, Some(("alice".into(), T0 + 40)));
        assert_eq!((status.last_token, status.live), (1, None));
        // The refused acquire spent no token.
        let got = acquire_in(&conn, &claim("bob", Some(10)), &p, T0 + 40).unwrap();
        assert_eq!(tenure(got), (2, Some(T0 + 50)));
        // The stalled holder itself may come back during its delay.
        let conn = db();
        acquire_in(&conn, &claim("alice", Some(10)), &p, T0).unwrap();
        expire_due_in(&conn, &p, T0 + 10).unwrap();
        let got = acquire_in(&conn, &claim("alice", Some(10)), &p, T0 + 11).unwrap();
        assert_eq!(tenure(got), (2, Some(T0 + 21)));
        // Release and break impose no delay.
        release_in(&conn, REPO, ISSUE, "alice", &p, T0 + 12).unwrap();
        let got = acquire_in(&conn, &claim("bob", None), &p, T0 + 12).unwrap();
        assert_eq!(tenure(got).0, 3);
        let broken = break_in(&conn, REPO, ISSUE, "admin", "stuck", &p, T0 + 13).unwrap();
        assert!(matches!(broken, Break::Broken(ref l) if l.holder == "bob" && l.token == 3));
        let got = acquire_in(&conn, &claim("carol", None), &p, T0 + 13).unwrap();
        assert_eq!(tenure(got).0, 4);
    }

    #[test]
    fn the_expiry_pass_sets_the_delay_and_reports_what_is_due_next() {
        let conn = db();
        let p = policy(None, 30);
        acquire_in(&conn, &Claim::new(REPO, "01", "a", Some(10)), &p, T0).unwrap();
        acquire_in(&conn, &Claim::new(REPO, "02", "a", Some(50)), &p, T0).unwrap();
        let pass = expire_due_in(&conn, &p, T0 + 9).unwrap();
        assert_eq!((pass.ended.len(), pass.next_due), (0, Some(T0 + 10)));
        let pass = expire_due_in(&conn, &p, T0 + 10).unwrap();
        assert_eq!(pass.ended.len(), 1);
        assert_eq!(pass.next_due, Some(T0 + 40), "01's lock delay ends first");
        let pass = expire_due_in(&conn, &p, T0 + 40).unwrap();
        assert_eq!(pass.next_due, Some(T0 + 50));
        let expired = events_of(&conn);
        assert_eq!(
            expired.last().unwrap().3["locked_until"],
            rfc3339(Some(T0 + 40))
        );
    }

    #[test]
    fn break_ends_any_tenure_and_records_who_and_why() {
        let conn = db();
        let p = Policy::default();
        assert_eq!(
            break_in(&conn, REPO, ISSUE, "admin", "why", &p, T0).unwrap(),
            Break::NotHeld
        );
        acquire_in(&conn, &claim("alice", None), &p, T0).unwrap();
        break_in(&conn, REPO, ISSUE, "admin", "agent is gone", &p, T0 + 1).unwrap();
        assert_eq!(current(&conn, REPO, ISSUE, T0 + 1).unwrap(), None);
        let last = events_of(&conn).pop().unwrap();
        assert_eq!(
            last,
            (
                "lease.broken".into(),
                ISSUE.into(),
                Some("admin".into()),
                json!({"holder": "alice", "token": 1, "reason": "agent is gone", "by": "admin"})
            )
        );
    }

    #[test]
    fn transitions_count_holder_changes_and_notes_stay_with_the_tenure() {
        let conn = db();
        let p = Policy::default();
        let mut with_note = claim("alice", None);
        with_note.note = Some("fixing the parser".into());
        acquire_in(&conn, &with_note, &p, T0).unwrap();
        release_in(&conn, REPO, ISSUE, "alice", &p, T0).unwrap();
        acquire_in(&conn, &claim("alice", None), &p, T0).unwrap();
        let lease = current(&conn, REPO, ISSUE, T0).unwrap().unwrap();
        assert_eq!(
            (lease.transitions, lease.note),
            (0, None),
            "same holder again"
        );
        release_in(&conn, REPO, ISSUE, "alice", &p, T0).unwrap();
        acquire_in(&conn, &with_note.clone(), &p, T0).unwrap();
        release_in(&conn, REPO, ISSUE, "alice", &p, T0).unwrap();
        acquire_in(&conn, &claim("bob", Some(5)), &p, T0 + 1).unwrap();
        acquire_in(&conn, &claim("carol", None), &p, T0 + 6).unwrap();
        let lease = current(&conn, REPO, ISSUE, T0 + 6).unwrap().unwrap();
        assert_eq!(
            (lease.holder.as_str(), lease.token, lease.transitions),
            ("carol", 5, 2)
        );
        // A re-acquire with a note replaces it; a renew without keeps it.
        let mut note = claim("carol", Some(60));
        note.note = Some("half done".into());
        acquire_in(&conn, &note, &p, T0 + 7).unwrap();
        renew_in(&conn, &claim("carol", Some(60)), &p, T0 + 8).unwrap();
        let lease = &list(&conn, REPO, T0 + 8).unwrap()[0];
        assert_eq!(lease.note.as_deref(), Some("half done"));
        assert_eq!(
            (lease.acquired_at, lease.renewed_at),
            (T0 + 6, Some(T0 + 8))
        );
        let status = status_in(&conn, REPO, ISSUE, T0 + 8).unwrap();
        assert_eq!((status.last_token, status.transitions), (5, 2));
    }

    #[test]
    fn ttl_above_max_ttl_is_refused() {
        let conn = db();
        let p = Policy {
            max_ttl: 100,
            ..Policy::default()
        };
        let err = acquire_in(&conn, &claim("a", Some(101)), &p, T0).unwrap_err();
        assert!(err.to_string().contains("max_ttl"), "{err}");
        assert!(acquire_in(&conn, &claim("a", Some(100)), &p, T0).is_ok());
        assert!(renew_in(&conn, &claim("a", Some(101)), &p, T0).is_err());
    }

    #[test]
    fn a_version_1_database_keeps_its_leases_through_the_upgrade() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE leases (repo TEXT NOT NULL, issue_id TEXT NOT NULL,
                 holder TEXT NOT NULL, token INTEGER NOT NULL, acquired_at INTEGER NOT NULL,
                 expires_at INTEGER, PRIMARY KEY (repo, issue_id)) WITHOUT ROWID;
             CREATE TABLE lease_tokens (repo TEXT NOT NULL, issue_id TEXT NOT NULL,
                 last_token INTEGER NOT NULL, PRIMARY KEY (repo, issue_id)) WITHOUT ROWID;
             INSERT INTO leases VALUES ('team/app', '01', 'alice', 3, 1, NULL);
             INSERT INTO lease_tokens VALUES ('team/app', '01', 3);
             PRAGMA user_version = 1;",
        )
        .unwrap();
        init_schema(&conn).unwrap();
        let lease = current(&conn, REPO, "01", T0).unwrap().unwrap();
        assert_eq!(
            (lease.holder.as_str(), lease.token, lease.transitions),
            ("alice", 3, 0)
        );
        release(&conn, REPO, "01", "alice", T0).unwrap();
        let got = acquire(&conn, REPO, "01", "bob", None, T0).unwrap();
        assert_eq!(tenure(got).0, 4);
    }

    #[test]
    fn a_failed_operation_leaves_no_event() {
        let conn = db();
        assert!(acquire(&conn, REPO, ISSUE, "", None, T0).is_err());
        assert!(acquire(&conn, REPO, ISSUE, "a", Some(0), T0).is_err());
        assert!(kinds(&conn).is_empty());
    }

    #[test]
    fn ops_inside_an_outer_transaction_share_it() {
        let conn = db();
        let tx = conn.transaction().unwrap();
        let p = Policy::default();
        acquire_in(&tx, &claim("a", None), &p, T0).unwrap();
        assert_eq!(
            acquire_in(&tx, &claim("b", None), &p, T0).unwrap(),
            Acquire::Held {
                holder: "a".into(),
                expires_at: None
            }
        );
        drop(tx); // rolls back
        assert_eq!(current(&conn, REPO, ISSUE, T0).unwrap(), None);
        assert_eq!(
            token_of(acquire(&conn, REPO, ISSUE, "b", None, T0).unwrap()),
            1
        );
    }

    /// One step of an equivalence case.
    #[derive(Debug, Clone)]
    enum Step {
        Acquire {
            issue: &'static str,
            holder: &'static str,
            ttl: Option<i64>,
            note: Option<&'static str>,
            at: i64,
        },
        Release {
            issue: &'static str,
            holder: &'static str,
            at: i64,
        },
        Renew {
            holder: &'static str,
            ttl: Option<i64>,
            note: Option<&'static str>,
            at: i64,
        },
        Break {
            by: &'static str,
            reason: &'static str,
            at: i64,
        },
    }

    fn acq(holder: &'static str, ttl: Option<i64>, at: i64) -> Step {
        Step::Acquire {
            issue: ISSUE,
            holder,
            ttl,
            note: None,
            at,
        }
    }

    fn rel(holder: &'static str, at: i64) -> Step {
        Step::Release {
            issue: ISSUE,
            holder,
            at,
        }
    }

    /// Run `steps` on `conn`, each in a transaction of its own begun as the
    /// writer begins a lease group (with the writer's deferred savepoint),
    /// by the function or by the statements; each step's outcome as text.
    /// How `run_steps` sends each operation.
    #[derive(Clone, Copy, PartialEq)]
    enum Path {
        /// The statements one by one.
        Statements,
        /// One call of the operation's function (a simple query).
        Function,
        /// One call of `collab_lease_group` (the writer's lease groups'
        /// prepared statement), the operation alone in it.
        Group,
    }

    /// One step through `collab_lease_group`, its outcome as the `*_in`
    /// functions give it.
    fn by_group(tx: &Connection, repo: &str, policy: &Policy, step: &Step) -> String {
        let (claim, call) = match step {
            Step::Acquire {
                issue,
                holder,
                ttl,
                note,
                ..
            } => {
                let mut claim = Claim::new(repo, issue, holder, *ttl);
                claim.note = note.map(str::to_string);
                (claim, "acquire")
            }
            Step::Renew {
                holder, ttl, note, ..
            } => {
                let mut claim = Claim::new(repo, ISSUE, holder, *ttl);
                claim.note = note.map(str::to_string);
                (claim, "renew")
            }
            Step::Release { issue, holder, .. } => {
                (Claim::new(repo, issue, holder, None), "release")
            }
            Step::Break { by, .. } => (Claim::new(repo, ISSUE, by, None), "break"),
        };
        let at = match step {
            Step::Acquire { at, .. }
            | Step::Renew { at, .. }
            | Step::Release { at, .. }
            | Step::Break { at, .. } => *at,
        };
        let made = match (call, step) {
            ("acquire", _) => acquire_group_call(tx, &claim, policy),
            ("renew", _) => renew_group_call(tx, &claim, policy),
            ("release", _) => Ok(release_group_call(tx, repo, &claim.issue_id, &claim.holder)),
            (_, Step::Break { reason, .. }) => Ok(break_group_call(
                tx,
                repo,
                &claim.issue_id,
                &claim.holder,
                reason,
            )),
            _ => unreachable!(),
        };
        let made = match made {
            Ok(made) => made,
            Err(e) => return format!("{:?}", Err::<(), _>(e)),
        };
        let mut answers = tx
            .call_group(&[made], policy.max_lifetime, policy.lock_delay, at)
            .unwrap();
        let row = match group_answer(call, answers.remove(0)) {
            Ok(row) => row,
            Err(state) => return format!("Err({state})"),
        };
        let (repo, issue) = (claim.repo.as_str(), claim.issue_id.as_str());
        match call {
            "acquire" => format!("{:?}", acquire_done(tx, &claim, row)),
            "renew" => format!("{:?}", renew_done(tx, &claim, row)),
            "release" => format!("{:?}", release_done(tx, repo, issue, row)),
            _ => format!("{:?}", break_done(tx, repo, issue, row)),
        }
    }

    fn run_steps(
        conn: &Connection,
        path: Path,
        repo: &str,
        policy: &Policy,
        steps: &[Step],
    ) -> Vec<String> {
        let statements = path == Path::Statements;
        conn.set_lease_statements(statements);
        assert_eq!(conn.lease_functions(), !statements);
        let mut outcomes = Vec::new();
        for step in steps {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Concurrent)
                .unwrap();
            let outcome = if path == Path::Group {
                by_group(&tx, repo, policy, step)
            } else {
                tx.defer_savepoint(false);
                by_call(&tx, repo, policy, step)
            };
            if outcome.starts_with("Ok") {
                tx.commit().unwrap();
            } else {
                // The error's text names the path's statements: the outcome
                // compared is that it failed.
                drop(tx);
                outcomes.push("Err".to_string());
                continue;
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    /// One step through `acquire_in` (`release_in`, …).
    fn by_call(tx: &Connection, repo: &str, policy: &Policy, step: &Step) -> String {
        match step {
            Step::Acquire {
                issue,
                holder,
                ttl,
                note,
                at,
            } => {
                let mut claim = Claim::new(repo, issue, holder, *ttl);
                claim.note = note.map(str::to_string);
                format!("{:?}", acquire_in(tx, &claim, policy, *at))
            }
            Step::Release { issue, holder, at } => {
                format!("{:?}", release_in(tx, repo, issue, holder, policy, *at))
            }
            Step::Renew {
                holder,
                ttl,
                note,
                at,
            } => {
                let mut claim = Claim::new(repo, ISSUE, holder, *ttl);
                claim.note = note.map(str::to_string);
                format!("{:?}", renew_in(tx, &claim, policy, *at))
            }
            Step::Break { by, reason, at } => {
                format!("{:?}", break_in(tx, repo, ISSUE, by, reason, policy, *at))
            }
        }
    }

    /// Every row a lease operation writes, as text: leases, lease_tokens,
    /// and the events in order (the repository id only as present or not:
    /// it is random).
    fn dump(conn: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        let mut query = |sql: &str, columns: usize| {
            let mut stmt = conn.prepare(sql).unwrap();
            let rows = stmt
                .query_map([], |r| {
                    (0..columns)
                        .map(|i| r.get::<_, crate::sql::Value>(i).map(|v| format!("{v:?}")))
                        .collect::<crate::sql::Result<Vec<_>>>()
                })
                .unwrap();
            for row in rows {
                out.push(row.unwrap().join("|"));
            }
        };
        query(
            "SELECT repo, issue_id, holder, token, acquired_at, expires_at, renewed_at, note
             FROM leases ORDER BY repo, issue_id",
            8,
        );
        query(
            "SELECT repo, issue_id, last_token, transitions, last_holder, locked_until
             FROM lease_tokens ORDER BY repo, issue_id",
            6,
        );
        query(
            "SELECT seq, at, type, repo, object_id, actor, payload,
                    CASE WHEN repo_id IS NULL THEN 0 ELSE 1 END
             FROM events ORDER BY seq",
            8,
        );
        let head = event_log::head(conn).unwrap();
        out.push(format!("head {head}"));
        out
    }

    /// The function and the statements decide the same: for each case, a
    /// fresh database each, the same steps at the same instants, the same
    /// outcomes, rows and events (type, payload text, order).
    #[test]
    fn lease_functions_decide_as_the_statements_do() {
        if !crate::sql::test_database::wanted() {
            return; // the functions are PostgreSQL's
        }
        const OTHER: &str = "0000000000000000000000000000000000000002";
        const THIRD: &str = "0000000000000000000000000000000000000003";
        let none = policy(None, 0);
        let cases: Vec<(&str, Policy, Vec<Step>)> = vec![
            ("free issue", none, vec![acq("alice", Some(60), T0)]),
            (
                "same holder again, a note, then none (kept)",
                none,
                vec![
                    acq("alice", Some(60), T0),
                    Step::Acquire {
                        issue: ISSUE,
                        holder: "alice",
                        ttl: Some(600),
                        note: Some("half \"done\" \\ \n\t\u{1} \u{7f} é 😀 </script>"),
                        at: T0 + 30,
                    },
                    acq("alice", None, T0 + 40),
                ],
            ),
            (
                "other holder live",
                none,
                vec![acq("alice", Some(60), T0), acq("bob", Some(60), T0 + 10)],
            ),
            (
                "expired tenure taken over",
                none,
                vec![
                    acq("alice", Some(60), T0),
                    acq("bob", Some(60), T0 + 60),
                    acq("carol", None, T0 + 120),
                ],
            ),
            (
                "lock delay: another holder waits, then takes it",
                policy(None, 30),
                vec![
                    acq("alice", Some(10), T0),
                    acq("bob", Some(10), T0 + 15),
                    acq("bob", Some(10), T0 + 39),
                    acq("bob", Some(10), T0 + 40),
                ],
            ),
            (
                "lock delay: the last holder comes back",
                policy(None, 30),
                vec![acq("alice", Some(10), T0), acq("alice", Some(10), T0 + 11)],
            ),
            (
                "max lifetime caps a re-acquire and ends the tenure",
                policy(Some(100), 0),
                vec![
                    acq("alice", Some(60), T0),
                    acq("alice", Some(60), T0 + 50),
                    acq("bob", None, T0 + 100),
                    acq("bob", Some(1000), T0 + 150),
                ],
            ),
            (
                "max lifetime and lock delay",
                policy(Some(100), 30),
                vec![
                    acq("alice", None, T0),
                    rel("bob", T0 + 100),
                    acq("bob", None, T0 + 101),
                ],
            ),
            (
                "extremes: a lifetime cap that saturates, a far expiry",
                policy(Some(i64::MAX), i64::MAX),
                vec![
                    acq("alice", None, T0),
                    acq("alice", Some(DEFAULT_MAX_TTL), T0 + 1),
                ],
            ),
            (
                "a lock delay that saturates",
                policy(None, i64::MAX),
                vec![acq("alice", Some(10), T0), acq("bob", Some(10), T0 + 20)],
            ),
            (
                "release by the holder, then nothing",
                none,
                vec![
                    acq("alice", Some(60), T0),
                    rel("alice", T0 + 1),
                    rel("alice", T0 + 2),
                    acq("bob", None, T0 + 3),
                ],
            ),
            (
                "release by a non-holder",
                none,
                vec![acq("alice", None, T0), rel("bob", T0 + 1)],
            ),
            (
                "release with nothing ever leased",
                none,
                vec![rel("alice", T0)],
            ),
            (
                "renew: by the holder (a note, then none), by another, of nothing",
                policy(Some(100), 0),
                vec![
                    Step::Renew {
                        holder: "alice",
                        ttl: Some(10),
                        note: None,
                        at: T0,
                    },
                    acq("alice", Some(10), T0),
                    Step::Renew {
                        holder: "alice",
                        ttl: Some(60),
                        note: Some("renewed \"note\""),
                        at: T0 + 5,
                    },
                    Step::Renew {
                        holder: "alice",
                        ttl: Some(60),
                        note: None,
                        at: T0 + 50,
                    },
                    Step::Renew {
                        holder: "bob",
                        ttl: Some(60),
                        note: None,
                        at: T0 + 60,
                    },
                    Step::Renew {
                        holder: "alice",
                        ttl: Some(60),
                        note: None,
                        at: T0 + 100,
                    },
                    Step::Renew {
                        holder: "alice",
                        ttl: Some(0),
                        note: None,
                        at: T0 + 101,
                    },
                ],
            ),
            (
                "break: nothing, a live tenure, an expired one",
                policy(None, 30),
                vec![
                    Step::Break {
                        by: "admin",
                        reason: "why",
                        at: T0,
                    },
                    Step::Acquire {
                        issue: ISSUE,
                        holder: "alice",
                        ttl: None,
                        note: Some("stuck"),
                        at: T0,
                    },
                    Step::Break {
                        by: "admin",
                        reason: "agent is \"gone\"",
                        at: T0 + 1,
                    },
                    acq("bob", Some(10), T0 + 2),
                    Step::Break {
                        by: "root",
                        reason: "late",
                        at: T0 + 12,
                    },
                    acq("carol", None, T0 + 13),
                ],
            ),
            (
                "release finds an expired tenure",
                policy(None, 30),
                vec![
                    acq("alice", Some(10), T0),
                    rel("carol", T0 + 10),
                    acq("carol", None, T0 + 20),
                ],
            ),
            (
                "two issues, an empty holder refused",
                none,
                vec![
                    acq("alice", Some(5), T0),
                    Step::Acquire {
                        issue: OTHER,
                        holder: "bob",
                        ttl: Some(5),
                        note: Some("n"),
                        at: T0,
                    },
                    Step::Acquire {
                        issue: THIRD,
                        holder: "",
                        ttl: None,
                        note: None,
                        at: T0 + 1,
                    },
                    Step::Release {
                        issue: OTHER,
                        holder: "bob",
                        at: T0 + 2,
                    },
                    acq("bob", None, T0 + 5),
                ],
            ),
        ];
        // Each case in a repository of its own, on the same two databases.
        let by_statements = db();
        let by_function = db();
        let by_group = db();
        for (i, (name, policy, steps)) in cases.iter().enumerate() {
            let repo = format!("team/case{i}.git");
            let old = run_steps(&by_statements, Path::Statements, &repo, policy, steps);
            let new = run_steps(&by_function, Path::Function, &repo, policy, steps);
            let grouped = run_steps(&by_group, Path::Group, &repo, policy, steps);
            assert_eq!(new, old, "{name}: outcomes");
            assert_eq!(grouped, old, "{name}: outcomes in a group call");
            assert_eq!(dump(&by_function), dump(&by_statements), "{name}: rows");
            assert_eq!(
                dump(&by_group),
                dump(&by_statements),
                "{name}: rows of group calls"
            );
        }
        let rows = dump(&by_statements);
        assert!(rows.len() > 60, "{rows:#?}");
    }

    /// The function's times are `rfc3339`'s, to the character.
    #[test]
    fn the_functions_write_times_as_rfc3339_does() {
        let conn = db();
        if !conn.is_postgres() {
            return;
        }
        let day = 86_400;
        for secs in [
            0,
            -1,
            1,
            T0,
            day - 1,
            -day,
            -day - 1,
            951_782_400, // 2000-02-29
            4_107_542_399,
            253_402_300_799, // 9999-12-31T23:59:59
            253_402_300_800, // +10000
            -62_135_596_800, // 0001-01-01
            -62_167_219_200, // 0000-01-01
            -62_167_219_201, // -0001
            8_210_266_876_799,
            8_210_266_876_800,
            -8_334_601_228_800,
            -8_334_601_228_801,
            i64::MAX,
            i64::MIN,
        ] {
            let got: String = conn
                .query_row("SELECT collab_json_time(?1)", [secs], |r| r.get(0))
                .unwrap();
            assert_eq!(got, rfc3339(Some(secs)).to_string(), "{secs}");
        }
        let got: String = conn
            .query_row("SELECT collab_json_time(NULL)", [], |r| r.get(0))
            .unwrap();
        assert_eq!(got, "null");
    }
}
