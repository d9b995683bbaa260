//! The plain types the storage interface and its PostgreSQL backend
//! share: how a transaction begins, one lease operation of a group call,
//! the per-connection statement cache.

use std::cell::RefCell;

/// How a transaction begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// A read (or a write that takes no lock first): SQLite `BEGIN DEFERRED`,
    /// PostgreSQL `BEGIN`.
    Deferred,
    /// A generic write that may touch more than one repository (webhooks,
    /// mirrors, settings, imports, a server merge, a cross-repository
    /// link): SQLite `BEGIN IMMEDIATE`; PostgreSQL the global key shared
    /// and the generic writes' key (`pg::GENERIC_WRITES_LOCK`) exclusive,
    /// so such writes are serial among themselves and with every
    /// repository write on every node, but run beside lease operations.
    Immediate,
    /// A generic write confined to one repository, outside the writer (a
    /// git hook's record of a push): SQLite `BEGIN IMMEDIATE`; PostgreSQL
    /// the global key and the generic writes' key both shared, and then
    /// the repository's key, waited for (`Connection::lock_repository`).
    /// Repository writes of different repositories run side by side; a
    /// generic write ([`Behavior::Immediate`]) excludes them all.
    Repository,
    /// The writer's groups of lease operations and repository writes
    /// (acquire, renew, release, break, expiry, `next`, reads; issue,
    /// patch and check writes): SQLite `BEGIN IMMEDIATE`; PostgreSQL the
    /// global key shared, nothing else up front. Each lease operation
    /// takes its issue's lock with `Connection::lock_issue`, each
    /// repository write its repository's with
    /// `Connection::lock_repository` (both tried, never waited for), and
    /// row locks wait at most a short `lock_timeout`: a busy operation
    /// fails with an error for which `Error::is_busy` holds and runs again
    /// in a later group.
    Concurrent,
    /// A whole-database write (migrations, `db migrate`'s copy, a
    /// repository rename): SQLite `BEGIN IMMEDIATE`; PostgreSQL the global
    /// key exclusive, which waits for every writer and excludes them all.
    Exclusive,
}

/// rusqlite's name, kept so the call sites read the same.
pub use Behavior as TransactionBehavior;

/// One lease operation in a call of PostgreSQL's `collab_lease_group`
/// (`Connection::call_group`): `kind` is `acquire`, `renew`, `release` or
/// `break`; `holder` is the breaker for a break; `seq1` and `seq2` the
/// provisional numbers of the events it may append (`seq2`: an acquire's
/// second).
#[derive(Debug, Clone, Copy)]
pub struct LeaseCall<'a> {
    pub kind: &'static str,
    pub repo: &'a str,
    pub issue_id: &'a str,
    pub holder: &'a str,
    pub ttl: Option<i64>,
    pub note: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub seq1: Option<i64>,
    pub seq2: Option<i64>,
}

impl LeaseCall<'_> {
    /// Whether every text can be a PostgreSQL text (none holds a NUL).
    pub fn sendable(&self) -> bool {
        [self.repo, self.issue_id, self.holder]
            .into_iter()
            .chain(self.note)
            .chain(self.reason)
            .all(|t| !t.contains('\0'))
    }
}

/// The per-connection statement cache of PostgreSQL connections.
pub(super) type StatementCache = RefCell<std::collections::HashMap<String, postgres::Statement>>;
