//! Reads that do not queue behind writes: a small pool of read-only
//! connections to `collab.db`, used from tokio's blocking pool.
//!
//! In WAL mode a reader sees the last COMMIT that finished before its read
//! transaction began and never waits for the writer, so an answer read here
//! includes every write already acknowledged (the writer answers only after
//! COMMIT). Each `read` runs its closure inside one read transaction, so a
//! multi-statement read (an issue, its comments, its links) sees one state.
//!
//! On PostgreSQL a read that finds the database unreachable before it
//! began (a restart, a failover, a terminated backend) waits for it with
//! the writer's backoff, for at most [`DB_WAIT`] counted from the start of
//! the outage as the pool saw it: reads of an outage longer than that fail
//! at once with the writer's "unavailable" line, so they hold no thread.
//! A read whose connection is lost after it began is run again from the
//! start on another connection, within the same bound: its transaction was
//! read-only, so running it twice writes nothing twice, and a connection
//! dropped by the server is no more the reader's fault than one refused.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sql::Connection;
use crate::sql::Location;
use crate::writer::{DB_WAIT, FIRST_BACKOFF, MAX_BACKOFF};
use anyhow::{anyhow, Context as _};

/// Most connections open at once; a read beyond that waits for one.
pub const MAX_READERS: usize = 8;

/// Handle to the pool; cheap to clone.
#[derive(Clone)]
pub struct ReadPool {
    inner: Arc<Inner>,
}

struct Inner {
    location: Location,
    state: Mutex<PoolState>,
    returned: Condvar,
    /// Since when reads have found the database unreachable (`None`: a
    /// read began since).
    down_since: Mutex<Option<Instant>>,
}

struct PoolState {
    idle: Vec<Connection>,
    /// Connections open, idle or lent out.
    open: usize,
}

impl ReadPool {
    /// A pool over the database at `path` (which the writer has already
    /// created and migrated). Connections open lazily.
    pub fn new(location: impl Into<Location>) -> ReadPool {
        ReadPool {
            inner: Arc::new(Inner {
                location: location.into(),
                state: Mutex::new(PoolState {
                    idle: Vec::new(),
                    open: 0,
                }),
                returned: Condvar::new(),
                down_since: Mutex::new(None),
            }),
        }
    }

    /// Run `f` in one read transaction on the blocking pool.
    pub async fn read<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> anyhow::Result<T> + Send + 'static,
    {
        let pool = self.clone();
        tokio::task::spawn_blocking(move || pool.read_blocking(f))
            .await
            .map_err(|e| anyhow!("collab database read task failed: {e}"))?
    }

    /// Run `f` in one read transaction on this thread (already blocking);
    /// `f` may run more than once (see the module's comment).
    pub fn read_blocking<T>(
        &self,
        f: impl Fn(&Connection) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut backoff = Duration::ZERO;
        // Bounds the reruns of this read: a successful BEGIN clears the
        // pool's outage clock, so that alone would not.
        let mut lost_first = None::<Instant>;
        loop {
            let conn = self.begun()?;
            let result = (|| {
                let out = f(&conn);
                // A read transaction has nothing to keep; ending it lets the
                // writer checkpoint past it.
                conn.end_read()?;
                out
            })();
            match &result {
                // A connection whose transaction may still be open is not reused.
                Err(_) if !conn.is_autocommit() => self.forget(),
                _ => self.give_back(conn),
            }
            match result {
                Err(err) if is_unavailable(&err) => {
                    if lost_first.get_or_insert_with(Instant::now).elapsed() >= DB_WAIT {
                        return Err(err);
                    }
                    self.wait_out(err, &mut backoff)?
                }
                done => return done,
            }
        }
    }

    /// A connection with its read transaction begun, waiting out an outage
    /// of the database (see the module's comment).
    fn begun(&self) -> anyhow::Result<Connection> {
        let mut backoff = Duration::ZERO;
        loop {
            let err = match self.take() {
                Ok(conn) => match conn.begin_read() {
                    Ok(()) => {
                        *self.inner.down_since.lock().expect("read pool lock") = None;
                        return Ok(conn);
                    }
                    Err(e) => {
                        // A failed BEGIN leaves no transaction open; the
                        // connection reconnects on its next use.
                        self.give_back(conn);
                        anyhow::Error::new(e)
                    }
                },
                Err(e) => e,
            };
            self.wait_out(err, &mut backoff)?;
        }
    }

    /// After `err`: sleep the next backoff and return, to try again, when
    /// it says the database is unreachable and the outage is younger than
    /// [`DB_WAIT`]; otherwise give up with it.
    fn wait_out(&self, err: anyhow::Error, backoff: &mut Duration) -> anyhow::Result<()> {
        if !is_unavailable(&err) {
            return Err(err);
        }
        let since = *self
            .inner
            .down_since
            .lock()
            .expect("read pool lock")
            .get_or_insert_with(Instant::now);
        let left = DB_WAIT.saturating_sub(since.elapsed());
        if left.is_zero() {
            return Err(anyhow::Error::new(crate::sql::Error::Unavailable(format!(
                "{err:#}"
            ))));
        }
        *backoff = (*backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        std::thread::sleep((*backoff).min(left));
        Ok(())
    }

    fn take(&self) -> anyhow::Result<Connection> {
        let mut state = self.inner.state.lock().expect("read pool lock");
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(conn);
            }
            if state.open < MAX_READERS {
                state.open += 1;
                drop(state);
                return open_reader(&self.inner.location).inspect_err(|_| self.forget());
            }
            state = self.inner.returned.wait(state).expect("read pool lock");
        }
    }

    fn give_back(&self, conn: Connection) {
        let mut state = self.inner.state.lock().expect("read pool lock");
        state.idle.push(conn);
        self.inner.returned.notify_one();
    }

    fn forget(&self) {
        let mut state = self.inner.state.lock().expect("read pool lock");
        state.open -= 1;
        self.inner.returned.notify_one();
    }
}

/// Whether `err` says the database could not be reached (not that a query
/// was wrong).
fn is_unavailable(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|c| c.downcast_ref::<crate::sql::Error>())
        .any(|e| e.is_unavailable())
}

fn open_reader(location: &Location) -> anyhow::Result<Connection> {
    crate::connect::open_reader(location)
        .with_context(|| format!("opening {} read-only", location.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leases;

    #[tokio::test]
    async fn readers_see_committed_writes_and_do_not_wait_for_an_open_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        let writer = leases::open(&path).unwrap();
        leases::acquire(&writer, "r", "i", "alice", None, 1).unwrap();
        let pool = ReadPool::new(&path);
        // A write transaction stays open while we read.
        writer.execute_batch("BEGIN IMMEDIATE").unwrap();
        let claim = leases::Claim::new("r", "j", "bob", None);
        leases::acquire_in(&writer, &claim, &leases::Policy::default(), 1).unwrap();
        let seen = pool
            .read(|conn| Ok(leases::live_in(conn, "r", "i", 1)?.map(|l| l.holder)))
            .await
            .unwrap();
        assert_eq!(seen.as_deref(), Some("alice"));
        let uncommitted = pool
            .read(|conn| Ok(leases::live_in(conn, "r", "j", 1)?))
            .await
            .unwrap();
        assert_eq!(uncommitted, None, "an uncommitted write is not visible");
        writer.execute_batch("COMMIT").unwrap();
        let committed = pool
            .read(|conn| Ok(leases::live_in(conn, "r", "j", 1)?.is_some()))
            .await
            .unwrap();
        assert!(committed);
        // Read-only: a write through the pool fails.
        let err = pool
            .read(|conn| Ok(conn.execute("DELETE FROM leases", [])?))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("readonly"), "{err:#}");
    }

    #[test]
    fn many_threads_share_at_most_max_readers_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        drop(leases::open(&path).unwrap());
        let pool = ReadPool::new(&path);
        std::thread::scope(|s| {
            for _ in 0..(MAX_READERS * 3) {
                let pool = pool.clone();
                s.spawn(move || {
                    for _ in 0..20 {
                        let n: i64 = pool
                            .read_blocking(|c| {
                                Ok(c.query_row("SELECT COUNT(*) FROM leases", [], |r| r.get(0))?)
                            })
                            .unwrap();
                        assert_eq!(n, 0);
                    }
                });
            }
        });
        let state = pool.inner.state.lock().unwrap();
        assert!(state.open <= MAX_READERS && state.open == state.idle.len());
    }

    /// A read whose backend is terminated half-way (an immediate restart,
    /// a failover, an operator's `pg_terminate_backend`) runs again on a
    /// new connection and answers; a query that is merely wrong is never
    /// run twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_cut_off_half_way_runs_again_and_a_wrong_one_does_not() {
        use crate::sql::test_database::{off_runtime, TestDatabase};
        use std::sync::atomic::{AtomicUsize, Ordering};
        if !crate::sql::test_database::wanted() {
            return;
        }
        let db = off_runtime(TestDatabase::create);
        let writer = {
            let url = db.url.clone();
            off_runtime(move || crate::writer::Writer::open(url.as_str()).unwrap())
        };
        drop(writer);
        let pool = ReadPool::new(db.url.as_str());
        let runs = Arc::new(AtomicUsize::new(0));
        let answer = pool
            .read({
                let runs = runs.clone();
                move |conn| {
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        // Its own backend ends, as under a restart.
                        let _ = conn.query_row(
                            "SELECT pg_terminate_backend(pg_backend_pid())",
                            [],
                            |_| Ok(()),
                        );
                    }
                    Ok(conn.query_row("SELECT count(*) FROM leases", [], |r| r.get::<_, i64>(0))?)
                }
            })
            .await;
        assert_eq!(answer.unwrap(), 0);
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "run once cut off, once whole"
        );
        let wrong_runs = Arc::new(AtomicUsize::new(0));
        let wrong = pool
            .read({
                let runs = wrong_runs.clone();
                move |conn| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok(
                        conn.query_row("SELECT count(*) FROM no_such_table", [], |r| {
                            r.get::<_, i64>(0)
                        })?,
                    )
                }
            })
            .await;
        assert!(wrong.is_err());
        assert_eq!(wrong_runs.load(Ordering::SeqCst), 1);
    }
}
