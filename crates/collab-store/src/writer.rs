//! The lease store as the async server sees it: one dedicated writer thread
//! that owns the `collab.db` connection and group-commits every write.
//! It owns threading, batching, the clock and durable acknowledgement;
//! every lease decision stays in `leases`.
//!
//! Why one writer: with `synchronous=FULL` each COMMIT waits for an fsync,
//! so a transaction per operation is bounded by the disk (measured ~4,200/s
//! quiet, ~370/s under load), and several contending writer connections do
//! no better while SQLite's busy handler starves some of them. Instead the
//! writer blocks for the first queued operation, takes whatever else is
//! queued (up to [`MAX_GROUP`]), runs them all in ONE `BEGIN IMMEDIATE`
//! transaction with a SAVEPOINT per operation (a failing operation rolls back
//! alone and gets its own error), COMMITs once, and only then answers each
//! caller. One fsync thus acknowledges the whole group, and no caller hears
//! "acquired" before its lease is on disk. Operations run in arrival order.
//!
//! On PostgreSQL several nodes' writers run at once (docs/postgres.md,
//! "Without a global write lock"). A group of lease operations only is a
//! [`TransactionBehavior::Concurrent`] transaction: each operation takes its
//! issue's lock without waiting, and one whose issue another node is
//! deciding (or whose row lock is not free within a short timeout) is
//! rolled back to its SAVEPOINT and carried, in order, to the next group;
//! later operations on the same issue in the group go with it, so each
//! issue's operations are still decided in arrival order. Repository writes
//! (`write_in`: issue, patch and check writes) run in such groups as well,
//! each under its repository's lock, tried the same way and deferred the
//! same way (their closures are `Fn`: a deferred one runs again). A group
//! with a generic write (`write`: one that may touch several repositories
//! or shared tables) is `Immediate` (those stay serial among themselves and
//! with repository writes), one with a whole-database write
//! (`write_exclusive`: a repository rename) `Exclusive`. On SQLite all
//! three are `BEGIN IMMEDIATE`.
//!
//! Reads (`current`, `list`, `status`) go through the same queue, which
//! keeps every answer consistent with the writes queued before it. A group
//! with nothing to write commits without an fsync.
//!
//! Two signals leave the writer, for the server's lease machinery
//! (`crate::leasing`): [`Writer::due`] is the earliest instant a
//! tenure ends or a lock delay runs out (the expiry timer sleeps until it),
//! and [`Writer::changes`] ticks after every committed group that may
//! have made work available (a release, break, expiry, or any generic write
//! such as an issue closing), which is when waiters try again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::sql::Location;
use crate::sql::{Connection, TransactionBehavior};
use anyhow::{anyhow, Context};
use tokio::sync::{mpsc, oneshot, watch};

use crate::leases::{self, Acquire, Break, Claim, Expired, Lease, Policy, Release, Renew};
use crate::queue::{self, Next, NextRequest};

/// Most operations one transaction carries; bounds how long the first
/// caller in a group waits behind the others.
pub const MAX_GROUP: usize = 256;

/// Queued operations beyond this make callers wait to enqueue (backpressure).
const QUEUE_DEPTH: usize = 4096;

/// Deferrals after which a repository write stops only trying its
/// repository's lock: tries alone could lose to other nodes' writers of
/// the same repository again and again; a wait takes a place in
/// PostgreSQL's lock queue, which grants in order.
const PATIENT_AFTER: u32 = 8;

/// Groups a repository write may be carried over to: after
/// [`PATIENT_AFTER`] each costs a short wait (`pg::REPOSITORY_WAIT`), so
/// this bounds the whole at about five seconds.
const MAX_REPOSITORY_DEFERRALS: u32 = PATIENT_AFTER + 250;

/// Groups an operation may be carried over to, because its issue was busy
/// on another node, before it fails with the busy error (at about a
/// millisecond per group, seconds of another transaction holding it).
const MAX_DEFERRALS: u32 = 2000;

/// How long, at most, an operation is carried from group to group because
/// what it needs is busy, whatever the count: groups take longer on a
/// loaded machine (2000 took 38 s on 2 busy CPUs), and a caller answered
/// busy runs it again itself (`collab_proto::exit::BUSY`).
const MAX_DEFERRAL_TIME: std::time::Duration = std::time::Duration::from_secs(5);

/// How many times a lease group that PostgreSQL aborted as a whole (a
/// deadlock it broke, a lock timeout outside an operation) runs again.
const GROUP_RETRIES: u32 = 3;

/// How long the writer waits for an unreachable database (a PostgreSQL
/// restart, a failover) before it fails a group's operations with
/// [`crate::sql::Error::Unavailable`]; once an outage has lasted that long,
/// each later group tries once and fails at once until the database is
/// back. Between attempts it backs off from [`FIRST_BACKOFF`] to
/// [`MAX_BACKOFF`].
pub const DB_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
pub(crate) const FIRST_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);
pub(crate) const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(1);

/// Groups whose provisional-to-final event numbers are kept for
/// [`Writer::final_seq`] (a caller asks right after its answer).
const KEPT_SEQ_MAPS: usize = 64;

/// Unix seconds. Injected so tests can move time without sleeping.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The single writer of the collab database: every write (leases, issues,
/// patches, events, webhooks, exports) is an operation queued to its one
/// thread, which commits them in groups. Cheap to clone; the writer thread
/// stops, after answering everything already queued, when the last handle
/// drops.
#[derive(Clone)]
pub struct Writer {
    inner: Arc<Inner>,
}

/// How much work the writer has committed, for benchmarks and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterStats {
    /// Transactions attempted (each carries one group).
    pub groups: u64,
    /// Operations carried by those transactions.
    pub ops: u64,
}

struct Inner {
    queue: Option<mpsc::Sender<Job>>,
    /// The highest committed event `seq` known to this process: the writer
    /// publishes it after every COMMIT, others (`publish_event_head`) after
    /// writes made by other processes (git hooks, the host CLI).
    event_head: watch::Sender<i64>,
    writer: Option<JoinHandle<()>>,
    policy: Policy,
    counters: Arc<Counters>,
    due: watch::Receiver<Option<i64>>,
    changes: watch::Receiver<u64>,
    /// The writer's `changes` signal, also raised when another process
    /// (a hook, another node) was seen writing.
    changes_tx: watch::Sender<u64>,
    /// Provisional to final event numbers of the last groups (PostgreSQL).
    final_seqs: Arc<SeqMaps>,
}

/// The provisional-to-final event numbers of the last [`KEPT_SEQ_MAPS`]
/// committed groups. Provisional numbers are unique per connection, so a
/// number maps to one final `seq`.
#[derive(Default)]
struct SeqMaps {
    groups: Mutex<VecDeque<HashMap<i64, i64>>>,
}

impl SeqMaps {
    fn record(&self, map: HashMap<i64, i64>) {
        if map.is_empty() {
            return;
        }
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        if groups.len() == KEPT_SEQ_MAPS {
            groups.pop_front();
        }
        groups.push_back(map);
    }

    fn get(&self, seq: i64) -> i64 {
        if seq >= 0 {
            return seq;
        }
        let groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        groups
            .iter()
            .rev()
            .find_map(|g| g.get(&seq).copied())
            .unwrap_or(seq)
    }
}

#[derive(Default)]
struct Counters {
    groups: AtomicU64,
    ops: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Closing the queue ends the writer once it has drained it; joining
        // means the database is closed when the last handle is gone.
        self.queue.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

struct Job {
    op: Op,
    reply: oneshot::Sender<anyhow::Result<Outcome>>,
    /// Groups this job was carried over from (its issue was busy).
    deferrals: u32,
    /// When it was first carried over.
    deferred_since: Option<std::time::Instant>,
}

enum Op {
    Acquire(Claim),
    /// The work queue's `next`: pick the first ready issue and acquire it.
    Next(NextRequest),
    Renew(Claim),
    Release {
        repo: String,
        issue_id: String,
        holder: String,
    },
    Break {
        repo: String,
        issue_id: String,
        by: String,
        reason: String,
    },
    Current {
        repo: String,
        issue_id: String,
    },
    List {
        repo: String,
    },
    Status {
        repo: String,
        issue_id: String,
    },
    /// End what is due (the expiry timer's pass).
    ExpireDue,
    /// Any other write (issues, events, ...): runs under its own SAVEPOINT
    /// in the group like the lease operations; its typed result travels
    /// back as `Any` and is answered only after COMMIT.
    Write {
        label: String,
        run: WriteFn,
        /// A whole-database write: the group takes the global key
        /// exclusively (`TransactionBehavior::Exclusive`).
        exclusive: bool,
    },
    /// A write confined to one repository (`Writer::write_in`: issue,
    /// patch and check writes). It runs in lease groups too, under its
    /// repository's lock (`Connection::lock_repository`), and may run more
    /// than once: when that lock, or an issue's, or a row is busy it is
    /// rolled back to its SAVEPOINT and carried to a later group, and a
    /// group that lost its connection runs again. So its closure is `Fn`
    /// and writes nothing but the database.
    RepoWrite {
        label: String,
        repo: String,
        run: RepoWriteFn,
        /// Deferred [`PATIENT_AFTER`] times: at the head of a group it
        /// waits for its repository's lock (in PostgreSQL's queue, for at
        /// most `pg::REPOSITORY_WAIT`) instead of trying it.
        patient: bool,
    },
}

type AnyOutcome = Box<dyn std::any::Any + Send>;
type WriteFn = Box<dyn FnOnce(&Connection, i64, &Policy) -> anyhow::Result<AnyOutcome> + Send>;
type RepoWriteFn = Box<dyn Fn(&Connection, i64, &Policy) -> anyhow::Result<AnyOutcome> + Send>;

enum Outcome {
    Acquire(Acquire),
    Next(Next),
    Renew(Renew),
    Release(Release),
    Break(Break),
    Current(Option<Lease>),
    List(Vec<Lease>),
    /// Boxed: the largest outcome, rarely asked for.
    Status(Box<leases::Status>),
    Expired(Expired),
    Write(AnyOutcome),
}

/// Turn an outcome into the variant an op expects.
macro_rules! expect {
    ($outcome:expr, $variant:ident) => {
        match $outcome {
            Outcome::$variant(value) => Ok::<_, anyhow::Error>(value),
            _ => unreachable!("the writer answers each op with its own outcome"),
        }
    };
}

impl Writer {
    /// Open (creating if needed) the lease database at `path` and start the
    /// writer thread, with the default policy. Fails if the database cannot
    /// be opened or migrated.
    pub fn open(location: impl Into<Location>) -> anyhow::Result<Writer> {
        Self::open_with(location, Policy::default(), Arc::new(unix_now))
    }

    /// `open` with a lease policy and a clock (tests and benchmarks inject
    /// one).
    pub fn open_with(
        location: impl Into<Location>,
        policy: Policy,
        clock: Clock,
    ) -> anyhow::Result<Writer> {
        let location = location.into();
        let conn = crate::connect::open(&location)
            .with_context(|| format!("cannot open the collab database {}", location.display()))?;
        Self::start(conn, policy, clock, None)
    }

    /// `open` with an injected clock and the default policy.
    pub fn open_with_clock(location: impl Into<Location>, clock: Clock) -> anyhow::Result<Writer> {
        Self::open_with(location, Policy::default(), clock)
    }

    /// Take over `conn` (already through `leases::open`). The writer waits
    /// for `gate` before its first group, when given, so tests can queue a
    /// known group.
    fn start(
        conn: Connection,
        policy: Policy,
        clock: Clock,
        gate: Option<std::sync::mpsc::Receiver<()>>,
    ) -> anyhow::Result<Writer> {
        let (queue, jobs) = mpsc::channel(QUEUE_DEPTH);
        let counters = Arc::new(Counters::default());
        // Something may already be due (leases that ended while the server
        // was down): the first pass runs at once.
        let (due_tx, due) = watch::channel(Some(i64::MIN));
        let (changes_tx, changes) = watch::channel(0);
        let head = crate::event_log::head(&conn).context("reading the event log head")?;
        let event_head = watch::Sender::new(head);
        let signals = Signals {
            due: due_tx,
            changes: changes_tx.clone(),
            event_head: event_head.clone(),
        };
        let writer_counters = Arc::clone(&counters);
        let final_seqs = Arc::new(SeqMaps::default());
        let writer_seqs = Arc::clone(&final_seqs);
        let writer = std::thread::Builder::new()
            .name("lease-writer".into())
            .spawn(move || {
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                run_writer(
                    conn,
                    jobs,
                    policy,
                    clock,
                    &writer_counters,
                    &signals,
                    &writer_seqs,
                );
            })
            .context("cannot start the lease writer thread")?;
        Ok(Writer {
            inner: Arc::new(Inner {
                queue: Some(queue),
                event_head,
                writer: Some(writer),
                policy,
                counters,
                due,
                changes,
                changes_tx,
                final_seqs,
            }),
        })
    }

    /// The lease policy every decision uses.
    pub fn policy(&self) -> Policy {
        self.inner.policy
    }

    /// The earliest instant (unix seconds) something is due: a tenure ends
    /// or a lock delay runs out. `None`: nothing scheduled.
    pub fn due(&self) -> watch::Receiver<Option<i64>> {
        self.inner.due.clone()
    }

    /// Ticks after each committed group that may have made work available.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.clone()
    }

    /// Claim an issue: `claim.ttl_secs: None` is open-ended.
    pub async fn acquire_claim(&self, claim: Claim) -> anyhow::Result<Acquire> {
        expect!(self.call(Op::Acquire(claim)).await?, Acquire)
    }

    /// Claim `issue_id` for `holder` without a note; `ttl_secs: None` is
    /// open-ended.
    pub async fn acquire(
        &self,
        repo: &str,
        issue_id: &str,
        holder: &str,
        ttl_secs: Option<i64>,
    ) -> anyhow::Result<Acquire> {
        self.acquire_claim(Claim::new(repo, issue_id, holder, ttl_secs))
            .await
    }

    /// Queue an acquire now; the returned future yields its durable outcome.
    /// Acquires queued one after another are decided in that order (the
    /// waiters' first-come-first-served rests on it).
    pub async fn queue_acquire(
        &self,
        claim: Claim,
    ) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<Acquire>> + Send + 'static>
    {
        let outcome = self.submit(Op::Acquire(claim)).await?;
        Ok(async move { expect!(outcome.await.map_err(|_| writer_stopped())??, Acquire) })
    }

    /// Take the first ready issue of `req.repo` for `req.holder` (see
    /// `queue`): one operation on the writer, so no two callers get the same
    /// issue.
    pub async fn next(&self, req: NextRequest) -> anyhow::Result<Next> {
        expect!(self.call(Op::Next(req)).await?, Next)
    }

    /// `next`, queued now (see `queue_acquire`).
    pub async fn queue_next(
        &self,
        req: NextRequest,
    ) -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<Next>> + Send + 'static>
    {
        let outcome = self.submit(Op::Next(req)).await?;
        Ok(async move { expect!(outcome.await.map_err(|_| writer_stopped())??, Next) })
    }

    /// Extend the holder's live lease to `claim.ttl_secs` from now (a note,
    /// when given, replaces the tenure's).
    pub async fn renew_claim(&self, claim: Claim) -> anyhow::Result<Renew> {
        expect!(self.call(Op::Renew(claim)).await?, Renew)
    }

    /// Extend `holder`'s live lease to `ttl_secs` from now.
    pub async fn renew(
        &self,
        repo: &str,
        issue_id: &str,
        holder: &str,
        ttl_secs: i64,
    ) -> anyhow::Result<Renew> {
        self.renew_claim(Claim::new(repo, issue_id, holder, Some(ttl_secs)))
            .await
    }

    /// Give up `holder`'s lease (idempotent).
    pub async fn release(
        &self,
        repo: &str,
        issue_id: &str,
        holder: &str,
    ) -> anyhow::Result<Release> {
        let op = Op::Release {
            repo: repo.into(),
            issue_id: issue_id.into(),
            holder: holder.into(),
        };
        expect!(self.call(op).await?, Release)
    }

    /// End the live tenure by force, recording `by` and `reason`.
    pub async fn break_lease(
        &self,
        repo: &str,
        issue_id: &str,
        by: &str,
        reason: &str,
    ) -> anyhow::Result<Break> {
        let op = Op::Break {
            repo: repo.into(),
            issue_id: issue_id.into(),
            by: by.into(),
            reason: reason.into(),
        };
        expect!(self.call(op).await?, Break)
    }

    /// The live lease on an issue, if any.
    pub async fn current(&self, repo: &str, issue_id: &str) -> anyhow::Result<Option<Lease>> {
        let op = Op::Current {
            repo: repo.into(),
            issue_id: issue_id.into(),
        };
        expect!(self.call(op).await?, Current)
    }

    /// Every live lease in `repo`, oldest first.
    pub async fn list(&self, repo: &str) -> anyhow::Result<Vec<Lease>> {
        let op = Op::List { repo: repo.into() };
        expect!(self.call(op).await?, List)
    }

    /// Everything about an issue's leasing (live tenure, token, transitions,
    /// lock delay).
    pub async fn status(&self, repo: &str, issue_id: &str) -> anyhow::Result<leases::Status> {
        let op = Op::Status {
            repo: repo.into(),
            issue_id: issue_id.into(),
        };
        expect!(self.call(op).await?, Status).map(|status| *status)
    }

    /// End every tenure that is due, and learn when the next one is.
    pub async fn expire_due(&self) -> anyhow::Result<Expired> {
        expect!(self.call(Op::ExpireDue).await?, Expired)
    }

    /// Run `f` on the writer thread inside the next group's transaction
    /// (under its own SAVEPOINT, with the group's `now`), and return its
    /// result once the group has committed. An `Err` from `f` rolls back
    /// only what `f` wrote. This is how every non-lease write (issues,
    /// events, ...) reaches `collab.db`: one writer, one fsync per group,
    /// and no caller is answered before its write is durable.
    pub async fn write<T, F>(&self, label: impl Into<String>, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> anyhow::Result<T> + Send + 'static,
    {
        self.write_with_policy(label, move |conn, now, _| f(conn, now))
            .await
    }

    /// `write` for closures that make lease decisions too (the work queue's
    /// `next`): they get the service's lease policy.
    pub async fn write_with_policy<T, F>(&self, label: impl Into<String>, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64, &Policy) -> anyhow::Result<T> + Send + 'static,
    {
        self.write_op(label.into(), false, f).await
    }

    /// `write` for a whole-database change (a repository rename that moves
    /// every child row): on PostgreSQL its group takes the global key
    /// exclusively, so no other writer on any node runs beside it.
    pub async fn write_exclusive<T, F>(&self, label: impl Into<String>, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64) -> anyhow::Result<T> + Send + 'static,
    {
        self.write_op(label.into(), true, move |conn, now, _| f(conn, now))
            .await
    }

    /// `write` for a write confined to the repository `repo`: on
    /// PostgreSQL it takes that repository's lock (and the generic writes'
    /// key shared) instead of the generic writes' key, so writes of
    /// different repositories run side by side, on one node and across
    /// nodes, and beside lease operations. `f` may run more than once (a
    /// busy repository, issue or row defers it to a later group, each run
    /// rolled back but the last), so it must only read and write through
    /// `conn`, and read only what it captured. It must not write rows of
    /// another repository or of tables shared by all (webhooks, mirrors,
    /// settings): those are `write`'s.
    pub async fn write_in<T, F>(
        &self,
        repo: impl Into<String>,
        label: impl Into<String>,
        f: F,
    ) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&Connection, i64) -> anyhow::Result<T> + Send + 'static,
    {
        let op = Op::RepoWrite {
            label: label.into(),
            repo: repo.into(),
            run: Box::new(move |conn, now, _| f(conn, now).map(|t| Box::new(t) as AnyOutcome)),
            patient: false,
        };
        let any: AnyOutcome = expect!(self.call(op).await?, Write)?;
        Ok(*any
            .downcast::<T>()
            .expect("the writer answers each op with its own outcome"))
    }

    /// The final `seq` of an event whose append returned `seq` inside a
    /// write this writer committed (on PostgreSQL an append's number is
    /// provisional until COMMIT: `event_log::append`). Ask right after the
    /// write's answer; a final number comes back as it is.
    pub fn final_seq(&self, seq: i64) -> i64 {
        self.inner.final_seqs.get(seq)
    }

    async fn write_op<T, F>(&self, label: String, exclusive: bool, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, i64, &Policy) -> anyhow::Result<T> + Send + 'static,
    {
        let op = Op::Write {
            label,
            run: Box::new(move |conn, now, policy| {
                f(conn, now, policy).map(|t| Box::new(t) as AnyOutcome)
            }),
            exclusive,
        };
        let any: AnyOutcome = expect!(self.call(op).await?, Write)?;
        Ok(*any
            .downcast::<T>()
            .expect("the writer answers each op with its own outcome"))
    }

    /// Follow the highest committed event `seq` (see `Inner::event_head`).
    /// Watchers wake on a change and read the rows from the table.
    pub fn subscribe_event_head(&self) -> watch::Receiver<i64> {
        self.inner.event_head.subscribe()
    }

    /// Raise the published event head to `seq` (never lowers it). For rows
    /// committed by other processes.
    pub fn publish_event_head(&self, seq: i64) {
        publish_head(&self.inner.event_head, seq);
    }

    /// The event log reached `seq` through another process: a git hook, or
    /// another node on the same PostgreSQL database. Leases may have
    /// changed without this process's writer, so waiters retry, and an
    /// expiry pass runs, which also tells the expiry timer the next instant
    /// due (a lease taken on another node expires on this one's timer too).
    pub async fn observe_head(&self, seq: i64) -> anyhow::Result<()> {
        let known = *self.inner.event_head.borrow();
        if seq <= known {
            return Ok(());
        }
        publish_head(&self.inner.event_head, seq);
        self.inner
            .changes_tx
            .send_modify(|n| *n = n.wrapping_add(1));
        self.expire_due().await?;
        Ok(())
    }

    pub fn stats(&self) -> WriterStats {
        WriterStats {
            groups: self.inner.counters.groups.load(Ordering::Relaxed),
            ops: self.inner.counters.ops.load(Ordering::Relaxed),
        }
    }

    async fn call(&self, op: Op) -> anyhow::Result<Outcome> {
        self.submit(op).await?.await.map_err(|_| writer_stopped())?
    }

    /// Queue `op`; the receiver yields its outcome once it is durable.
    async fn submit(&self, op: Op) -> anyhow::Result<oneshot::Receiver<anyhow::Result<Outcome>>> {
        let (reply, outcome) = oneshot::channel();
        let queue = self.inner.queue.as_ref().ok_or_else(writer_stopped)?;
        queue
            .send(Job {
                op,
                reply,
                deferrals: 0,
                deferred_since: None,
            })
            .await
            .map_err(|_| writer_stopped())?;
        Ok(outcome)
    }
}

fn publish_head(head: &watch::Sender<i64>, seq: i64) {
    head.send_if_modified(|current| {
        let raised = seq > *current;
        if raised {
            *current = seq;
        }
        raised
    });
}

fn writer_stopped() -> anyhow::Error {
    anyhow!("the lease writer has stopped")
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The writer's ends of its signals.
struct Signals {
    due: watch::Sender<Option<i64>>,
    changes: watch::Sender<u64>,
    /// The highest committed event `seq` (see `Inner::event_head`).
    event_head: watch::Sender<i64>,
}

impl Signals {
    /// After a committed group: move the due instant and tick `changes`.
    fn after_group(&self, ops: &[Op], outcomes: &[anyhow::Result<Outcome>]) {
        let mut freed = false;
        let mut due = *self.due.borrow();
        for (op, outcome) in ops.iter().zip(outcomes) {
            freed |= matches!(
                op,
                Op::Release { .. }
                    | Op::Break { .. }
                    | Op::ExpireDue
                    | Op::Write { .. }
                    | Op::RepoWrite { .. }
            );
            match outcome {
                // The pass knows exactly what is due next; ops after it in
                // the group can only bring that closer.
                Ok(Outcome::Expired(pass)) => due = pass.next_due,
                Ok(Outcome::Acquire(Acquire::Acquired { lease, .. }))
                | Ok(Outcome::Next(Next::Acquired { lease, .. }))
                | Ok(Outcome::Renew(Renew::Renewed(lease))) => {
                    due = leases::earliest(due, lease.expires_at)
                }
                Ok(Outcome::Acquire(Acquire::Locked { until, .. })) => {
                    due = leases::earliest(due, Some(*until))
                }
                _ => {}
            }
        }
        // `send_if_modified` wakes the timer only when the instant moved.
        self.due.send_if_modified(|current| {
            let moved = *current != due;
            *current = due;
            moved
        });
        if freed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// The writer's view of an outage of the database: since when it has been
/// unreachable, and the next pause between attempts.
#[derive(Default)]
struct Outage {
    since: Option<std::time::Instant>,
    backoff: std::time::Duration,
}

impl Outage {
    /// Wait before trying again, unless the outage has lasted [`DB_WAIT`]
    /// already (`false`: give up on this group).
    fn wait(&mut self, e: &crate::sql::Error) -> bool {
        let now = std::time::Instant::now();
        let since = *self.since.get_or_insert_with(|| {
            tracing::warn!("the collab database is unavailable ({e}); reconnecting");
            now
        });
        let left = DB_WAIT.saturating_sub(now.duration_since(since));
        if left.is_zero() {
            return false;
        }
        self.backoff = (self.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        std::thread::sleep(self.backoff.min(left));
        true
    }

    fn over(&mut self) {
        if let Some(since) = self.since.take() {
            tracing::info!(
                "the collab database is back after {:.1}s",
                since.elapsed().as_secs_f64()
            );
        }
        self.backoff = std::time::Duration::ZERO;
    }
}

/// Where a group's transaction failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// At BEGIN: no operation ran.
    Begin,
    /// While the operations ran: the transaction rolled back.
    Ops,
    /// At COMMIT.
    Commit,
}

/// Each operation's error for a group whose transaction failed at `stage`
/// with `e`: nothing was written, except that a COMMIT sent without an
/// answer may have committed ([`crate::sql::Error::CommitUnknown`]).
fn group_failed(op: &Op, e: &crate::sql::Error) -> anyhow::Error {
    use crate::sql::Error;
    match e {
        Error::CommitUnknown(m) => anyhow::Error::new(Error::CommitUnknown(m.clone())),
        Error::Unavailable(m) => anyhow::Error::new(Error::Unavailable(m.clone())),
        e if e.is_unavailable() => anyhow::Error::new(Error::Unavailable(e.to_string())),
        // Still busy to the caller (`is_busy`): nothing was written.
        e if e.is_busy() => anyhow::Error::new(Error::Busy(e.to_string())),
        e => return anyhow!("{op}: collab database transaction failed: {e}"),
    }
    .context(op.to_string())
}

/// The writer thread: one group per transaction until the queue closes.
fn run_writer(
    mut conn: Connection,
    mut jobs: mpsc::Receiver<Job>,
    policy: Policy,
    clock: Clock,
    counters: &Counters,
    signals: &Signals,
    final_seqs: &SeqMaps,
) {
    let mut group: Vec<Job> = Vec::with_capacity(MAX_GROUP);
    // Jobs whose issue was busy on another node, in arrival order: they
    // open the next group.
    let mut carried: Vec<Job> = Vec::new();
    // Lease decisions never see time run backwards, even if the wall clock does.
    let mut last_now = i64::MIN;
    let mut outage = Outage::default();
    loop {
        group.append(&mut carried);
        if group.is_empty() {
            if jobs.blocking_recv_many(&mut group, MAX_GROUP) == 0 {
                break;
            }
        } else {
            // Carried jobs are waiting already: take what else is queued,
            // without blocking, and give the other node a moment.
            std::thread::sleep(std::time::Duration::from_millis(1));
            while group.len() < MAX_GROUP {
                match jobs.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
        }
        let mut ops: Vec<Op> = group.iter_mut().map(|job| job.op.take()).collect();
        let behavior = group_behavior(&ops);
        let mut attempt = 0;
        let mut committed = false;
        let outcomes = loop {
            let result = run_group(&mut conn, &mut ops, &policy, behavior, || {
                last_now = last_now.max(clock());
                last_now
            });
            match result {
                Ok(outcomes) => {
                    outage.over();
                    committed = true;
                    break outcomes;
                }
                // A lease group holds no run-once closure (repository
                // writes' may run again): it can run again.
                Err((_, e))
                    if behavior == TransactionBehavior::Concurrent
                        && e.is_busy()
                        && attempt < GROUP_RETRIES =>
                {
                    attempt += 1;
                    tracing::debug!("lease group aborted ({e}); running it again");
                }
                // The database is unreachable or the connection was lost
                // before COMMIT: nothing was written. A group runs again on
                // a new connection if none of its closures ran (lost at
                // BEGIN) or it holds no run-once one (lease operations are
                // data, repository writes may run again).
                Err((stage, e))
                    if e.is_unavailable()
                        && (stage == Stage::Begin
                            || (stage == Stage::Ops
                                && behavior == TransactionBehavior::Concurrent))
                        && outage.wait(&e) => {}
                // Busy past the retries (or in a group that cannot simply
                // run again): nothing was written. What can run again is
                // carried to the next group, as a busy operation is; a
                // generic write's run-once closure answers busy.
                Err((_, e)) if e.is_busy() => {
                    tracing::debug!("group aborted as busy ({e}); deferring what can run again");
                    break ops
                        .iter()
                        .map(|op| match op {
                            Op::Write { .. } => Some(Err(group_failed(op, &e))),
                            _ => None,
                        })
                        .collect();
                }
                Err((_, e)) => {
                    break ops
                        .iter()
                        .map(|op| Some(Err(group_failed(op, &e))))
                        .collect()
                }
            }
        };
        // After COMMIT: whatever the group appended is visible to readers
        // now. (After a failed group there is nothing new to publish, and a
        // database that is down would only be asked again.)
        if committed {
            final_seqs.record(conn.final_seqs());
            match crate::event_log::head(&conn) {
                Ok(seq) => publish_head(&signals.event_head, seq),
                Err(e) => tracing::warn!("reading the event log head: {e}"),
            }
        }
        let mut done_ops = Vec::with_capacity(ops.len());
        let mut done_jobs = Vec::with_capacity(ops.len());
        let mut done = Vec::with_capacity(ops.len());
        for ((mut job, op), outcome) in group.drain(..).zip(ops).zip(outcomes) {
            match outcome {
                Some(outcome) => {
                    done_ops.push(op);
                    done_jobs.push(job);
                    done.push(outcome);
                }
                None if job.deferrals >= op.max_deferrals()
                    || job
                        .deferred_since
                        .is_some_and(|since| since.elapsed() >= MAX_DEFERRAL_TIME) =>
                {
                    let what = match op {
                        Op::RepoWrite { .. } => "the repository",
                        _ => "the issue",
                    };
                    // Typed busy, so the server answers "busy" (and the
                    // clients run it again), never "internal error".
                    let e = anyhow::Error::new(crate::sql::Error::Busy(format!(
                        "{what} stayed busy on another node"
                    )))
                    .context(op.to_string());
                    done_ops.push(op);
                    done_jobs.push(job);
                    done.push(Err(e));
                }
                None => {
                    job.op = op;
                    job.deferrals += 1;
                    job.deferred_since
                        .get_or_insert_with(std::time::Instant::now);
                    if let Op::RepoWrite { patient, .. } = &mut job.op {
                        *patient = job.deferrals >= PATIENT_AFTER;
                    }
                    carried.push(job);
                }
            }
        }
        counters.groups.fetch_add(1, Ordering::Relaxed);
        counters.ops.fetch_add(done.len() as u64, Ordering::Relaxed);
        signals.after_group(&done_ops, &done);
        // Answers go out only now, after COMMIT returned (or failed).
        for (job, outcome) in done_jobs.into_iter().zip(done) {
            let _ = job.reply.send(outcome);
        }
    }
}

/// How a group's transaction begins: lease operations and repository
/// writes run beside other nodes' (`Concurrent`); a generic write makes it
/// `Immediate`, a whole-database write `Exclusive` (all `BEGIN IMMEDIATE`
/// on SQLite).
fn group_behavior(ops: &[Op]) -> TransactionBehavior {
    let mut behavior = TransactionBehavior::Concurrent;
    for op in ops {
        match op {
            Op::Write {
                exclusive: true, ..
            } => return TransactionBehavior::Exclusive,
            Op::Write { .. } => behavior = TransactionBehavior::Immediate,
            _ => {}
        }
    }
    behavior
}

/// Run `ops` in one write transaction, each under its own SAVEPOINT
/// (on PostgreSQL, a lease group's lease operations in runs of one call
/// each instead: [`grouped`]).
/// `Err` means the transaction as a whole failed (BEGIN, COMMIT, or an error
/// that made SQLite abandon it, or a lost connection), with where:
/// nothing of the group was kept (but see
/// [`crate::sql::Error::CommitUnknown`]). `None` for
/// an operation: it was rolled back because its issue was busy (another
/// node is deciding it) and runs again in the next group.
fn run_group(
    conn: &mut Connection,
    ops: &mut [Op],
    policy: &Policy,
    behavior: TransactionBehavior,
    now: impl FnOnce() -> i64,
) -> Result<Vec<Option<anyhow::Result<Outcome>>>, (Stage, crate::sql::Error)> {
    let tx = conn
        .transaction_with_behavior(behavior)
        .map_err(|e| (Stage::Begin, e))?;
    let in_ops = |e| (Stage::Ops, e);
    // Read the clock once the write lock is ours: that is when the group happens.
    let now = now();
    let mut outcomes = Vec::with_capacity(ops.len());
    let mut alone = Alone {
        behavior,
        // Whether `lease_op` is open (the previous operation's): COMMIT
        // releases the last one, so no operation pays for its own RELEASE.
        savepoint: false,
        busy: Vec::new(),
        busy_repos: Vec::new(),
        held_repos: Vec::new(),
    };
    // PostgreSQL: runs of lease operations in one call each.
    let in_calls = behavior == TransactionBehavior::Concurrent && leases::in_one_call(&tx);
    let mut i = 0;
    while i < ops.len() {
        let answers = if in_calls {
            grouped(&tx, &ops[i..], &alone.busy, policy, now).map_err(in_ops)?
        } else {
            Vec::new()
        };
        if answers.is_empty() {
            outcomes.push(alone.run(&tx, &mut ops[i], i == 0, policy, now)?);
            i += 1;
            continue;
        }
        for answer in answers {
            let op = &mut ops[i];
            i += 1;
            match answer {
                Grouped::Done(outcome) => outcomes.push(Some(outcome)),
                Grouped::Busy => {
                    alone.busy.extend(
                        op.issue()
                            .map(|(repo, id)| (repo.to_string(), id.to_string())),
                    );
                    outcomes.push(None);
                }
                // It failed in the call and nothing of it was kept: run it
                // alone, under its savepoint, for its own error.
                Grouped::Alone => outcomes.push(alone.run(&tx, op, false, policy, now)?),
            }
        }
    }
    tx.commit().map_err(|e| (Stage::Commit, e))?;
    Ok(outcomes)
}

/// The state of a group's operations run one at a time, each under its
/// savepoint `lease_op`.
struct Alone {
    behavior: TransactionBehavior,
    /// Whether `lease_op` is open (the previous such operation's).
    savepoint: bool,
    /// Issues with a deferred operation: later operations on them wait
    /// too, so each issue's operations keep their arrival order.
    busy: Vec<(String, String)>,
    /// Repositories with a deferred repository write: likewise for the
    /// repository writes after it.
    busy_repos: Vec<String>,
    /// Repositories whose lock the transaction holds (an earlier write of
    /// the group took it and succeeded): a later write of one needs no try.
    held_repos: Vec<String>,
}

impl Alone {
    /// Run `op` under its savepoint: its outcome, `None` when its issue is
    /// busy (deferred).
    fn run(
        &mut self,
        tx: &Connection,
        op: &mut Op,
        first: bool,
        policy: &Policy,
        now: i64,
    ) -> Result<Option<anyhow::Result<Outcome>>, (Stage, crate::sql::Error)> {
        let in_ops = |e| (Stage::Ops, e);
        let key = op
            .issue()
            .map(|(repo, id)| (repo.to_string(), id.to_string()));
        if key.as_ref().is_some_and(|key| self.busy.contains(key)) {
            return Ok(None);
        }
        let (repo_write, patient) = match op {
            Op::RepoWrite { repo, patient, .. } => (Some(repo.clone()), *patient),
            _ => (None, false),
        };
        if repo_write
            .as_ref()
            .is_some_and(|r| self.busy_repos.contains(r))
        {
            return Ok(None);
        }
        // An operation that is one function call (PostgreSQL) sends its
        // savepoint in the call's round trip; a lease operation of
        // statements sends it with the try of its issue's lock, a
        // repository write with the try of its repository's.
        let opened = if op.in_one_call(tx) {
            tx.defer_savepoint(self.savepoint)
        } else {
            match (self.behavior, op.issue(), &repo_write) {
                (TransactionBehavior::Concurrent, Some((repo, id)), _) => tx
                    .savepoint_locking(self.savepoint, repo, id)
                    .map_err(in_ops)?,
                (TransactionBehavior::Concurrent, None, Some(repo))
                    if self.held_repos.contains(repo) =>
                {
                    next_savepoint(tx, self.savepoint).map_err(in_ops)?;
                    tx.holds_repository(repo);
                    true
                }
                (TransactionBehavior::Concurrent, None, Some(repo)) => {
                    // Only the group's first operation may wait: holding
                    // nothing yet, it cannot close a cycle of waits.
                    let wait = patient && first;
                    match tx.savepoint_locking_repository(self.savepoint, repo, wait) {
                        Ok(opened) => opened,
                        // The wait ran out (`lock_timeout`): deferred again.
                        Err(e) if e.is_busy() => {
                            run_cached(tx, "ROLLBACK TO lease_op").map_err(in_ops)?;
                            self.savepoint = true;
                            self.busy_repos.extend(repo_write);
                            return Ok(None);
                        }
                        Err(e) => return Err(in_ops(e)),
                    }
                }
                _ => false,
            }
        };
        if !opened {
            next_savepoint(tx, self.savepoint).map_err(in_ops)?;
        }
        self.savepoint = true;
        match op.run(tx, policy, now) {
            Ok(outcome) => {
                // Its savepoint is released into the transaction with the
                // lock (a failed write's rollback would have released it).
                if let Some(repo) = repo_write {
                    if !self.held_repos.contains(&repo) {
                        self.held_repos.push(repo);
                    }
                }
                Ok(Some(Ok(outcome)))
            }
            Err(e) => {
                // Some errors (disk full, I/O) make SQLite abandon the whole
                // transaction, and with it what the earlier operations did.
                if tx.is_autocommit() {
                    return Err(in_ops(e.downcast::<crate::sql::Error>().unwrap_or_else(
                        |e| failure(format!("transaction abandoned: {e:#}")),
                    )));
                }
                run_cached(tx, "ROLLBACK TO lease_op").map_err(in_ops)?;
                let is_busy = is_busy(&e);
                // A busy lease operation of a Concurrent group runs again in
                // the next group; so does a `next` that found the ready
                // issues all being decided elsewhere (`queue::next_in`), and
                // a repository write, whatever the group's behavior: it did
                // nothing (rolled back to its savepoint) and holds no lock.
                let deferrable = self.behavior == TransactionBehavior::Concurrent
                    || matches!(op, Op::Next(_) | Op::RepoWrite { .. });
                if is_busy && deferrable {
                    self.busy.extend(key);
                    self.busy_repos.extend(repo_write);
                    Ok(None)
                } else {
                    Ok(Some(Err(e.context(op.to_string()))))
                }
            }
        }
    }
}

/// Whether an operation failed only because another transaction held
/// what it needed: the database's error, or a domain error (an issue's, a
/// patch's) that wraps it. Such an operation wrote nothing; the server
/// answers it with the busy exit status when it escapes the writer.
pub fn is_busy(e: &anyhow::Error) -> bool {
    use crate::{issues::IssueError, patches::PatchError, sql::Error};
    e.chain().any(|cause| {
        cause.downcast_ref::<Error>().is_some_and(Error::is_busy)
            || cause
                .downcast_ref::<IssueError>()
                .is_some_and(IssueError::is_busy)
            || cause
                .downcast_ref::<PatchError>()
                .is_some_and(PatchError::is_busy)
    })
}

/// What became of an operation sent in a `collab_lease_group` call.
enum Grouped {
    Done(anyhow::Result<Outcome>),
    /// Its issue is another transaction's: deferred, nothing done.
    Busy,
    /// It failed in the call (undone there): it runs alone.
    Alone,
}

/// PostgreSQL: the run of lease operations at the start of `ops` (acquire,
/// renew, release, break, each on an issue no earlier one of the run
/// decides and none deferred) as one call of `collab_lease_group`: one
/// prepared statement, one round trip, one subtransaction for the run.
/// What became of each; empty when the first operation cannot go so (it
/// is no lease operation, its issue is busy, a TTL above `max_ttl`, a text
/// with a NUL: it runs alone). An operation that fails in the call is undone
/// there while the others run again without it, in the same call, and is
/// then run alone for its own error ([`Grouped::Alone`]); an operation
/// whose SQLSTATE says busy (a `lock_timeout`, a deadlock) is deferred, as
/// alone.
fn grouped(
    conn: &Connection,
    ops: &[Op],
    busy: &[(String, String)],
    policy: &Policy,
    now: i64,
) -> crate::sql::Result<Vec<Grouped>> {
    let mut calls = Vec::new();
    let mut issues: Vec<(&str, &str)> = Vec::new();
    for op in ops {
        let Some(issue) = op.issue() else { break };
        if issues.contains(&issue)
            || busy
                .iter()
                .any(|(repo, id)| (repo.as_str(), id.as_str()) == issue)
        {
            break;
        }
        let call = match op {
            Op::Acquire(claim) => leases::acquire_group_call(conn, claim, policy),
            Op::Renew(claim) => leases::renew_group_call(conn, claim, policy),
            Op::Release {
                repo,
                issue_id,
                holder,
            } => Ok(leases::release_group_call(conn, repo, issue_id, holder)),
            Op::Break {
                repo,
                issue_id,
                by,
                reason,
            } => Ok(leases::break_group_call(conn, repo, issue_id, by, reason)),
            _ => break,
        };
        let Ok(call) = call else { break };
        if !call.sendable() {
            break;
        }
        issues.push(issue);
        calls.push(call);
    }
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let answers = conn.call_group(&calls, policy.max_lifetime, policy.lock_delay, now)?;
    let mut grouped = Vec::with_capacity(answers.len());
    for ((op, call), answer) in ops.iter().zip(&calls).zip(answers) {
        let row = match leases::group_answer(call.kind, answer) {
            Ok(row) => row,
            Err(state) if crate::sql::is_busy_state(&state) => {
                grouped.push(Grouped::Busy);
                continue;
            }
            Err(state) => {
                tracing::debug!("{op}: failed in its group's call ({state}); running it alone");
                grouped.push(Grouped::Alone);
                continue;
            }
        };
        let done = match op {
            Op::Acquire(claim) => leases::acquire_done(conn, claim, row).map(Outcome::Acquire),
            Op::Renew(claim) => leases::renew_done(conn, claim, row).map(Outcome::Renew),
            Op::Release { repo, issue_id, .. } => {
                leases::release_done(conn, repo, issue_id, row).map(Outcome::Release)
            }
            Op::Break { repo, issue_id, .. } => {
                leases::break_done(conn, repo, issue_id, row).map(Outcome::Break)
            }
            _ => unreachable!("only lease operations are grouped"),
        };
        match done {
            Ok(outcome) => grouped.push(Grouped::Done(Ok(outcome))),
            Err(e) if e.is_busy() => grouped.push(Grouped::Busy),
            // Not an answer the functions give, and what the call did
            // cannot be undone alone: the group fails as a whole.
            Err(e) => return Err(e),
        }
    }
    Ok(grouped)
}

/// Open the savepoint of the next operation, releasing the previous one's
/// (`open`) first. On PostgreSQL both go in one round trip (the simple
/// query protocol takes several statements); SQLite runs them from its
/// statement cache.
fn next_savepoint(conn: &Connection, open: bool) -> crate::sql::Result<()> {
    match (open, conn.is_postgres()) {
        (true, true) => conn.execute_batch("RELEASE lease_op; SAVEPOINT lease_op"),
        (true, false) => {
            run_cached(conn, "RELEASE lease_op")?;
            run_cached(conn, "SAVEPOINT lease_op")
        }
        (false, _) => run_cached(conn, "SAVEPOINT lease_op"),
    }
}

fn failure(message: String) -> crate::sql::Error {
    crate::sql::Error::failure(message)
}

/// Run a statement without parameters or rows through the statement cache.
/// Every operation pays for its SAVEPOINT and RELEASE; parsing them each
/// time (as `crate::sql::Savepoint` does) cost as much as the lease logic.
fn run_cached(conn: &Connection, sql: &str) -> crate::sql::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

impl Op {
    /// Move the op out of its job, leaving a spent marker (the writer owns
    /// each op once; `Write` closures can only run once).
    fn take(&mut self) -> Op {
        std::mem::replace(self, Op::ExpireDue)
    }

    /// Whether the operation runs as one statement on `conn` (an acquire,
    /// renew, release or break through its PostgreSQL function). PostgreSQL aborts
    /// the whole transaction when a statement fails, so it still runs
    /// under its savepoint: the savepoint travels with the call.
    fn in_one_call(&self, conn: &Connection) -> bool {
        matches!(
            self,
            Op::Acquire(_) | Op::Renew(_) | Op::Release { .. } | Op::Break { .. }
        ) && leases::in_one_call(conn)
    }

    /// How many groups the operation may be carried over to before it
    /// fails as busy.
    fn max_deferrals(&self) -> u32 {
        match self {
            Op::RepoWrite { .. } => MAX_REPOSITORY_DEFERRALS,
            _ => MAX_DEFERRALS,
        }
    }

    /// The issue a lease operation decides, if it is one.
    fn issue(&self) -> Option<(&str, &str)> {
        match self {
            Op::Acquire(c) | Op::Renew(c) => Some((&c.repo, &c.issue_id)),
            Op::Release { repo, issue_id, .. } | Op::Break { repo, issue_id, .. } => {
                Some((repo, issue_id))
            }
            _ => None,
        }
    }

    fn run(&mut self, conn: &Connection, policy: &Policy, now: i64) -> anyhow::Result<Outcome> {
        if let Op::Write { run, .. } = self {
            let run = std::mem::replace(run, Box::new(|_, _, _| unreachable!("a write runs once")));
            return Ok(Outcome::Write(run(conn, now, policy)?));
        }
        if let Op::RepoWrite { repo, run, .. } = self {
            if !conn.lock_repository(repo)? {
                return Err(crate::sql::Error::Busy(format!("repository {repo}")).into());
            }
            return Ok(Outcome::Write(run(conn, now, policy)?));
        }
        Ok(match self {
            Op::Acquire(claim) => Outcome::Acquire(leases::acquire_in(conn, claim, policy, now)?),
            Op::Next(req) => Outcome::Next(queue::next_in(conn, req, policy, now)?),
            Op::Renew(claim) => Outcome::Renew(leases::renew_in(conn, claim, policy, now)?),
            Op::Release {
                repo,
                issue_id,
                holder,
            } => Outcome::Release(leases::release_in(
                conn, repo, issue_id, holder, policy, now,
            )?),
            Op::Break {
                repo,
                issue_id,
                by,
                reason,
            } => Outcome::Break(leases::break_in(
                conn, repo, issue_id, by, reason, policy, now,
            )?),
            Op::Current { repo, issue_id } => {
                Outcome::Current(leases::current_in(conn, repo, issue_id, now)?)
            }
            Op::List { repo } => Outcome::List(leases::list_in(conn, repo, now)?),
            Op::Status { repo, issue_id } => {
                Outcome::Status(Box::new(leases::status_in(conn, repo, issue_id, now)?))
            }
            Op::ExpireDue => Outcome::Expired(leases::expire_due_in(conn, policy, now)?),
            Op::Write { .. } | Op::RepoWrite { .. } => unreachable!("handled above"),
        })
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Acquire(c) => write!(f, "acquire lease on {}#{}", c.repo, c.issue_id),
            Op::Renew(c) => write!(f, "renew lease on {}#{}", c.repo, c.issue_id),
            Op::Next(r) => write!(f, "take the next ready issue of {}", r.repo),
            Op::Release { repo, issue_id, .. } => write!(f, "release lease on {repo}#{issue_id}"),
            Op::Break { repo, issue_id, .. } => write!(f, "break lease on {repo}#{issue_id}"),
            Op::Current { repo, issue_id } => write!(f, "read lease on {repo}#{issue_id}"),
            Op::List { repo } => write!(f, "list leases of {repo}"),
            Op::Status { repo, issue_id } => write!(f, "read lease status of {repo}#{issue_id}"),
            Op::ExpireDue => f.write_str("end expired leases"),
            Op::Write { label, .. } | Op::RepoWrite { label, .. } => f.write_str(label),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::AtomicI64;
    use std::time::Duration;

    use rand::{RngExt, SeedableRng};

    use super::*;

    const REPO: &str = "team/app";
    const T0: i64 = 1_790_000_000;

    fn fixed_clock(at: i64) -> (Clock, Arc<AtomicI64>) {
        let time = Arc::new(AtomicI64::new(at));
        let read = Arc::clone(&time);
        (Arc::new(move || read.load(Ordering::SeqCst)), time)
    }

    /// A service whose writer waits until the gate opens, so everything
    /// submitted before that forms one group.
    fn paused(conn: Connection, clock: Clock) -> (Writer, std::sync::mpsc::Sender<()>) {
        let (open_gate, gate) = std::sync::mpsc::channel();
        let service = Writer::start(conn, Policy::default(), clock, Some(gate)).unwrap();
        (service, open_gate)
    }

    fn acquire_op(issue: &str, holder: &str, ttl_secs: Option<i64>) -> Op {
        Op::Acquire(Claim::new(REPO, issue, holder, ttl_secs))
    }

    /// (token, expires_at) of a successful acquire.
    fn tenure(outcome: &Acquire) -> Option<(i64, Option<i64>)> {
        match outcome {
            Acquire::Acquired { lease, .. } => Some((lease.token, lease.expires_at)),
            _ => None,
        }
    }

    fn acquired(outcome: &anyhow::Result<Outcome>) -> Option<(i64, Option<i64>)> {
        match outcome {
            Ok(Outcome::Acquire(a)) => tenure(a),
            _ => None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_acquirers_of_one_issue_exactly_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let service = Writer::open(dir.path().join("collab.db")).unwrap();
        let racers: Vec<_> = (0..64)
            .map(|i| {
                let service = service.clone();
                tokio::spawn(async move {
                    let holder = format!("agent-{i}");
                    let outcome = service.acquire(REPO, "0a0a", &holder, Some(600)).await;
                    (holder, outcome.unwrap())
                })
            })
            .collect();
        let mut winners = Vec::new();
        let mut held_by = BTreeSet::new();
        for racer in racers {
            match racer.await.unwrap() {
                (_, Acquire::Locked { .. }) => unreachable!("no lock delay"),
                (holder, Acquire::Acquired { lease, .. }) => winners.push((holder, lease.token)),
                (_, Acquire::Held { holder, .. }) => {
                    held_by.insert(holder);
                }
            }
        }
        assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
        let (winner, token) = &winners[0];
        assert_eq!(*token, 1);
        assert_eq!(
            held_by,
            BTreeSet::from([winner.clone()]),
            "losers name the winner"
        );
        let lease = service.current(REPO, "0a0a").await.unwrap().unwrap();
        assert_eq!(&lease.holder, winner);
    }

    #[tokio::test]
    async fn failing_op_in_a_group_does_not_affect_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        let (clock, _) = fixed_clock(T0);
        let (service, open_gate) = paused(leases::open(&path).unwrap(), clock);
        let ops = vec![
            acquire_op("01", "alice", Some(60)),
            // Spends a token, then breaks the holder CHECK: must roll back alone.
            acquire_op("02", "", None),
            acquire_op("02", "bob", None),
            Op::Renew(Claim::new(REPO, "01", "alice", Some(0))),
            acquire_op("01", "carol", None),
        ];
        let mut pending = Vec::new();
        for op in ops {
            pending.push(service.submit(op).await.unwrap());
        }
        open_gate.send(()).unwrap();
        let mut outcomes = Vec::new();
        for reply in pending {
            outcomes.push(reply.await.unwrap());
        }
        assert_eq!(
            service.stats(),
            WriterStats { groups: 1, ops: 5 },
            "all five ran in one transaction"
        );
        assert_eq!(acquired(&outcomes[0]), Some((1, Some(T0 + 60))));
        let err = outcomes[1].as_ref().err().expect("empty holder fails");
        assert!(
            format!("{err:#}").contains("acquire lease on team/app#02"),
            "{err:#}"
        );
        assert_eq!(acquired(&outcomes[2]), Some((1, None)));
        let err = outcomes[3].as_ref().err().expect("zero ttl fails");
        assert!(format!("{err:#}").contains("positive"), "{err:#}");
        assert!(matches!(
            &outcomes[4],
            Ok(Outcome::Acquire(Acquire::Held { holder, .. })) if holder == "alice"
        ));
        drop(service);
        // On disk: alice's and bob's leases, with their tokens, and nothing else.
        let conn = leases::open(&path).unwrap();
        let live = leases::list(&conn, REPO, T0).unwrap();
        let got: Vec<_> = live
            .iter()
            .map(|l| {
                (
                    l.issue_id.as_str(),
                    l.holder.as_str(),
                    l.token,
                    l.expires_at,
                )
            })
            .collect();
        assert_eq!(
            got,
            [("01", "alice", 1, Some(T0 + 60)), ("02", "bob", 1, None)]
        );
    }

    #[tokio::test]
    async fn a_group_that_cannot_take_the_write_lock_fails_every_op_and_the_service_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        let conn = leases::open(&path).unwrap();
        conn.as_sqlite()
            .unwrap()
            .busy_timeout(Duration::from_millis(50))
            .unwrap();
        let (clock, _) = fixed_clock(T0);
        let (service, open_gate) = paused(conn, clock);
        // Another process holds the write lock for longer than busy_timeout.
        let intruder = leases::open(&path).unwrap();
        intruder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut pending = Vec::new();
        for issue in ["01", "02", "03"] {
            pending.push(
                service
                    .submit(acquire_op(issue, "alice", None))
                    .await
                    .unwrap(),
            );
        }
        open_gate.send(()).unwrap();
        for reply in pending {
            let err = reply.await.unwrap().err().expect("locked out");
            assert!(format!("{err:#}").contains("locked"), "{err:#}");
        }
        intruder.execute_batch("COMMIT").unwrap();
        // Nothing of the failed group was kept: the first tenure gets token 1.
        let outcome = service.acquire(REPO, "01", "bob", None).await.unwrap();
        assert_eq!(tenure(&outcome), Some((1, None)));
        assert_eq!(service.list(REPO).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn results_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("collab.db");
        {
            let service = Writer::open(&path).unwrap();
            service.acquire(REPO, "01", "alice", None).await.unwrap();
            service.release(REPO, "01", "alice").await.unwrap();
            service.acquire(REPO, "01", "bob", None).await.unwrap();
            service
                .acquire(REPO, "02", "carol", Some(3600))
                .await
                .unwrap();
        }
        let service = Writer::open(&path).unwrap();
        let live = service.list(REPO).await.unwrap();
        let got: Vec<_> = live
            .iter()
            .map(|l| (l.issue_id.as_str(), l.holder.as_str(), l.token))
            .collect();
        assert_eq!(got, [("01", "bob", 2), ("02", "carol", 1)]);
        service.release(REPO, "01", "bob").await.unwrap();
        assert_eq!(
            tenure(&service.acquire(REPO, "01", "dave", None).await.unwrap()),
            Some((3, None))
        );
    }

    #[tokio::test]
    async fn expiry_follows_the_service_clock_which_never_runs_backwards() {
        let dir = tempfile::tempdir().unwrap();
        let (clock, time) = fixed_clock(T0);
        let service = Writer::open_with_clock(dir.path().join("collab.db"), clock).unwrap();
        service
            .acquire(REPO, "01", "alice", Some(10))
            .await
            .unwrap();
        time.store(T0 + 10, Ordering::SeqCst);
        assert_eq!(service.current(REPO, "01").await.unwrap(), None);
        // The wall clock steps back; alice's lease stays expired.
        time.store(T0 + 5, Ordering::SeqCst);
        assert_eq!(
            service.renew(REPO, "01", "alice", 60).await.unwrap(),
            Renew::NotHolder { holder: None }
        );
        assert_eq!(
            tenure(&service.acquire(REPO, "01", "bob", Some(10)).await.unwrap()),
            Some((2, Some(T0 + 20)))
        );
    }

    /// What one storm task saw, in its own order.
    #[derive(Debug)]
    enum Seen {
        /// A new tenure began for this task.
        NewTenure { issue: usize, token: i64 },
        /// The task already held the issue; the token must be its tenure's.
        SameTenure { issue: usize, token: i64, held: i64 },
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn tokens_never_repeat_under_a_storm() {
        const TASKS: u64 = 8;
        const OPS: usize = 150;
        const ISSUES: usize = 3;
        let dir = tempfile::tempdir().unwrap();
        let (clock, _) = fixed_clock(T0);
        let service = Writer::open_with_clock(dir.path().join("collab.db"), clock).unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|seed| {
                let service = service.clone();
                tokio::spawn(async move {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                    let me = format!("agent-{seed}");
                    // The clock is frozen, so nothing expires: what this task
                    // holds follows from its own results alone.
                    let mut holding: BTreeMap<usize, i64> = BTreeMap::new();
                    let mut seen = Vec::new();
                    for _ in 0..OPS {
                        let issue = rng.random_range(0..ISSUES);
                        let id = format!("{issue:02}");
                        match rng.random_range(0..4) {
                            0 | 1 => {
                                let ttl = rng.random_bool(0.5).then_some(3600);
                                match service.acquire(REPO, &id, &me, ttl).await.unwrap() {
                                    Acquire::Acquired { lease, .. } => {
                                        let token = lease.token;
                                        seen.push(match holding.insert(issue, token) {
                                            Some(held) => Seen::SameTenure { issue, token, held },
                                            None => Seen::NewTenure { issue, token },
                                        })
                                    }
                                    Acquire::Locked { .. } => unreachable!("no lock delay"),
                                    Acquire::Held { holder, .. } => {
                                        assert!(!holding.contains_key(&issue));
                                        assert_ne!(holder, me);
                                    }
                                }
                            }
                            2 => match service.renew(REPO, &id, &me, 3600).await.unwrap() {
                                Renew::Renewed(Lease { token, .. }) => {
                                    let held = holding[&issue];
                                    seen.push(Seen::SameTenure { issue, token, held });
                                }
                                Renew::NotHolder { .. } => assert!(!holding.contains_key(&issue)),
                            },
                            _ => match service.release(REPO, &id, &me).await.unwrap() {
                                Release::Released => {
                                    holding.remove(&issue);
                                }
                                Release::NotHolder { holder } => {
                                    assert!(!holding.contains_key(&issue));
                                    assert_ne!(holder, me);
                                }
                            },
                        }
                    }
                    seen
                })
            })
            .collect();
        let mut tenures: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
        for task in tasks {
            let mut last_new: BTreeMap<usize, i64> = BTreeMap::new();
            for seen in task.await.unwrap() {
                match seen {
                    Seen::NewTenure { issue, token } => {
                        let before = last_new.insert(issue, token).unwrap_or(0);
                        assert!(token > before, "a task's tenures on #{issue} grow");
                        tenures.entry(issue).or_default().push(token);
                    }
                    Seen::SameTenure { issue, token, held } => {
                        assert_eq!(token, held, "idempotent op on #{issue} kept the token")
                    }
                }
            }
        }
        for (issue, mut tokens) in tenures {
            tokens.sort_unstable();
            let expected: Vec<i64> = (1..=tokens.len() as i64).collect();
            assert_eq!(
                tokens, expected,
                "#{issue}: each tenure got a fresh token, none skipped"
            );
            assert!(tokens.len() > 1, "the storm changed tenure on #{issue}");
        }
        let stats = service.stats();
        assert_eq!(stats.ops, TASKS * OPS as u64);
    }

    fn write_op(
        label: &str,
        f: impl FnOnce(&Connection, i64) -> anyhow::Result<i64> + Send + 'static,
    ) -> Op {
        Op::Write {
            label: label.into(),
            run: Box::new(move |conn, now, _| f(conn, now).map(|t| Box::new(t) as AnyOutcome)),
            exclusive: false,
        }
    }

    fn append_test_event(conn: &Connection, now: i64) -> anyhow::Result<i64> {
        let event = crate::event_log::NewEvent {
            kind: "test.event",
            repo: None,
            object_id: None,
            actor: None,
            payload: serde_json::json!({}),
        };
        Ok(crate::event_log::append(conn, &event, now)?)
    }

    fn written(outcome: anyhow::Result<Outcome>) -> anyhow::Result<i64> {
        match outcome? {
            Outcome::Write(any) => Ok(*any.downcast::<i64>().unwrap()),
            _ => unreachable!(),
        }
    }

    /// On PostgreSQL a group's runs of lease operations go as one call of
    /// `collab_lease_group` each; an operation that fails in it is undone
    /// there, the others run again without it in the same call, and it then
    /// runs alone, where it fails with its own error. Run the same groups
    /// with the statements one by one: the same outcomes and leases.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn on_postgres_pipelined_lease_calls_answer_as_the_statements_do() {
        use crate::sql::test_database::{off_runtime, wanted, TestDatabase};
        if !wanted() {
            return;
        }
        // The first group waits for the gate (one group: its call for 02
        // fails, so it runs one by one); the second is sent at once.
        let groups = || {
            vec![
                vec![
                    acquire_op("01", "alice", Some(60)),
                    // Spends a token, then breaks the holder CHECK.
                    acquire_op("02", "", None),
                    acquire_op("03", "dave", None),
                    acquire_op("04", "erin", Some(5)),
                    acquire_op("02", "bob", None),
                    Op::Renew(Claim::new(REPO, "01", "alice", Some(0))),
                    acquire_op("01", "carol", None),
                    Op::Renew(Claim::new(REPO, "03", "dave", Some(30))),
                ],
                vec![
                    Op::Release {
                        repo: REPO.into(),
                        issue_id: "01".into(),
                        holder: "alice".into(),
                    },
                    Op::Break {
                        repo: REPO.into(),
                        issue_id: "02".into(),
                        by: "admin".into(),
                        reason: "why".into(),
                    },
                    acquire_op("04", "frank", None),
                    Op::Renew(Claim::new(REPO, "03", "dave", Some(30))),
                ],
            ]
        };
        let show = |outcome: anyhow::Result<Outcome>| -> String {
            match outcome {
                Ok(Outcome::Acquire(a)) => format!("{a:?}"),
                Ok(Outcome::Renew(r)) => format!("{r:?}"),
                Ok(Outcome::Release(r)) => format!("{r:?}"),
                Ok(Outcome::Break(b)) => format!("{b:?}"),
                Ok(_) => "another outcome".into(),
                Err(e) => format!("error: {e}"),
            }
        };
        let mut answers = Vec::new();
        for statements in [false, true] {
            let db = off_runtime(TestDatabase::create);
            let url = db.url.clone();
            let conn = off_runtime(move || {
                let conn = Connection::open_postgres(&url).unwrap();
                crate::migrations::migrate(&conn).unwrap();
                conn.set_lease_statements(statements);
                conn
            });
            let (clock, time) = fixed_clock(T0);
            let (service, open_gate) = off_runtime(move || paused(conn, clock));
            let mut got = Vec::new();
            for (n, group) in groups().into_iter().enumerate() {
                time.store(T0 + 10 * n as i64, Ordering::SeqCst);
                let mut pending = Vec::new();
                for op in group {
                    pending.push(service.submit(op).await.unwrap());
                }
                if n == 0 {
                    open_gate.send(()).unwrap();
                }
                for reply in pending {
                    got.push(show(reply.await.unwrap()));
                }
            }
            let live = service.list(REPO).await.unwrap();
            got.push(format!("{live:?}"));
            answers.push(got);
            off_runtime(move || drop(service));
            off_runtime(move || drop(db));
        }
        assert_eq!(answers[0], answers[1]);
        let first = &answers[0];
        assert!(first[0].contains("fresh: true"), "{first:#?}");
        assert!(first[1].starts_with("error"), "{first:#?}");
        assert!(first[4].contains("fresh: true"), "{first:#?}");
        assert!(first[5].starts_with("error"), "{first:#?}");
        assert!(first[6].starts_with("Held"), "{first:#?}");
    }

    /// Three writers on one PostgreSQL database (three nodes' writers):
    /// 96 racers, spread over them, race for 8 issues, 12 for each, in 4
    /// rounds; each round every issue has exactly one winner, whom the
    /// losers name, its token is the round's (tokens grow by one per
    /// tenure, never repeat), and the winner releases through another node.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racers_on_three_writers_get_one_winner_per_issue_and_growing_tokens() {
        if !crate::sql::test_database::wanted() {
            return;
        }
        let db =
            crate::sql::test_database::off_runtime(crate::sql::test_database::TestDatabase::create);
        let url = db.url.clone();
        let nodes: Vec<Writer> = crate::sql::test_database::off_runtime(|| {
            (0..3)
                .map(|_| Writer::open(url.as_str()).unwrap())
                .collect()
        });
        let issues: Vec<String> = (0..8).map(|i| format!("{:02x}", 0xa0 + i)).collect();
        for round in 1..=4i64 {
            let racers: Vec<_> = (0..96)
                .map(|i| {
                    let node = nodes[i % 3].clone();
                    let issue = issues[i % 8].clone();
                    tokio::spawn(async move {
                        let holder = format!("agent-{i}");
                        let got = node.acquire(REPO, &issue, &holder, Some(600)).await;
                        (i, issue, holder, got.unwrap())
                    })
                })
                .collect();
            let mut winners: BTreeMap<String, Vec<(usize, String, i64)>> = BTreeMap::new();
            let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for racer in racers {
                match racer.await.unwrap() {
                    (i, issue, holder, Acquire::Acquired { lease, .. }) => winners
                        .entry(issue)
                        .or_default()
                        .push((i, holder, lease.token)),
                    (_, issue, _, Acquire::Held { holder, .. }) => {
                        named.entry(issue).or_default().insert(holder);
                    }
                    (_, _, _, other) => panic!("round {round}: {other:?}"),
                }
            }
            for issue in &issues {
                let won = &winners[issue];
                assert_eq!(won.len(), 1, "round {round}, #{issue}: one winner: {won:?}");
                let (i, holder, token) = &won[0];
                assert_eq!(
                    *token, round,
                    "round {round}, #{issue}: the token grows by one"
                );
                assert_eq!(
                    named[issue],
                    BTreeSet::from([holder.clone()]),
                    "round {round}, #{issue}: the losers name the winner"
                );
                let released = nodes[(i + 1) % 3]
                    .release(REPO, issue, holder)
                    .await
                    .unwrap();
                assert_eq!(released, Release::Released);
            }
        }
        let status = nodes[2].status(REPO, &issues[0]).await.unwrap();
        assert_eq!((status.last_token, status.live), (4, None));
        drop(nodes);
        drop(db);
    }

    /// Two nodes' writers whose groups take the same two issues in opposite
    /// orders (lease operations on both, or a generic write that waits for
    /// the issues' locks on one): no operation fails (on PostgreSQL a busy
    /// issue is deferred to the writer's next group instead of waited for,
    /// so no deadlock forms), and each issue ends with one holder.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn groups_taking_two_issues_in_opposite_orders_on_two_nodes_never_fail() {
        if !crate::sql::test_database::wanted() {
            return;
        }
        use crate::sql::test_database::{off_runtime, TestDatabase};
        let db = off_runtime(TestDatabase::create);
        let location = crate::sql::Location::parse(&db.url);
        for round in 0..12 {
            let (x, y) = (
                format!("{:02x}", 2 * round),
                format!("{:02x}", 2 * round + 1),
            );
            let (clock, _) = fixed_clock(T0 + round as i64);
            let (a, open_a, b, open_b) = off_runtime(|| {
                let (a, open_a) = paused(crate::connect::open(&location).unwrap(), clock.clone());
                let (b, open_b) = paused(crate::connect::open(&location).unwrap(), clock.clone());
                (a, open_a, b, open_b)
            });
            let mut pending = Vec::new();
            if round % 2 == 0 {
                for issue in [&x, &y] {
                    pending.push(
                        a.submit(acquire_op(issue, "alice", Some(60)))
                            .await
                            .unwrap(),
                    );
                }
            } else {
                // A generic write (an issue close ends its lease) waits for
                // each issue's lock, in the order x, y.
                let (x, y) = (x.clone(), y.clone());
                let op = write_op("close two issues", move |conn, now| {
                    leases::end_on_close_in(conn, REPO, &x, now)?;
                    leases::end_on_close_in(conn, REPO, &y, now)?;
                    Ok(0)
                });
                pending.push(a.submit(op).await.unwrap());
            }
            for issue in [&y, &x] {
                pending.push(b.submit(acquire_op(issue, "bob", Some(60))).await.unwrap());
            }
            for issue in [&y, &x] {
                pending.push(
                    b.submit(Op::Renew(Claim::new(REPO, issue, "bob", Some(90))))
                        .await
                        .unwrap(),
                );
            }
            open_a.send(()).unwrap();
            open_b.send(()).unwrap();
            for reply in pending {
                let outcome = reply.await.unwrap();
                assert!(
                    outcome.is_ok(),
                    "round {round}: {:#}",
                    outcome.err().unwrap()
                );
            }
            for issue in [&x, &y] {
                let holders: Vec<_> = b
                    .list(REPO)
                    .await
                    .unwrap()
                    .into_iter()
                    .filter(|l| &l.issue_id == issue)
                    .collect();
                assert!(holders.len() <= 1, "round {round}: {holders:?}");
            }
            off_runtime(move || {
                drop(a);
                drop(b);
            });
        }
        drop(db);
    }

    #[tokio::test]
    async fn generic_writes_commit_with_the_group_and_a_failing_one_rolls_back_alone() {
        let (clock, _) = fixed_clock(T0);
        let conn = Connection::open_in_memory().unwrap();
        leases::init_schema(&conn).unwrap();
        let (service, open_gate) = paused(conn, clock);
        let ok = service
            .submit(write_op("append", append_test_event))
            .await
            .unwrap();
        let bad = service
            .submit(write_op("append then fail", |conn, now| {
                append_test_event(conn, now)?;
                anyhow::bail!("refused")
            }))
            .await
            .unwrap();
        let count = service
            .submit(write_op("count", |conn, _| {
                Ok(
                    conn.query_row("SELECT COUNT(*) * 100 + MAX(seq) FROM events", [], |r| {
                        r.get(0)
                    })?,
                )
            }))
            .await
            .unwrap();
        open_gate.send(()).unwrap();
        assert_eq!(written(ok.await.unwrap()).unwrap(), 1);
        let refused = written(bad.await.unwrap()).unwrap_err();
        assert!(format!("{refused:#}").contains("refused"), "{refused:#}");
        assert_eq!(
            written(count.await.unwrap()).unwrap(),
            101,
            "one row, seq 1: the failed write left no row and no gap"
        );
        assert_eq!(service.stats().groups, 1, "all three rode one transaction");
        // The typed front door returns the closure's value after COMMIT.
        assert_eq!(service.write("append", append_test_event).await.unwrap(), 2);
    }

    /// The writer's backend terminated while idle (as a PostgreSQL restart
    /// or an administrator's `pg_terminate_backend` does): the next lease
    /// operation and the next generic write succeed on a new connection
    /// (the BEGIN is sent again there), nothing fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_terminated_connection_is_replaced_without_failing_a_write() {
        use crate::sql::test_database::{off_runtime, query_i64};
        let Some((db, service)) = postgres_writer() else {
            return;
        };
        let url = db.url.clone();
        let terminate = || {
            let cut = off_runtime(|| {
                query_i64(
                    &url,
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid()",
                )
                .unwrap()
            });
            assert!(cut >= 1, "the writer's backend was terminated");
            // The backend is gone once PostgreSQL has processed the signal.
            std::thread::sleep(std::time::Duration::from_millis(200));
        };
        let first = service.acquire(REPO, "i1", "alice", Some(600)).await;
        assert!(tenure(&first.unwrap()).is_some());
        terminate();
        let second = service.acquire(REPO, "i2", "alice", Some(600)).await;
        assert_eq!(tenure(&second.unwrap()).map(|t| t.0), Some(1));
        terminate();
        let appended = service.write("append", append_test_event).await;
        assert!(appended.is_ok(), "{appended:?}");
    }

    /// On PostgreSQL a repository write (`write_in`) takes its repository's
    /// lock, not the generic writes' key: while another transaction holds
    /// one repository's key (a push's records on another node), a write of
    /// another repository and a lease operation commit at once, and the
    /// held repository's write waits, deferred but never failed and never
    /// run while it waits, then commits once the key is free. While the
    /// generic writes' key is held exclusively (a write that may touch
    /// several repositories), every repository write waits for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn on_postgres_a_repository_write_waits_for_its_own_repository_only() {
        use crate::sql::test_database::off_runtime;
        use std::sync::atomic::AtomicUsize;
        let Some((db, service)) = postgres_writer() else {
            return;
        };
        let url = db.url.clone();
        // Another transaction holding `key` until told to end.
        let hold = |key: &str| {
            let (url, key) = (url.clone(), key.to_string());
            let (held_tx, held) = std::sync::mpsc::channel();
            let (end, end_rx) = std::sync::mpsc::channel::<()>();
            let holder = std::thread::spawn(move || {
                let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
                let mut tx = client.transaction().unwrap();
                tx.batch_execute(&format!("SELECT pg_advisory_xact_lock({key})"))
                    .unwrap();
                held_tx.send(()).unwrap();
                let _ = end_rx.recv();
                tx.commit().unwrap();
            });
            held.recv().unwrap();
            (end, holder)
        };
        let runs = Arc::new(AtomicUsize::new(0));
        let write = |repo: &'static str| {
            let (service, runs) = (service.clone(), Arc::clone(&runs));
            tokio::spawn(async move {
                service
                    .write_in(repo, "a repository write", move |conn, _| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(conn.query_row("SELECT 7", [], |r| r.get::<_, i64>(0))?)
                    })
                    .await
            })
        };
        let patient = Duration::from_secs(20);

        let (end, holder) = hold("hashtextextended('repository:' || 'team/app', 0)");
        let waiting = write("team/app");
        let other = tokio::time::timeout(patient, write("team/other")).await;
        assert_eq!(
            other
                .expect("another repository's write is not held up")
                .unwrap()
                .unwrap(),
            7
        );
        let lease = service.acquire("team/app", "i1", "alice", Some(600)).await;
        assert!(
            tenure(&lease.unwrap()).is_some(),
            "lease operations run beside it"
        );
        assert!(!waiting.is_finished(), "the held repository's write waits");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "and has not run yet");
        // Deferred often enough, it queues for the key (a lock request not
        // granted yet) instead of only trying it.
        let queued = || {
            crate::sql::test_database::query_i64(
                &url,
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            )
            .unwrap()
        };
        let deadline = std::time::Instant::now() + patient;
        while off_runtime(queued) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the write never queued for the key"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        end.send(()).unwrap();
        holder.join().unwrap();
        let waited = tokio::time::timeout(patient, waiting).await;
        assert_eq!(
            waited
                .expect("it commits once the key is free")
                .unwrap()
                .unwrap(),
            7
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2, "each write ran once");

        let (end, holder) = hold(&GENERIC_KEY.to_string());
        let waiting = write("team/other");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !waiting.is_finished(),
            "a write of several repositories excludes it"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        end.send(()).unwrap();
        holder.join().unwrap();
        let waited = tokio::time::timeout(patient, waiting).await;
        assert_eq!(waited.expect("then it commits").unwrap().unwrap(), 7);
        assert_eq!(runs.load(Ordering::SeqCst), 3);
    }

    /// On PostgreSQL every repository write runs holding its repository's
    /// lock, whether its savepoint tried it or an earlier write of the same
    /// group took it (`Alone::held_repos`), and also after a write of the
    /// group failed and rolled back: many writes of two repositories at
    /// once, some failing, each one looking for its lock among its own
    /// backend's granted locks.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn on_postgres_every_repository_write_holds_its_repositorys_lock() {
        let Some((_db, service)) = postgres_writer() else {
            return;
        };
        let writes: Vec<_> = (0..96)
            .map(|i| {
                let service = service.clone();
                let repo = if i % 3 == 0 { "team/a" } else { "team/b" };
                tokio::spawn(async move {
                    service
                        .write_in(repo, "look for the lock", move |conn, _| {
                            let held: i64 = conn.query_row(
                                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                                 AND pid = pg_backend_pid() AND granted \
                                 AND mode = 'ExclusiveLock' AND objsubid = 1 \
                                 AND ((classid::bigint << 32) | objid::bigint) \
                                     = hashtextextended('repository:' || ?1, 0)",
                                [repo],
                                |r| r.get(0),
                            )?;
                            anyhow::ensure!(i % 7 != 0, "write {i} fails after looking");
                            Ok(held)
                        })
                        .await
                })
            })
            .collect();
        let mut failed = 0;
        for (i, write) in writes.into_iter().enumerate() {
            match write.await.unwrap() {
                Ok(held) => assert_eq!(held, 1, "write {i} ran without its lock"),
                Err(e) => {
                    assert_eq!(i % 7, 0, "write {i}: {e:#}");
                    failed += 1;
                }
            }
        }
        assert_eq!(failed, 14);
        assert!(
            service.stats().groups < 96,
            "the writes shared groups, so some found their lock held already"
        );
    }

    /// On a PostgreSQL run: a fresh database (dropped with the value) and a
    /// writer on it, opened off the runtime as the synchronous client
    /// needs. `None` on a SQLite run.
    fn postgres_writer() -> Option<(crate::sql::test_database::TestDatabase, Writer)> {
        use crate::sql::test_database::{off_runtime, wanted, TestDatabase};
        if !wanted() {
            return None;
        }
        let db = off_runtime(TestDatabase::create);
        let service = off_runtime(|| Writer::open(db.url.as_str()).unwrap());
        Some((db, service))
    }

    /// `pg::GENERIC_WRITES_LOCK`, which is private to the backend.
    const GENERIC_KEY: i64 = 0x7772_6974_6573;
}
