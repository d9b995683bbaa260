//! Fair shares: how much of one scarce resource (authenticated SSH
//! connections, event watchers, lease waiters) a single principal may hold
//! at once, so one key — even a read-only one — can never take the whole
//! server-wide pool and deny everyone else.
//!
//! The principal here is the key's `SHA256:` fingerprint, the thing
//! admission is decided on: a fleet of agents each with its own key gets a
//! share per agent, and a governed name with many keys cannot be starved
//! by one of them. Shares are counted, not reserved: a principal holding
//! little costs nothing, and an entry is forgotten when its count is zero.
//!
//! A pool may also have a server-wide cap on the units of all principals
//! together ([`Shares::with_total`]; running verbs, terminal UI and MCP
//! sessions, `limits::running`): then a refusal says which cap it met.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Counts = Arc<Mutex<Held>>;

/// Units held, per principal and in all.
#[derive(Debug, Default)]
struct Held {
    by: HashMap<String, usize>,
    all: usize,
}

/// Per-principal counters for one resource, each capped at `limit`, and
/// all together at `total`. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct Shares {
    limit: usize,
    total: usize,
    counts: Counts,
}

/// Which cap refused a unit ([`Shares::take_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The principal holds its share (the share).
    Principal(usize),
    /// Every principal together holds the server-wide cap (the cap).
    Server(usize),
}

/// One unit of a principal's share; dropping it gives the unit back.
#[derive(Debug)]
pub struct Share {
    principal: String,
    counts: Counts,
}

impl Shares {
    /// A share of `limit` per principal, with no server-wide cap of its
    /// own (the pool's cap is counted elsewhere).
    pub fn new(limit: usize) -> Shares {
        Shares::with_total(limit, usize::MAX)
    }

    /// A share of `limit` per principal, and at most `total` units held by
    /// all principals together.
    pub fn with_total(limit: usize, total: usize) -> Shares {
        Shares {
            limit,
            total,
            counts: Arc::default(),
        }
    }

    /// One more unit for `principal`, or `None` when it holds its share
    /// (or the pool is full).
    pub fn try_take(&self, principal: &str) -> Option<Share> {
        self.try_take_within(principal).ok()
    }

    /// One more unit for `principal`, or which cap refused it.
    pub fn try_take_within(&self, principal: &str) -> Result<Share, Full> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let held = counts.by.get(principal).copied().unwrap_or(0);
        if held >= self.limit {
            return Err(Full::Principal(self.limit));
        }
        if counts.all >= self.total {
            return Err(Full::Server(self.total));
        }
        counts.by.insert(principal.to_string(), held + 1);
        counts.all += 1;
        Ok(Share {
            principal: principal.to_string(),
            counts: self.counts.clone(),
        })
    }

    /// [`try_take_within`](Self::try_take_within), with a refusal counted
    /// in `/metrics` (`what`, and `per_principal` or `server_limit`) and
    /// logged at most once a minute (per principal, or per `what`).
    pub fn take_within(
        &self,
        what: &'static str,
        server_limit: &'static str,
        principal: &str,
    ) -> Result<Share, Full> {
        self.try_take_within(principal)
            .inspect_err(|full| match *full {
                Full::Principal(limit) => {
                    note_refusal(what, principal, || format!("{limit} held with this key"))
                }
                Full::Server(total) => note_server_refusal(what, server_limit, total),
            })
    }

    /// [`try_take`](Self::try_take), with a refusal counted and logged
    /// ([`note_refusal`] as `what`, `detail` given the limit); `Err` is the
    /// limit, for the caller's message.
    pub fn take(
        &self,
        what: &'static str,
        principal: &str,
        detail: impl FnOnce(usize) -> String,
    ) -> Result<Share, usize> {
        self.try_take(principal).ok_or_else(|| {
            note_refusal(what, principal, || detail(self.limit));
            self.limit
        })
    }

    /// Units `principal` holds now.
    pub fn held(&self, principal: &str) -> usize {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.by.get(principal).copied().unwrap_or(0)
    }

    /// Units held now by every principal together.
    pub fn held_in_all(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).all
    }

    /// Principals holding at least one unit now.
    pub fn principals(&self) -> usize {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by
            .len()
    }

    pub fn limit(&self) -> usize {
        self.limit
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.by.get_mut(&self.principal) {
            *n -= 1;
            if *n == 0 {
                counts.by.remove(&self.principal);
            }
            counts.all -= 1;
        }
    }
}

/// Count a share refusal in `/metrics` (`what`, `per_principal`: the
/// principal is never a label, its cardinality is the attacker's) and log
/// it at most once a minute per principal and resource.
fn note_refusal(what: &'static str, principal: &str, detail: impl FnOnce() -> String) {
    crate::metrics::refused(what, "per_principal");
    let due = LOG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .due(what, principal, Instant::now());
    if due {
        tracing::warn!(
            principal,
            "{what}: share per principal reached: {} (logged at most once a minute per principal)",
            detail()
        );
    } else {
        tracing::debug!(
            principal,
            "{what}: share per principal reached: {}",
            detail()
        );
    }
}

/// Count a refusal at a pool's server-wide cap in `/metrics` (`what`,
/// `limit`) and log it at most once a minute per resource.
fn note_server_refusal(what: &'static str, limit: &'static str, total: usize) {
    crate::metrics::refused(what, limit);
    let due = LOG
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .due(what, "", Instant::now());
    if due {
        tracing::warn!(
            "{what}: {limit} reached: {total} held server-wide (logged at most once a minute)"
        );
    } else {
        tracing::debug!("{what}: {limit} reached: {total} held server-wide");
    }
}

/// When each (resource, principal) was last logged (refusals at a
/// server-wide cap under the empty principal, which no key has). Bounded: past
/// [`RefusalLog::MAX`] entries the stale ones are dropped, and if a
/// key-cycling flood still fills it, it starts over (a few extra lines,
/// never unbounded memory).
static LOG: std::sync::LazyLock<Mutex<RefusalLog>> = std::sync::LazyLock::new(Mutex::default);

#[derive(Debug, Default)]
struct RefusalLog {
    last: HashMap<(&'static str, String), Instant>,
}

impl RefusalLog {
    const MAX: usize = 4096;
    const EVERY: Duration = Duration::from_secs(60);

    fn due(&mut self, what: &'static str, principal: &str, now: Instant) -> bool {
        let key = (what, principal.to_string());
        if self
            .last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < Self::EVERY)
        {
            return false;
        }
        if self.last.len() >= Self::MAX {
            self.last
                .retain(|_, at| now.duration_since(*at) < Self::EVERY);
            if self.last.len() >= Self::MAX {
                self.last.clear();
            }
        }
        self.last.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_holds_at_most_its_share_and_others_are_unaffected() {
        let shares = Shares::new(2);
        let a1 = shares.try_take("SHA256:a").unwrap();
        let _a2 = shares.try_take("SHA256:a").unwrap();
        assert!(shares.try_take("SHA256:a").is_none());
        let _b = shares.try_take("SHA256:b").unwrap();
        assert_eq!((shares.held("SHA256:a"), shares.principals()), (2, 2));
        drop(a1);
        assert!(shares.try_take("SHA256:a").is_some());
        drop(_b);
        assert_eq!(shares.held("SHA256:b"), 0);
        assert_eq!(shares.principals(), 1);
    }

    #[test]
    fn a_pool_with_a_total_refuses_past_it_whoever_asks() {
        let shares = Shares::with_total(2, 3);
        let a1 = shares.try_take_within("a").unwrap();
        let _a2 = shares.try_take_within("a").unwrap();
        assert_eq!(shares.try_take_within("a").unwrap_err(), Full::Principal(2));
        let _b1 = shares.try_take_within("b").unwrap();
        assert_eq!(shares.held_in_all(), 3);
        // The pool is full: b is within its share but refused.
        assert_eq!(shares.try_take_within("b").unwrap_err(), Full::Server(3));
        drop(a1);
        assert_eq!(shares.held_in_all(), 2);
        assert!(shares.try_take_within("b").is_ok());
    }

    #[test]
    fn refusals_are_logged_once_a_minute_per_principal_and_resource() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        assert!(log.due("ssh", "a", t0));
        assert!(!log.due("ssh", "a", t0 + Duration::from_secs(59)));
        assert!(log.due("ssh", "b", t0));
        assert!(log.due("watch", "a", t0));
        assert!(log.due("ssh", "a", t0 + Duration::from_secs(60)));
        // A flood of distinct principals stays bounded.
        for i in 0..3 * RefusalLog::MAX {
            log.due("ssh", &format!("k{i}"), t0 + Duration::from_secs(61));
        }
        assert!(log.last.len() <= RefusalLog::MAX);
    }
}
