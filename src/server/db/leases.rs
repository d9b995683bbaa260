//! Work leases on issues: the one collaboration primitive git cannot
//! express (an atomic claim with a TTL). This module owns the SQLite schema
//! of `collab.db` and every lease decision: who wins an acquire, what is
//! idempotent, when a lease has expired, and which fencing token a tenure
//! gets. It never reads the clock (`now`, unix seconds, is passed in) and
//! knows nothing of SSH, authorization or threads; `lease_service` runs these
//! functions on the server's single writer thread.
//!
//! Each public operation runs in ONE `BEGIN IMMEDIATE` transaction. The
//! `*_in` variants hold the same read-decide-write logic without opening a
//! transaction, so a caller that already has one (the group-commit writer,
//! under a SAVEPOINT per operation) can run them.
//!
//! Fencing tokens: the token of `(repo, issue_id)` only ever grows. The
//! high-water mark lives in `lease_tokens`, a table nothing deletes from, so
//! releasing a lease or reaping an expired one never lets a later tenure reuse
//! a token.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde_json::json;

use super::events::{self, NewEvent};

/// How long a connection waits for another connection's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A live or expired lease row.
#[derive(Debug, Clone, PartialEq)]
pub struct Lease {
    pub repo: String,
    pub issue_id: String,
    pub holder: String,
    pub token: i64,
    pub acquired_at: i64,
    /// None = open-ended (human assignment).
    pub expires_at: Option<i64>,
}

impl Lease {
    pub fn live(&self, now: i64) -> bool {
        self.expires_at.map(|e| e > now).unwrap_or(true)
    }
}

#[derive(Debug, PartialEq)]
pub enum Acquire {
    /// Caller now holds the lease (fresh tenure, or idempotent re-acquire).
    Acquired { token: i64, expires_at: Option<i64> },
    /// A different holder has a live lease.
    Held {
        holder: String,
        expires_at: Option<i64>,
    },
}

#[derive(Debug, PartialEq)]
pub enum Renew {
    Renewed {
        token: i64,
        expires_at: Option<i64>,
    },
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

/// A TTL that cannot become an expiry time.
#[derive(Debug, thiserror::Error)]
#[error("lease ttl must be a positive number of seconds, got {0}")]
pub struct InvalidTtl(pub i64);

/// Open (creating if needed) the lease database and ensure the schema.
///
/// WAL lets readers run beside the writer; `synchronous=FULL` makes every
/// COMMIT durable (fsync of the WAL) before it returns, which is what lets
/// a reply promise that the lease survives a crash.
pub fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
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
    init_schema(&conn)?;
    Ok(conn)
}

/// Create or migrate the schema on any connection (tests use in-memory
/// ones). See `migrations`.
pub fn init_schema(conn: &Connection) -> rusqlite::Result<()> {
    super::migrations::migrate(conn)
}

// The standalone forms (one transaction each) serve the unit tests and
// benches/lease_store.rs; the server goes through lease_service.rs and the
// `*_in` forms.
#[cfg_attr(not(test), allow(dead_code))]
pub fn acquire(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> rusqlite::Result<Acquire> {
    in_immediate_tx(conn, |tx| {
        acquire_in(tx, repo, issue_id, holder, ttl_secs, now)
    })
}

#[cfg_attr(not(test), allow(dead_code))]
pub fn renew(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> rusqlite::Result<Renew> {
    in_immediate_tx(conn, |tx| {
        renew_in(tx, repo, issue_id, holder, ttl_secs, now)
    })
}

#[cfg_attr(not(test), allow(dead_code))]
pub fn release(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    now: i64,
) -> rusqlite::Result<Release> {
    in_immediate_tx(conn, |tx| release_in(tx, repo, issue_id, holder, now))
}

#[cfg_attr(not(test), allow(dead_code))]
/// A live lease on the issue, if any.
pub fn current(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    in_immediate_tx(conn, |tx| current_in(tx, repo, issue_id, now))
}

#[cfg_attr(not(test), allow(dead_code))]
/// All live leases in a repo, oldest first.
pub fn list(conn: &Connection, repo: &str, now: i64) -> rusqlite::Result<Vec<Lease>> {
    in_immediate_tx(conn, |tx| list_in(tx, repo, now))
}

/// `acquire` without its own transaction: the caller must be inside one.
pub fn acquire_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> rusqlite::Result<Acquire> {
    let expires_at = expiry(now, ttl_secs)?;
    match live_row(conn, repo, issue_id, now)? {
        Some(live) if live.holder == holder => {
            set_expiry(conn, repo, issue_id, expires_at)?;
            record_renewed(conn, &live, expires_at, now)?;
            Ok(Acquire::Acquired {
                token: live.token,
                expires_at,
            })
        }
        Some(live) => Ok(Acquire::Held {
            holder: live.holder,
            expires_at: live.expires_at,
        }),
        None => {
            let token = next_token(conn, repo, issue_id)?;
            conn.prepare_cached(
                "INSERT OR REPLACE INTO leases
                     (repo, issue_id, holder, token, acquired_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(rusqlite::params![
                repo, issue_id, holder, token, now, expires_at
            ])?;
            record(
                conn,
                "lease.acquired",
                repo,
                issue_id,
                Some(holder),
                json!({ "holder": holder, "token": token, "acquired_at": now, "expires_at": expires_at }),
                now,
            )?;
            Ok(Acquire::Acquired { token, expires_at })
        }
    }
}

/// `renew` without its own transaction: the caller must be inside one.
pub fn renew_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    ttl_secs: Option<i64>,
    now: i64,
) -> rusqlite::Result<Renew> {
    let expires_at = expiry(now, ttl_secs)?;
    match live_row(conn, repo, issue_id, now)? {
        Some(live) if live.holder == holder => {
            set_expiry(conn, repo, issue_id, expires_at)?;
            record_renewed(conn, &live, expires_at, now)?;
            Ok(Renew::Renewed {
                token: live.token,
                expires_at,
            })
        }
        other => Ok(Renew::NotHolder {
            holder: other.map(|l| l.holder),
        }),
    }
}

/// `release` without its own transaction: the caller must be inside one.
pub fn release_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    holder: &str,
    now: i64,
) -> rusqlite::Result<Release> {
    let Some(live) = live_row(conn, repo, issue_id, now)? else {
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
        repo,
        issue_id,
        Some(holder),
        json!({ "holder": holder, "token": live.token }),
        now,
    )?;
    Ok(Release::Released)
}

/// `current` without its own transaction: the caller must be inside one.
pub fn current_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    live_row(conn, repo, issue_id, now)
}

/// `list` without its own transaction: the caller must be inside one.
pub fn list_in(conn: &Connection, repo: &str, now: i64) -> rusqlite::Result<Vec<Lease>> {
    let ended: Vec<Lease> = conn
        .prepare_cached(
            "DELETE FROM leases WHERE repo = ?1 AND expires_at IS NOT NULL AND expires_at <= ?2
             RETURNING repo, issue_id, holder, token, acquired_at, expires_at",
        )?
        .query_map(rusqlite::params![repo, now], lease_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    for lease in &ended {
        record_expired(conn, lease, now)?;
    }
    let mut stmt = conn.prepare_cached(
        "SELECT repo, issue_id, holder, token, acquired_at, expires_at
         FROM leases WHERE repo = ?1 ORDER BY acquired_at, issue_id",
    )?;
    let leases = stmt.query_map([repo], lease_from_row)?;
    leases.collect()
}

/// The live lease on an issue, if any, without reaping (a pure read, for
/// fencing checks inside another write).
pub fn live_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    Ok(row(conn, repo, issue_id)?.filter(|l| l.live(now)))
}

/// End whatever lease is held on an issue because the issue closed; returns
/// the live lease that ended, if there was one. Like a release, it keeps the
/// token's high-water mark. The caller records the event.
pub fn end_on_close_in(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    let live = live_in(conn, repo, issue_id, now)?;
    conn.prepare_cached("DELETE FROM leases WHERE repo = ?1 AND issue_id = ?2")?
        .execute([repo, issue_id])?;
    Ok(live)
}

#[cfg_attr(not(test), allow(dead_code))]
fn in_immediate_tx<T>(
    conn: &Connection,
    op: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let tx = Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let out = op(&tx)?;
    tx.commit()?;
    Ok(out)
}

fn expiry(now: i64, ttl_secs: Option<i64>) -> rusqlite::Result<Option<i64>> {
    match ttl_secs {
        None => Ok(None),
        Some(ttl) if ttl > 0 => Ok(Some(now.saturating_add(ttl))),
        Some(ttl) => Err(rusqlite::Error::ToSqlConversionFailure(Box::new(
            InvalidTtl(ttl),
        ))),
    }
}

fn row(conn: &Connection, repo: &str, issue_id: &str) -> rusqlite::Result<Option<Lease>> {
    conn.prepare_cached(
        "SELECT repo, issue_id, holder, token, acquired_at, expires_at
         FROM leases WHERE repo = ?1 AND issue_id = ?2",
    )?
    .query_row([repo, issue_id], lease_from_row)
    .optional()
}

/// The issue's live lease. An expired row found on the way is removed
/// and its `lease.expired` event appended: its tenure ended at
/// `expires_at`, whoever notices.
fn live_row(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    now: i64,
) -> rusqlite::Result<Option<Lease>> {
    match row(conn, repo, issue_id)? {
        Some(lease) if lease.live(now) => Ok(Some(lease)),
        Some(expired) => {
            delete_row(conn, repo, issue_id)?;
            record_expired(conn, &expired, now)?;
            Ok(None)
        }
        None => Ok(None),
    }
}

fn delete_row(conn: &Connection, repo: &str, issue_id: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM leases WHERE repo = ?1 AND issue_id = ?2")?
        .execute([repo, issue_id])?;
    Ok(())
}

/// Append a `lease.*` event for `(repo, issue_id)` in the caller's
/// transaction (docs/events.md has every shape).
fn record(
    conn: &Connection,
    kind: &str,
    repo: &str,
    issue_id: &str,
    actor: Option<&str>,
    payload: serde_json::Value,
    now: i64,
) -> rusqlite::Result<()> {
    let event = NewEvent {
        kind,
        repo: Some(repo),
        object_id: Some(issue_id),
        actor,
        payload,
    };
    events::append(conn, &event, now).map(drop)
}

fn record_renewed(
    conn: &Connection,
    live: &Lease,
    expires_at: Option<i64>,
    now: i64,
) -> rusqlite::Result<()> {
    record(
        conn,
        "lease.renewed",
        &live.repo,
        &live.issue_id,
        Some(&live.holder),
        json!({ "holder": live.holder, "token": live.token, "expires_at": expires_at }),
        now,
    )
}

/// The tenure ended by its TTL; nobody acted, so there is no actor.
fn record_expired(conn: &Connection, lease: &Lease, now: i64) -> rusqlite::Result<()> {
    record(
        conn,
        "lease.expired",
        &lease.repo,
        &lease.issue_id,
        None,
        json!({ "holder": lease.holder, "token": lease.token, "expires_at": lease.expires_at }),
        now,
    )
}

fn lease_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        repo: r.get(0)?,
        issue_id: r.get(1)?,
        holder: r.get(2)?,
        token: r.get(3)?,
        acquired_at: r.get(4)?,
        expires_at: r.get(5)?,
    })
}

fn set_expiry(
    conn: &Connection,
    repo: &str,
    issue_id: &str,
    expires_at: Option<i64>,
) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE leases SET expires_at = ?3 WHERE repo = ?1 AND issue_id = ?2")?
        .execute(rusqlite::params![repo, issue_id, expires_at])?;
    Ok(())
}

/// Bump and return the issue's token high-water mark.
fn next_token(conn: &Connection, repo: &str, issue_id: &str) -> rusqlite::Result<i64> {
    conn.prepare_cached(
        "INSERT INTO lease_tokens (repo, issue_id, last_token) VALUES (?1, ?2, 1)
         ON CONFLICT (repo, issue_id) DO UPDATE SET last_token = last_token + 1
         RETURNING last_token",
    )?
    .query_row([repo, issue_id], |r| r.get(0))
}

fn failure(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
        Some(message),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPO: &str = "team/app";
    const ISSUE: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
    const T0: i64 = 1_790_000_000;

    fn db() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        init_schema(&conn).unwrap();
        conn
    }

    fn acquired(token: i64, expires_at: Option<i64>) -> Acquire {
        Acquire::Acquired { token, expires_at }
    }

    fn token_of(outcome: Acquire) -> i64 {
        match outcome {
            Acquire::Acquired { token, .. } => token,
            held => panic!("expected Acquired, got {held:?}"),
        }
    }

    #[test]
    fn acquire_free_issue_returns_token_1() {
        let conn = db();
        let got = acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        assert_eq!(got, acquired(1, Some(T0 + 60)));
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
            acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap(),
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
            acquire(&conn, REPO, ISSUE, "alice", None, T0).unwrap(),
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
        assert_eq!(again, acquired(1, Some(T0 + 630)));
        let lease = current(&conn, REPO, ISSUE, T0 + 30).unwrap().unwrap();
        assert_eq!(lease.acquired_at, T0, "a re-acquire is not a new tenure");
        assert_eq!(lease.expires_at, Some(T0 + 630));
    }

    #[test]
    fn acquire_after_expiry_takes_over_and_bumps_token() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = acquire(&conn, REPO, ISSUE, "bob", Some(60), T0 + 60).unwrap();
        assert_eq!(got, acquired(2, Some(T0 + 120)));
        let lease = current(&conn, REPO, ISSUE, T0 + 61).unwrap().unwrap();
        assert_eq!((lease.holder.as_str(), lease.acquired_at), ("bob", T0 + 60));
    }

    #[test]
    fn renew_extends_expiry_keeps_token() {
        let conn = db();
        acquire(&conn, REPO, ISSUE, "alice", Some(60), T0).unwrap();
        let got = renew(&conn, REPO, ISSUE, "alice", Some(120), T0 + 50).unwrap();
        assert_eq!(
            got,
            Renew::Renewed {
                token: 1,
                expires_at: Some(T0 + 170)
            }
        );
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
        // The expired row was reaped.
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM leases WHERE repo = ?1", [REPO], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(rows, 2);
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
        // list reaps 01 and 02; current reaps nothing more but must not reset either.
        assert!(list(&conn, REPO, T0 + 10).unwrap().is_empty());
        assert_eq!(current(&conn, REPO, "01", T0 + 10).unwrap(), None);
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM leases", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "expired rows were reaped");
        assert_eq!(
            token_of(acquire(&conn, REPO, "01", "b", None, T0 + 11).unwrap()),
            2
        );
        // current reaps too.
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
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        let sync: i64 = conn
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
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        let err = open(&path).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    /// (type, object, actor, payload) of every event so far.
    fn events_of(conn: &Connection) -> Vec<(String, String, Option<String>, serde_json::Value)> {
        events::after(conn, 0, 1000)
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
                json!({"holder": "alice", "token": 1, "acquired_at": T0, "expires_at": T0 + 60})
            )
        );
        assert_eq!(
            all[2].3,
            json!({"holder": "alice", "token": 1, "expires_at": T0 + 62})
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
        // A read of 02 notices it; a list notices 03; nothing twice.
        assert_eq!(current(&conn, REPO, "02", T0 + 10).unwrap(), None);
        assert_eq!(list(&conn, REPO, T0 + 11).unwrap().len(), 1);
        assert_eq!(list(&conn, REPO, T0 + 12).unwrap().len(), 1);
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
            json!({"holder": "alice", "token": 1, "expires_at": T0 + 10})
        );
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
        let mut conn = db();
        let tx = conn.transaction().unwrap();
        acquire_in(&tx, REPO, ISSUE, "a", None, T0).unwrap();
        assert_eq!(
            acquire_in(&tx, REPO, ISSUE, "b", None, T0).unwrap(),
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
}
