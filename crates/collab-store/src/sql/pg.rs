//! The PostgreSQL side of the storage interface: a synchronous `postgres`
//! client (it runs on the writer thread and the blocking pool, never on an
//! async worker), `?N` placeholders rewritten to `$N`, values converted by
//! the column and parameter types the server reports, statements cached per
//! connection, and a connection that reconnects between transactions when
//! the server went away (docs/postgres.md, "Faults of the database").

use std::cell::{Cell, RefCell, RefMut};
use std::collections::HashMap;

use bytes::BytesMut;
use postgres::types::{IsNull, Type};

use super::error::{describe, is_connection, Error, Result};
use super::types::{Behavior, LeaseCall, StatementCache};
use super::value::ValueRef;

/// The global key ("collab"), transaction-scoped: every write transaction
/// takes it first, on every node. Ordinary writers take it SHARED
/// (`pg_advisory_xact_lock_shared`), so they do not exclude each other;
/// whole-database operations ([`Behavior::Exclusive`]: migrations, `db
/// migrate`'s copy, a repository rename) take it EXCLUSIVE and so exclude
/// every writer. Released by COMMIT or ROLLBACK, and by the server when a
/// node's connection dies, so a killed node never holds it.
pub const WRITE_LOCK: i64 = 0x636f_6c6c_6162; // "collab"

/// The key ("writes") that serializes the generic writes that may touch
/// several repositories ([`Behavior::Immediate`]: webhooks, mirrors,
/// imports, server merges, ...), taken EXCLUSIVE: their closures run once
/// and take row locks in any order, so two of them in parallel could
/// deadlock. Repository writes take it SHARED with their repository's key
/// (`PgConnection::lock_repository`), so they run beside each other but
/// never beside an exclusive holder. Lease operations never take it.
pub const GENERIC_WRITES_LOCK: i64 = 0x7772_6974_6573; // "writes"

/// How long a statement of a [`Behavior::Concurrent`] transaction waits for
/// a row lock before it fails as busy (and its operation is deferred to
/// the writer's next group): such a transaction never waits long on
/// anything, so it is never part of a deadlock that lasts.
const CONCURRENT_LOCK_TIMEOUT: &str = "200ms";

/// How long a repository write deferred many times waits in the lock
/// queue for its repository at the head of a writer's group
/// (`PgConnection::savepoint_locking_repository`) before it is deferred
/// again: about one group of another node.
const REPOSITORY_WAIT: &str = "20ms";

/// Statements cached per connection before the cache starts over (the
/// domain code has a bounded set of statement shapes; this bounds a leak).
const MAX_CACHED: usize = 512;

/// How long a connection attempt to one host may take when the URL sets no
/// `connect_timeout`: a host that does not answer (a dead primary's
/// address) must not hold the writer for the kernel's TCP timeout, and with
/// several hosts the next one is tried after it.
const DEFAULT_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct PgConnection {
    url: String,
    /// Always `Some` until drop (see `Drop`).
    client: RefCell<Option<postgres::Client>>,
    statements: StatementCache,
    in_tx: Cell<bool>,
    /// The connection failed in a way that makes it useless (lost, or on a
    /// server that no longer takes writes): the next use outside a
    /// transaction connects again.
    broken: Cell<bool>,
    /// Channels to NOTIFY when the open transaction commits.
    notify_at_commit: RefCell<Vec<&'static str>>,
    /// How the open transaction began.
    behavior: Cell<Option<Behavior>>,
    /// This connection's backend process id (the high half of its
    /// provisional event numbers).
    backend_pid: Cell<i64>,
    /// Provisional event numbers handed out on this connection so far (the
    /// low half; never reset, so a number is unique per connection).
    provisional: Cell<u32>,
    /// The low half of the open transaction's first provisional number
    /// (the next one when it began).
    tx_first: Cell<u32>,
    /// The open transaction appended events with provisional numbers.
    numbered_late: Cell<bool>,
    /// Provisional to final event numbers of the last committed transaction.
    final_seqs: RefCell<HashMap<i64, i64>>,
    /// The issue or repository whose lock [`PgConnection::savepoint_locking`]
    /// or [`PgConnection::savepoint_locking_repository`] took in the
    /// savepoint's own round trip; the next `lock_issue` or
    /// `lock_repository` of it is answered without another.
    pre_locked: RefCell<Option<PreLocked>>,
    /// The writer's savepoint for the next operation, not sent yet
    /// (`Some(release_first)`, see [`PgConnection::defer_savepoint`]): the
    /// operation's first statement carries it.
    pending_savepoint: Cell<Option<bool>>,
    /// Lease operations run their statements one by one instead of their
    /// function (`GIT_COLLAB_PG_LEASE_STATEMENTS=1` at connect, or
    /// [`PgConnection::set_lease_statements`]).
    lease_statements: Cell<bool>,
}

/// A lock taken in a savepoint's round trip (see `PgConnection::pre_locked`).
#[derive(Debug, PartialEq, Eq)]
enum PreLocked {
    Issue { repo: String, issue_id: String },
    Repository(String),
}

/// The environment variable that makes lease operations on PostgreSQL run
/// their statements one by one (the path before version 16's functions),
/// for comparing the two: `1` turns it on.
pub const LEASE_STATEMENTS_ENV: &str = "GIT_COLLAB_PG_LEASE_STATEMENTS";

impl PgConnection {
    pub fn connect(url: &str) -> Result<PgConnection> {
        let mut client = connect(url)?;
        let pid = backend_pid(&mut client)?;
        Ok(PgConnection {
            url: url.to_string(),
            client: RefCell::new(Some(client)),
            statements: RefCell::new(HashMap::new()),
            in_tx: Cell::new(false),
            broken: Cell::new(false),
            notify_at_commit: RefCell::new(Vec::new()),
            behavior: Cell::new(None),
            backend_pid: Cell::new(pid),
            provisional: Cell::new(0),
            tx_first: Cell::new(1),
            numbered_late: Cell::new(false),
            final_seqs: RefCell::new(HashMap::new()),
            pre_locked: RefCell::new(None),
            pending_savepoint: Cell::new(None),
            lease_statements: Cell::new(
                std::env::var_os(LEASE_STATEMENTS_ENV).is_some_and(|v| v == "1"),
            ),
        })
    }

    /// Whether lease operations run their statements one by one rather
    /// than as one call of their function.
    pub fn lease_statements(&self) -> bool {
        self.lease_statements.get()
    }

    pub fn set_lease_statements(&self, on: bool) {
        self.lease_statements.set(on);
    }

    /// The client, reconnected first if the server closed it (or it failed
    /// as [`is_connection`] says) while no transaction was open: a
    /// restarted PostgreSQL, a terminated backend, a failover. Inside a
    /// transaction a lost connection is the transaction's failure.
    fn client(&self) -> Result<RefMut<'_, postgres::Client>> {
        let mut client = self.raw_client();
        if (client.is_closed() || self.broken.get()) && !self.in_tx.get() {
            let mut fresh = connect(&self.url)?;
            self.backend_pid.set(backend_pid(&mut fresh)?);
            *client = fresh;
            self.broken.set(false);
            self.statements.borrow_mut().clear();
        }
        if let Some(sql) = self.take_pending_savepoint() {
            client.batch_execute(sql).map_err(|e| self.seen(e))?;
        }
        Ok(client)
    }

    /// In a transaction: open the savepoint `lease_op` for the next
    /// operation (releasing the open one first when `release_first`), but
    /// send it with the operation's first statement rather than in a round
    /// trip of its own: [`PgConnection::call_row`] puts it in front of its
    /// call, any other statement sends it first. Deferred twice without a
    /// statement between, the savepoint is opened once.
    pub fn defer_savepoint(&self, release_first: bool) {
        self.pre_locked.borrow_mut().take();
        let pending = self.pending_savepoint.get().unwrap_or(release_first);
        self.pending_savepoint.set(Some(pending));
    }

    /// The deferred savepoint's SQL, if one is pending (in a transaction).
    fn take_pending_savepoint(&self) -> Option<&'static str> {
        match self.pending_savepoint.take() {
            _ if !self.in_tx.get() => None,
            Some(true) => Some("RELEASE lease_op; SAVEPOINT lease_op; "),
            Some(false) => Some("SAVEPOINT lease_op; "),
            None => None,
        }
    }

    /// `SELECT * FROM function(args…, try)` in one round trip, with a
    /// deferred savepoint in front of it (the simple query protocol, the
    /// arguments as literals; the last argument, added here, says whether
    /// the function only tries the issue's lock: in a
    /// [`Behavior::Concurrent`] transaction). The first row's columns as
    /// text; `Ok(None)` when an argument cannot be a literal (a NUL, a
    /// real, a blob): nothing was sent, and the caller goes its own way.
    pub fn call_row(
        &self,
        function: &str,
        args: &[ValueRef<'_>],
    ) -> Result<Option<Vec<Option<String>>>> {
        let Some(sql) = self.call_sql(function, args) else {
            return Ok(None);
        };
        self.pre_locked.borrow_mut().take();
        let savepoint = self.take_pending_savepoint().unwrap_or("");
        let messages = self.client()?.simple_query(&format!("{savepoint}{sql}"));
        for message in messages.map_err(|e| self.seen(e))? {
            if let postgres::SimpleQueryMessage::Row(row) = message {
                let columns = (0..row.len())
                    .map(|i| row.get(i).map(str::to_string))
                    .collect();
                return Ok(Some(columns));
            }
        }
        Err(Error::QueryReturnedNoRows)
    }

    /// `e` as this interface's error, noting a lost connection (the next
    /// use outside a transaction reconnects).
    fn seen(&self, e: postgres::Error) -> Error {
        if is_connection(&e) {
            self.broken.set(true);
        }
        e.into()
    }

    fn raw_client(&self) -> RefMut<'_, postgres::Client> {
        RefMut::map(self.client.borrow_mut(), |c| {
            c.as_mut().expect("the client lives until drop")
        })
    }

    pub fn in_transaction(&self) -> bool {
        self.in_tx.get()
    }

    pub fn batch(&self, sql: &str) -> Result<()> {
        let result = self.client()?.batch_execute(sql);
        result.map_err(|e| self.seen(e))
    }

    pub fn begin(&self, behavior: Behavior) -> Result<()> {
        let sql = match behavior {
            Behavior::Deferred => "BEGIN".to_string(),
            Behavior::Concurrent => format!(
                "BEGIN; SET LOCAL lock_timeout = '{CONCURRENT_LOCK_TIMEOUT}'; \
                 SELECT pg_advisory_xact_lock_shared({WRITE_LOCK})"
            ),
            Behavior::Immediate => format!(
                "BEGIN; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK}); \
                 SELECT pg_advisory_xact_lock({GENERIC_WRITES_LOCK})"
            ),
            Behavior::Repository => format!(
                "BEGIN; SELECT pg_advisory_xact_lock_shared({WRITE_LOCK}); \
                 SELECT pg_advisory_xact_lock_shared({GENERIC_WRITES_LOCK})"
            ),
            Behavior::Exclusive => format!("BEGIN; SELECT pg_advisory_xact_lock({WRITE_LOCK})"),
        };
        self.start(&sql)?;
        self.behavior.set(Some(behavior));
        Ok(())
    }

    /// Take the issue's lock (transaction-scoped advisory lock keyed by a
    /// 64-bit hash of `len(repo):repo` followed by `issue_id`, which no other
    /// pair spells: PostgreSQL text cannot hold the NUL the design named). In a
    /// [`Behavior::Concurrent`] transaction it is only tried: `false` means
    /// another transaction holds it (the caller defers or moves on). In any
    /// other transaction it waits and returns `true`.
    pub fn lock_issue(&self, repo: &str, issue_id: &str) -> Result<bool> {
        let try_only = self.behavior.get() == Some(Behavior::Concurrent);
        self.issue_lock(repo, issue_id, try_only)
    }

    /// [`Self::lock_issue`], only tried whatever the transaction: `next`
    /// passes over a candidate another transaction is deciding rather than
    /// wait for it (in a group that waits for locks, one held long would
    /// otherwise hold the node's writer with it).
    pub fn try_lock_issue(&self, repo: &str, issue_id: &str) -> Result<bool> {
        self.issue_lock(repo, issue_id, true)
    }

    fn issue_lock(&self, repo: &str, issue_id: &str, try_only: bool) -> Result<bool> {
        let pre_locked = self.pre_locked.borrow_mut().take();
        if matches!(pre_locked, Some(PreLocked::Issue { repo: r, issue_id: i }) if r == repo && i == issue_id)
        {
            return Ok(true);
        }
        let sql = if try_only {
            "SELECT pg_try_advisory_xact_lock(hashtextextended(length($1) || ':' || $1 || $2, 0))"
        } else {
            "SELECT pg_advisory_xact_lock(hashtextextended(length($1) || ':' || $1 || $2, 0))"
        };
        let stmt = self.cached(sql)?;
        let row = self.client()?.query_one(&stmt, &[&repo, &issue_id]);
        let row = row.map_err(|e| self.seen(e))?;
        Ok(!try_only || row.get::<_, bool>(0))
    }

    /// Take the repository's lock (see `Connection::lock_repository`):
    /// tried with the generic writes' key shared in a
    /// [`Behavior::Concurrent`] transaction, waited for in a
    /// [`Behavior::Repository`] one (which holds that key since BEGIN),
    /// nothing in the others.
    pub fn lock_repository(&self, repo: &str) -> Result<bool> {
        let pre_locked = self.pre_locked.borrow_mut().take();
        if matches!(pre_locked, Some(PreLocked::Repository(r)) if r == repo) {
            return Ok(true);
        }
        let row = match self.behavior.get() {
            // The CASE tries the repository's key only once the shared key
            // is held: a refusal holds neither for long (the caller rolls
            // back to its savepoint, which releases both).
            Some(Behavior::Concurrent) => {
                let stmt = self.cached(
                    "SELECT CASE WHEN pg_try_advisory_xact_lock_shared(CAST($2 AS BIGINT)) \
                     THEN pg_try_advisory_xact_lock(hashtextextended('repository:' || $1, 0)) \
                     ELSE false END",
                )?;
                self.client()?
                    .query_one(&stmt, &[&repo, &GENERIC_WRITES_LOCK])
            }
            Some(Behavior::Repository) => {
                let stmt = self.cached(
                    "SELECT true FROM (SELECT pg_advisory_xact_lock(\
                     hashtextextended('repository:' || $1, 0))) AS taken",
                )?;
                self.client()?.query_one(&stmt, &[&repo])
            }
            _ => return Ok(true),
        };
        Ok(row.map_err(|e| self.seen(e))?.get::<_, bool>(0))
    }

    /// In a [`Behavior::Concurrent`] transaction: release the savepoint
    /// `lease_op` (when `release_first`), open it again and try the issue's
    /// lock, all in one round trip (the simple query protocol, with the
    /// names as escaped literals). Taken, the operation's own `lock_issue`
    /// costs nothing; not taken, it tries again and finds the issue busy.
    pub fn savepoint_locking(&self, release_first: bool, repo: &str, issue_id: &str) -> Result<()> {
        let try_lock = match (literal(repo), literal(issue_id)) {
            (Some(r), Some(i)) => Some(format!(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(length({r}) || ':' || {r} || {i}, 0))"
            )),
            _ => None,
        };
        let locked = PreLocked::Issue {
            repo: repo.to_string(),
            issue_id: issue_id.to_string(),
        };
        self.savepoint_trying(release_first, try_lock, locked)
    }

    /// See `Connection::holds_repository`.
    pub fn holds_repository(&self, repo: &str) {
        *self.pre_locked.borrow_mut() = Some(PreLocked::Repository(repo.to_string()));
    }

    /// [`PgConnection::savepoint_locking`] for a repository write: the
    /// savepoint and the try of its repository's lock (as
    /// [`PgConnection::lock_repository`] tries it) in one round trip. With
    /// `wait`, the locks are waited for instead, for at most
    /// [`REPOSITORY_WAIT`] (an error for which `Error::is_busy` holds when
    /// it runs out; the savepoint is open, and the caller rolls back to it).
    pub fn savepoint_locking_repository(
        &self,
        release_first: bool,
        repo: &str,
        wait: bool,
    ) -> Result<()> {
        let try_lock = literal(repo).map(|r| {
            if wait {
                // A short wait: the writer's group waits with it, and a
                // holder of one repository must not stall the node's other
                // writes for long. Rolling back to the savepoint undoes
                // the SET LOCAL too.
                format!(
                    "SET LOCAL lock_timeout = '{REPOSITORY_WAIT}'; \
                     SELECT pg_advisory_xact_lock_shared({GENERIC_WRITES_LOCK}); \
                     SELECT true FROM (SELECT pg_advisory_xact_lock(\
                     hashtextextended('repository:' || {r}, 0))) AS taken; \
                     SET LOCAL lock_timeout = '{CONCURRENT_LOCK_TIMEOUT}'"
                )
            } else {
                format!(
                    "SELECT CASE WHEN pg_try_advisory_xact_lock_shared({GENERIC_WRITES_LOCK}) \
                     THEN pg_try_advisory_xact_lock(hashtextextended('repository:' || {r}, 0)) \
                     ELSE false END"
                )
            }
        });
        self.savepoint_trying(
            release_first,
            try_lock,
            PreLocked::Repository(repo.to_string()),
        )
    }

    /// Release `lease_op` (when `release_first`), open it again and run
    /// `try_lock` (a `SELECT` of one boolean) in one simple-query round
    /// trip; `true` notes `locked` as taken.
    fn savepoint_trying(
        &self,
        release_first: bool,
        try_lock: Option<String>,
        locked: PreLocked,
    ) -> Result<()> {
        self.pre_locked.borrow_mut().take();
        let release = if release_first {
            "RELEASE lease_op; "
        } else {
            ""
        };
        let Some(try_lock) = try_lock else {
            // Not expressible as a literal (a NUL): the lock goes its own way.
            return self.batch(&format!("{release}SAVEPOINT lease_op"));
        };
        let sql = format!("{release}SAVEPOINT lease_op; {try_lock}");
        let messages = self.client()?.simple_query(&sql);
        let got = messages.map_err(|e| self.seen(e))?.iter().any(
            |m| matches!(m, postgres::SimpleQueryMessage::Row(row) if row.get(0) == Some("t")),
        );
        if got {
            *self.pre_locked.borrow_mut() = Some(locked);
        }
        Ok(())
    }

    /// The next provisional event number of the open transaction (see
    /// `event_log::append`): negative, unique among the transactions in
    /// flight (the backend's pid in the high half), decreasing in append
    /// order. `None` outside a transaction.
    pub fn provisional_seq(&self) -> Option<i64> {
        if !self.in_tx.get() {
            return None;
        }
        let n = self.provisional.get().wrapping_add(1).max(1);
        self.provisional.set(n);
        self.numbered_late.set(true);
        Some(-((self.backend_pid.get() << 32) | i64::from(n)))
    }

    /// `SELECT * FROM function(args…, try)` with the arguments as literals;
    /// `None` if one cannot be.
    fn call_sql(&self, function: &str, args: &[ValueRef<'_>]) -> Option<String> {
        let mut sql = format!("SELECT * FROM {function}(");
        for arg in args {
            match arg {
                ValueRef::Null => sql.push_str("NULL"),
                ValueRef::Integer(i64::MIN) => sql.push_str("'-9223372036854775808'::bigint"),
                ValueRef::Integer(v) => sql.push_str(&v.to_string()),
                ValueRef::Text(t) => sql.push_str(&literal(t)?),
                ValueRef::Real(_) | ValueRef::Blob(_) => return None,
            }
            sql.push_str(", ");
        }
        let try_only = self.behavior.get() == Some(Behavior::Concurrent);
        sql.push_str(if try_only { "true)" } else { "false)" });
        Some(sql)
    }

    /// Lease operations as one call of `collab_lease_group`, a statement
    /// prepared once per connection (the extended protocol: Bind, Execute,
    /// Sync, one round trip; the arrays and numbers bound as binary
    /// values, nothing parsed or planned per call). The function runs the
    /// operations in order under one subtransaction; one that fails is
    /// undone with that subtransaction, answered with its SQLSTATE, and the
    /// others run again without it, all inside the same call. Each
    /// operation's answer, its columns as text.
    pub fn call_group(
        &self,
        calls: &[LeaseCall<'_>],
        max_lifetime: Option<i64>,
        lock_delay: i64,
        now: i64,
    ) -> Result<Vec<Vec<Option<String>>>> {
        if let Some(call) = calls.iter().find(|c| !c.sendable()) {
            return Err(Error::failure(format!(
                "lease call on {}#{}: a text holds a NUL",
                call.repo, call.issue_id
            )));
        }
        let kinds: Vec<&str> = calls.iter().map(|c| c.kind).collect();
        let repos: Vec<&str> = calls.iter().map(|c| c.repo).collect();
        let issues: Vec<&str> = calls.iter().map(|c| c.issue_id).collect();
        let holders: Vec<&str> = calls.iter().map(|c| c.holder).collect();
        let ttls: Vec<Option<i64>> = calls.iter().map(|c| c.ttl).collect();
        let notes: Vec<Option<&str>> = calls.iter().map(|c| c.note).collect();
        let reasons: Vec<Option<&str>> = calls.iter().map(|c| c.reason).collect();
        let seq1: Vec<Option<i64>> = calls.iter().map(|c| c.seq1).collect();
        let seq2: Vec<Option<i64>> = calls.iter().map(|c| c.seq2).collect();
        let try_only = self.behavior.get() == Some(Behavior::Concurrent);
        let stmt = self.cached(
            "SELECT * FROM collab_lease_group(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        )?;
        self.pre_locked.borrow_mut().take();
        let rows = self.client()?.query(
            &stmt,
            &[
                &kinds,
                &repos,
                &issues,
                &holders,
                &ttls,
                &notes,
                &reasons,
                &seq1,
                &seq2,
                &max_lifetime,
                &lock_delay,
                &now,
                &try_only,
            ],
        );
        let rows = rows.map_err(|e| self.seen(e))?;
        if rows.len() != calls.len() {
            return Err(Error::failure(format!(
                "{} lease calls answered {} rows",
                calls.len(),
                rows.len()
            )));
        }
        rows.iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| match *row.columns()[i].type_() {
                        Type::INT8 => row
                            .try_get::<_, Option<i64>>(i)
                            .map(|v| v.map(|v| v.to_string())),
                        _ => row.try_get::<_, Option<String>>(i),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(Error::from)
            })
            .collect()
    }

    /// The next provisional event number, for an event a server-side
    /// function may append ([`PgConnection::call_row`]): like
    /// [`PgConnection::provisional_seq`], but the transaction counts as
    /// numbering late only once [`PgConnection::appended_late`] says an
    /// event was appended (a number not used is simply skipped at COMMIT).
    pub fn reserve_seq(&self) -> Option<i64> {
        if !self.in_tx.get() {
            return None;
        }
        let n = self.provisional.get().wrapping_add(1).max(1);
        self.provisional.set(n);
        Some(-((self.backend_pid.get() << 32) | i64::from(n)))
    }

    /// The open transaction appended events with numbers of
    /// [`PgConnection::reserve_seq`].
    pub fn appended_late(&self) {
        if self.in_tx.get() {
            self.numbered_late.set(true);
        }
    }

    /// The final number of an event appended with provisional number `seq`
    /// in the last committed transaction (`seq` itself when it is not
    /// provisional or unknown).
    pub fn final_seq(&self, seq: i64) -> i64 {
        if seq >= 0 {
            return seq;
        }
        self.final_seqs.borrow().get(&seq).copied().unwrap_or(seq)
    }

    /// Provisional to final numbers of the last committed transaction.
    pub fn final_seqs(&self) -> HashMap<i64, i64> {
        self.final_seqs.borrow().clone()
    }

    fn cached(&self, sql: &str) -> Result<postgres::Statement> {
        Ok(self.prepare(sql)?.stmt)
    }

    pub fn begin_read(&self) -> Result<()> {
        self.start("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    }

    /// BEGIN (with `sql`'s locks). A connection found lost here (it died
    /// while idle: a restart, a terminated backend) is replaced and the
    /// BEGIN sent once more: nothing of the transaction ran yet.
    fn start(&self, sql: &str) -> Result<()> {
        let mut retried = false;
        loop {
            self.pre_locked.borrow_mut().take();
            self.pending_savepoint.set(None);
            let mut client = self.client()?;
            self.in_tx.set(true);
            self.behavior.set(None);
            self.numbered_late.set(false);
            self.tx_first
                .set(self.provisional.get().wrapping_add(1).max(1));
            self.notify_at_commit.borrow_mut().clear();
            match client.batch_execute(sql) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    // The BEGIN may have run before the failure: end it.
                    let _ = client.batch_execute("ROLLBACK");
                    self.in_tx.set(false);
                    drop(client);
                    let lost = is_connection(&e);
                    let e = self.seen(e);
                    if lost && !retried {
                        retried = true;
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }

    /// COMMIT or ROLLBACK. The transaction is over either way (a failed
    /// COMMIT rolled back).
    pub fn end(&self, sql: &str) -> Result<()> {
        self.pre_locked.borrow_mut().take();
        // A savepoint no statement needed: COMMIT or ROLLBACK ends it all.
        self.pending_savepoint.set(None);
        self.in_tx.set(false);
        self.behavior.set(None);
        let numbered_late = self.numbered_late.replace(false);
        let channels = std::mem::take(&mut *self.notify_at_commit.borrow_mut());
        let mut client = self.raw_client();
        if client.is_closed() || self.broken.get() {
            // COMMIT was never sent: PostgreSQL rolled the transaction back
            // when the connection went.
            self.broken.set(true);
            return Err(Error::Unavailable(
                "the PostgreSQL connection was lost inside the transaction".into(),
            ));
        }
        let committing = sql == "COMMIT";
        let result = if committing && numbered_late {
            self.commit_numbering(&mut client, &channels)
        } else if committing && !channels.is_empty() {
            // In the COMMIT's own round trip; delivered only if it commits.
            let notifies: String = channels.iter().map(|c| format!("NOTIFY {c}; ")).collect();
            client
                .batch_execute(&format!("{notifies}COMMIT"))
                .map_err(Error::from)
        } else {
            client.batch_execute(sql).map_err(Error::from)
        };
        match result {
            Err(Error::Postgres(e)) if is_connection(&e) => {
                self.broken.set(true);
                if committing {
                    // Sent, and no answer: it may have committed.
                    Err(Error::CommitUnknown(describe(&e)))
                } else {
                    Err(e.into())
                }
            }
            other => other,
        }
    }

    /// COMMIT a transaction that appended events with provisional numbers,
    /// in one round trip: bump the `counters` row by the number of events
    /// the transaction kept (a rolled-back savepoint took its rows with it),
    /// renumber them `head+1..` in append order, NOTIFY, COMMIT. The row
    /// lock on `counters` is held from that statement to COMMIT only, so
    /// transactions that hold numbers commit in number order: the next one
    /// gets its numbers only after this one committed or rolled back. The
    /// wait for it is not bounded by the transaction's `lock_timeout`: the
    /// holder waits for nothing but its own COMMIT.
    fn commit_numbering(&self, client: &mut postgres::Client, channels: &[&str]) -> Result<()> {
        let high = self.backend_pid.get() << 32;
        // The provisional numbers this transaction handed out: only its
        // rows carry them (earlier transactions of this backend used lower
        // low halves and renumbered theirs in their COMMIT's round trip, or
        // rolled them back). Not the backend's whole range: the index
        // entries of earlier transactions' renumbered rows stay until
        // vacuum, and while another transaction's snapshot holds them back
        // (docs/postgres.md, "Faults of the database") scanning them
        // made every COMMIT slower than the last. After the low half
        // wrapped within the transaction, the whole range.
        let (first, last) = (self.tx_first.get(), self.provisional.get());
        let (lo, hi) = if first <= last {
            (-(high | i64::from(last)), -(high | i64::from(first)))
        } else {
            (-(high | 0xffff_ffff), -high)
        };
        let notifies: String = channels.iter().map(|c| format!("NOTIFY {c}; ")).collect();
        let sql = format!(
            "SET LOCAL lock_timeout = 0;
             UPDATE counters SET value = value +
               (SELECT count(*) FROM events WHERE seq BETWEEN {lo} AND {hi})
             WHERE name = 'events';
             UPDATE events e SET seq = f.final
             FROM (SELECT seq AS provisional,
                          (SELECT value FROM counters WHERE name = 'events')
                            - count(*) OVER () + row_number() OVER (ORDER BY seq DESC) AS final
                   FROM events WHERE seq BETWEEN {lo} AND {hi}) f
             WHERE e.seq = f.provisional
             RETURNING f.provisional, f.final;
             {notifies}COMMIT"
        );
        let messages = match client.simple_query(&sql) {
            Ok(messages) => messages,
            Err(e) => {
                // A statement failed before COMMIT ran: end the aborted
                // transaction (nothing was kept).
                let _ = client.batch_execute("ROLLBACK");
                return Err(e.into());
            }
        };
        let mut map = self.final_seqs.borrow_mut();
        map.clear();
        for message in messages {
            if let postgres::SimpleQueryMessage::Row(row) = message {
                let number = |i: usize| -> Result<i64> {
                    row.get(i)
                        .and_then(|v| v.parse().ok())
                        .ok_or_else(|| Error::conversion("event renumbering: not a number"))
                };
                map.insert(number(0)?, number(1)?);
            }
        }
        Ok(())
    }

    /// NOTIFY `channel` once the open transaction commits (at once outside
    /// one). Asked for several times, it notifies once: one round trip per
    /// transaction, not per event. (Asked for by an operation whose
    /// savepoint was then rolled back, the commit still notifies: a
    /// listener reads the head, finds nothing new, and that is all.)
    pub fn notify(&self, channel: &'static str) -> Result<()> {
        if !self.in_tx.get() {
            return self.batch(&format!("NOTIFY {channel}"));
        }
        let mut channels = self.notify_at_commit.borrow_mut();
        if !channels.contains(&channel) {
            channels.push(channel);
        }
        Ok(())
    }

    pub fn prepare(&self, sql: &str) -> Result<PgStatement<'_>> {
        let mut client = self.client()?;
        if let Some(stmt) = self.statements.borrow().get(sql) {
            return Ok(PgStatement {
                conn: self,
                stmt: stmt.clone(),
            });
        }
        let stmt = client
            .prepare(&placeholders(sql))
            .map_err(|e| self.seen(e))?;
        let mut cache = self.statements.borrow_mut();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(sql.to_string(), stmt.clone());
        Ok(PgStatement { conn: self, stmt })
    }
}

impl Drop for PgConnection {
    /// Closing a client blocks on its own runtime, which panics on an async
    /// worker thread (where a pool or a task may drop its last handle):
    /// there, the close happens on a thread of its own.
    fn drop(&mut self) {
        if let Some(client) = self.client.get_mut().take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _ = std::thread::Builder::new()
                    .name("pg-close".into())
                    .spawn(move || drop(client));
            }
        }
    }
}

/// Connect with the URL's TLS parameters (`tls`): rustls unless
/// `sslmode=disable`. A certificate that fails verification is an error
/// naming the reason.
pub(super) fn connect(url: &str) -> Result<postgres::Client> {
    let (url, params) = super::tls::split(url).map_err(Error::failure)?;
    let mut config: postgres::Config = url.parse()?;
    config.ssl_mode(params.ssl_mode());
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
    }
    let connected = match params.connector().map_err(Error::failure)? {
        None => config.connect(postgres::NoTls),
        Some(tls) => config.connect(tls),
    };
    connected.map_err(|e| match super::tls::explain(&e) {
        Some(reason) => Error::failure(reason),
        None => e.into(),
    })
}

fn backend_pid(client: &mut postgres::Client) -> Result<i64> {
    let pid: i32 = client.query_one("SELECT pg_backend_pid()", &[])?.get(0);
    Ok(i64::from(pid))
}

/// `s` as an escape-string literal (`E'…'`, read the same whatever
/// `standard_conforming_strings` says); `None` if it holds a NUL, which no
/// PostgreSQL text can.
fn literal(s: &str) -> Option<String> {
    if s.contains('\0') {
        return None;
    }
    Some(format!(
        "E'{}'",
        s.replace('\\', "\\\\").replace('\'', "''")
    ))
}

pub struct PgStatement<'c> {
    conn: &'c PgConnection,
    stmt: postgres::Statement,
}

impl PgStatement<'_> {
    pub fn execute(&mut self, values: &[ValueRef<'_>]) -> Result<usize> {
        let params = bind(values);
        let n = self.conn.client()?.execute(&self.stmt, &refs(&params));
        Ok(n.map_err(|e| self.conn.seen(e))? as usize)
    }

    pub fn query(&mut self, values: &[ValueRef<'_>]) -> Result<Vec<postgres::Row>> {
        let params = bind(values);
        let rows = self.conn.client()?.query(&self.stmt, &refs(&params));
        rows.map_err(|e| self.conn.seen(e))
    }
}

fn bind<'a>(values: &'a [ValueRef<'a>]) -> Vec<Param<'a>> {
    values.iter().map(|v| Param(*v)).collect()
}

fn refs<'a>(params: &'a [Param<'a>]) -> Vec<&'a (dyn postgres::types::ToSql + Sync)> {
    params
        .iter()
        .map(|p| p as &(dyn postgres::types::ToSql + Sync))
        .collect()
}

/// Rewrite SQLite's `?N` and `?` placeholders as PostgreSQL's `$N`,
/// leaving string literals, quoted names and comments alone.
pub fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    let mut last = 0u32;
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                out.push(c);
                for d in chars.by_ref() {
                    out.push(d);
                    if d == '\n' {
                        break;
                    }
                }
            }
            '?' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = if digits.is_empty() {
                    last + 1
                } else {
                    digits.parse().unwrap_or(last + 1)
                };
                last = last.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// A parameter, encoded as whatever type the server inferred for its place.
#[derive(Debug)]
struct Param<'a>(ValueRef<'a>);

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl postgres::types::ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        match self.0 {
            ValueRef::Null => Ok(IsNull::Yes),
            ValueRef::Integer(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(v)?.to_sql(ty, out),
                Type::BOOL => (v != 0).to_sql(ty, out),
                Type::FLOAT8 => (v as f64).to_sql(ty, out),
                Type::FLOAT4 => (v as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    v.to_string().as_str().to_sql(ty, out)
                }
                _ => Err(format!("cannot bind an integer to a {ty} parameter").into()),
            },
            ValueRef::Real(v) => match *ty {
                Type::FLOAT8 => v.to_sql(ty, out),
                Type::FLOAT4 => (v as f32).to_sql(ty, out),
                _ => Err(format!("cannot bind a real to a {ty} parameter").into()),
            },
            ValueRef::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    s.to_sql(ty, out)
                }
                _ => Err(format!("cannot bind text to a {ty} parameter").into()),
            },
            ValueRef::Blob(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(format!("cannot bind a blob to a {ty} parameter").into()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

/// Column `i` of `row` as a value.
pub fn column(row: &postgres::Row, i: usize) -> Result<ValueRef<'_>> {
    let ty = row
        .columns()
        .get(i)
        .ok_or_else(|| Error::conversion(format!("no column {i}")))?
        .type_()
        .clone();
    let v = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(ValueRef::Integer),
        Type::INT4 => row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| ValueRef::Integer(v.into())),
        Type::INT2 => row
            .try_get::<_, Option<i16>>(i)?
            .map(|v| ValueRef::Integer(v.into())),
        Type::BOOL => row
            .try_get::<_, Option<bool>>(i)?
            .map(|v| ValueRef::Integer(v.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(ValueRef::Real),
        Type::FLOAT4 => row
            .try_get::<_, Option<f32>>(i)?
            .map(|v| ValueRef::Real(v.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
            row.try_get::<_, Option<&str>>(i)?.map(ValueRef::Text)
        }
        Type::BYTEA => row.try_get::<_, Option<&[u8]>>(i)?.map(ValueRef::Blob),
        other => {
            return Err(Error::conversion(format!(
                "column {} has type {other}, which the storage interface does not read \
                 (cast it to BIGINT or TEXT in the query)",
                row.columns()[i].name()
            )))
        }
    };
    Ok(v.unwrap_or(ValueRef::Null))
}

/// `url` with its password replaced by `***` (in the authority part and in
/// a `password=` query parameter).
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest = &out[scheme_end + 3..];
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..authority_end].rfind('@') {
            if let Some(colon) = rest[..at].find(':') {
                let start = scheme_end + 3 + colon + 1;
                let end = scheme_end + 3 + at;
                out.replace_range(start..end, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_outside_literals() {
        assert_eq!(
            placeholders("SELECT ?1, '?2', \"a?\" FROM t WHERE a = ?2 AND b = ? -- ?\n"),
            "SELECT $1, '?2', \"a?\" FROM t WHERE a = $2 AND b = $3 -- ?\n"
        );
        assert_eq!(placeholders("VALUES (?, ?, ?)"), "VALUES ($1, $2, $3)");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://collab:s3cret@db:5432/collab"),
            "postgres://collab:***@db:5432/collab"
        );
        assert_eq!(
            redact("postgres://collab@db/collab?password=x&sslmode=disable"),
            "postgres://collab@db/collab?password=***&sslmode=disable"
        );
        assert_eq!(
            redact("postgres:///collab?host=/run/postgresql"),
            "postgres:///collab?host=/run/postgresql"
        );
    }
}
